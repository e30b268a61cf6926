/**
 * The context of a webhook-started session's task, read from GitHub by the
 * worker (never the sandbox): the issue and its latest comments, a pull
 * request's description and files, a failed run's jobs, annotations and log
 * tail. All of it is untrusted text: bounded here, then scrubbed and put
 * into the task between markers as data (forge/context.ts).
 */
import type { Octokit } from '@octokit/rest';
import type { TriggerOrigin } from '../workflows/input';
import { repoRef } from './writes';
import { CONTEXT_LIMITS, cut, logTail, type ContextSection } from '../forge/context';

export { CONTEXT_LIMITS, logTail, taskWithContext, type ContextSection } from '../forge/context';

/** What GitHub holds about where the session came from. */
export async function readTriggerContext(octokit: Octokit, origin: TriggerOrigin): Promise<ContextSection[]> {
  if (origin.kind === 'check_run') return failedCheckRun(octokit, origin.repo, origin.run!);
  if (origin.kind === 'workflow_run') return failedWorkflowRun(octokit, origin.repo, origin.run!);
  if (origin.pullRequest) return pullRequest(octokit, origin.repo, origin.issue!);
  return issueWithComments(octokit, origin.repo, origin.issue!);
}

async function issueWithComments(octokit: Octokit, repo: string, number: number): Promise<ContextSection[]> {
  const where = { ...repoRef(repo), issue_number: number };
  const { data: issue } = await octokit.issues.get(where);
  const { data: comments } = await octokit.issues.listComments({ ...where, per_page: 100 });
  // drydock's own comments (acknowledgements, links) are not context.
  const latest = comments.filter((c) => !c.body?.includes('<!-- drydock:')).slice(-CONTEXT_LIMITS.comments);
  return [
    { label: `issue #${number}: title`, text: cut(issue.title, CONTEXT_LIMITS.title) },
    { label: `issue #${number}: description`, text: cut(issue.body, CONTEXT_LIMITS.body) },
    ...latest.map((c) => ({
      label: `comment by ${c.user?.login ?? 'someone'} at ${c.created_at}`,
      text: cut(c.body, CONTEXT_LIMITS.comment),
    })),
  ];
}

async function pullRequest(octokit: Octokit, repo: string, number: number): Promise<ContextSection[]> {
  const where = { ...repoRef(repo), pull_number: number };
  const { data: pr } = await octokit.pulls.get(where);
  const { data: files } = await octokit.pulls.listFiles({ ...where, per_page: 100 });
  const summary = files
    .slice(0, CONTEXT_LIMITS.files)
    .map((f) => `${f.status} ${f.filename} (+${f.additions} -${f.deletions})`);
  if (files.length > CONTEXT_LIMITS.files) summary.push(`[... ${files.length - CONTEXT_LIMITS.files} more files]`);
  return [
    { label: `pull request #${number}: title`, text: cut(pr.title, CONTEXT_LIMITS.title) },
    { label: `pull request #${number}: description`, text: cut(pr.body, CONTEXT_LIMITS.body) },
    { label: `pull request #${number}: changed files`, text: summary.join('\n') || '(none)' },
  ];
}

async function failedCheckRun(octokit: Octokit, repo: string, id: number): Promise<ContextSection[]> {
  const { data: run } = await octokit.checks.get({ ...repoRef(repo), check_run_id: id });
  const output = [run.output?.title, run.output?.summary].filter(Boolean).join('\n');
  return [
    {
      label: 'failed check',
      text: `${run.name}: ${run.conclusion}${output ? `\n${cut(output, CONTEXT_LIMITS.comment)}` : ''}`,
    },
    ...(await jobEvidence(octokit, repo, id)),
  ];
}

async function failedWorkflowRun(octokit: Octokit, repo: string, id: number): Promise<ContextSection[]> {
  const { data } = await octokit.actions.listJobsForWorkflowRun({ ...repoRef(repo), run_id: id, per_page: 100 });
  const failed = data.jobs.filter((j) => j.conclusion === 'failure' || j.conclusion === 'timed_out').slice(0, 3);
  const sections: ContextSection[] = [];
  for (const job of failed) {
    const step = job.steps?.find((s) => s.conclusion === 'failure' || s.conclusion === 'timed_out');
    sections.push({
      label: `failed job ${job.id}`,
      text: `${job.name}: ${job.conclusion}${step ? `, at step ${step.number} "${step.name}"` : ''}`,
    });
    sections.push(...(await jobEvidence(octokit, repo, job.id)));
  }
  return sections.length ? sections : [{ label: 'failed run', text: `run ${id}: no failed job found` }];
}

/** A job's (= its check run's) annotations and the tail of its log; a log GitHub has not kept is skipped. */
async function jobEvidence(octokit: Octokit, repo: string, jobId: number): Promise<ContextSection[]> {
  const where = repoRef(repo);
  const { data: annotations } = await octokit.checks.listAnnotations({ ...where, check_run_id: jobId, per_page: 50 });
  const sections: ContextSection[] = [];
  if (annotations.length) {
    const lines = annotations
      .slice(0, CONTEXT_LIMITS.annotations)
      .map(
        (a) =>
          `${a.annotation_level} ${a.path}:${a.start_line}${a.title ? ` ${a.title}` : ''}: ${cut(a.message, CONTEXT_LIMITS.annotation)}`,
      );
    sections.push({ label: `annotations of job ${jobId}`, text: lines.join('\n') });
  }
  try {
    const { data } = await octokit.actions.downloadJobLogsForWorkflowRun({ ...where, job_id: jobId });
    sections.push({ label: `end of the log of job ${jobId}`, text: logTail(String(data)) });
  } catch (err) {
    if ((err as { status?: number }).status !== 404 && (err as { status?: number }).status !== 410) throw err;
  }
  return sections;
}
