/**
 * The change and its irreversible actions: the commit (made again in a
 * replacement sandbox), then push, pull request and deploy, each behind its
 * approval gate. Publishing runs on the worker; credentials never enter the sandbox.
 */
import type { ChangeSpec, CommitInput, CommitResult, Sandbox } from '../../sandbox/contract';
import type { SessionStatus } from '../api';
import { githubRepoOf } from '../rules/repo-url';
import { reviewedTogether } from '../rules/policy';
import { describeVerification, screenshotsOf } from '../rules/verification';
import { gate, PAST } from './approval';
import { anyHost, onHost } from './proxies';
import { inSandbox } from './sandbox';
import type { SessionRun } from './state';
import { tellForge } from './trigger';

/** The agent as the commit's Drydock-Agent trailer names it. */
function agentName(agent: SessionRun['input']['agent']): string {
  if (agent.kind === 'openai') return `openai ${agent.model ?? ''}`.trim();
  if (agent.kind === 'cli')
    return `cli ${typeof agent.command === 'string' ? agent.command : (agent.command?.[0] ?? '')}`;
  return 'script';
}

/** What drydock's commit of the session's change is made of in sandbox `sb`. */
function changeSpec(run: SessionRun, sb: Sandbox): ChangeSpec {
  const { input } = run;
  run.commitDate ??= new Date().toISOString();
  const round = run.status.round ?? 1;
  const request = round > 1 ? run.status.rounds?.at(-1)?.request.split('\n')[0] : undefined;
  return {
    sessionId: run.sessionId,
    repoUrl: input.repo.url,
    branch: run.branch,
    message: (request ? `drydock: follow-up ${round}: ${request}` : `drydock: ${input.task}`).slice(0, 500),
    agent: agentName(input.agent),
    baseCommit: sb.baseCommit,
    // A follow-up round's commit goes on the one pushed last, so the branch only moves forward.
    parent: run.status.pushed?.commit ?? sb.baseCommit,
    date: run.commitDate,
  };
}

/** A later round: the interdiffs since each earlier round's change, for the reviewer who saw it. */
function interdiffsOf(run: SessionRun): Pick<CommitInput, 'interdiffs'> {
  const round = run.status.round ?? 1;
  const since = (run.status.rounds ?? [])
    .filter((r) => r.round < round && r.commit)
    .map((r) => ({ round: r.round, commit: r.commit! }));
  return since.length ? { interdiffs: { round, since } } : {};
}

/** drydock's commit of the sandbox's change (the same tree, parent and date give the same commit). */
export async function commitChange(run: SessionRun, sb: Sandbox, takeNotes = false): Promise<CommitResult> {
  const attaches = run.status.attaches;
  const result = await onHost(sb).commitChanges({
    sandbox: sb.name,
    ...changeSpec(run, sb),
    ...interdiffsOf(run),
    ...(takeNotes ? { takeNotes } : {}),
  });
  run.committedIn = sb.name;
  // The edits made by hand before this commit are in it (unless someone attached during it).
  if (!run.status.attached && run.status.attaches === attaches) run.uncommittedEditsBy = undefined;
  return result;
}

/** Push, then the pull request and the deploy if the session asks for them: each once approved. */
export async function publish(run: SessionRun, change: CommitResult): Promise<void> {
  const pr = run.input.publish.pullRequest;
  if (reviewedTogether(run.policy, Boolean(pr))) {
    await gate(run, 'pull_request', change, ['push']);
    await push(run, change);
  } else {
    await gate(run, 'push', change);
    if (run.input.publish.push === false) {
      await run.note('publish', 'nothing published (publish.push is false): the decision is recorded');
      return;
    }
    await push(run, change);
    if (pr) await gate(run, 'pull_request', change);
  }
  if (pr) await openPullRequest(run, change, pr === true ? { draft: false } : pr);
  if (run.input.publish.deploy) {
    await gate(run, 'deploy', change);
    run.status.deployed = await run.track('deploy', () =>
      anyHost.deploy({
        sessionId: run.sessionId,
        repoUrl: run.input.repo.url,
        branch: run.branch,
        commit: change.commit,
      }),
    );
  }
}

async function push(run: SessionRun, change: CommitResult): Promise<void> {
  run.status.pushed = await run.track(`push ${run.branch}`, () =>
    inSandbox(
      run,
      async (sb) => {
        // A replacement sandbox has the change from the checkpoint, not yet as a snapshot.
        if (run.committedIn !== sb.name) await commitChange(run, sb);
        return onHost(sb).pushBranch({
          sandbox: sb.name,
          ...changeSpec(run, sb),
          commit: change.commit,
          author: change.author,
          round: run.status.round ?? 1,
        });
      },
      // The approved commit is in the host's mirror (commitChanges made it there): a parked session pushes without a sandbox.
      { mayStayParked: true },
    ),
  );
  const round = run.status.rounds?.at(-1);
  if (round) round.pushed = true;
}

type PullRequestSpec = { draft: boolean; repo?: string; base?: string; forge?: 'github' | 'gitlab' | 'gitea' };

async function openPullRequest(run: SessionRun, change: CommitResult, spec: PullRequestSpec): Promise<void> {
  const { input } = run;
  const forge = spec.forge ?? input.trigger?.forge;
  run.status.pullRequest = await run.track('pull request', async (record) => {
    const opened = await anyHost.openPullRequest({
      sessionId: run.sessionId,
      repo: spec.repo ?? githubRepoOf(input.repo.url)!,
      head: run.branch,
      base: spec.base,
      draft: spec.draft,
      title: `drydock: ${input.task.split('\n')[0]}`.slice(0, 120),
      body: pullRequestBody(input.task, run.status, change),
      round: run.status.round ?? 1,
      // The forge: the session's, else the one its repo URL is on (the worker's registry), else GitHub.
      ...(forge ? { forge } : {}),
      repoUrl: input.repo.url,
    });
    record.detail = `${opened.created ? 'opened' : 'updated'} ${opened.url}`;
    return opened;
  });
  await tellForge(run, 'pull_request');
}

/** The pull request's description: what was asked, what changed, how it was checked, who approved. */
function pullRequestBody(task: string, state: SessionStatus, change: CommitResult): string {
  const approvals = state.decisions.map((d) => `- ${d.action}: ${PAST[d.decision]} by ${d.by} at ${d.at}`);
  const screenshots = screenshotsOf(state.verification).map((ref) => `- screenshot: \`${ref}\` (artifact store)`);
  return [
    '## Task',
    task,
    '',
    '## Change',
    '```',
    change.diffstat || '(no diffstat)',
    '```',
    `Commit \`${change.commit}\` on \`${state.branch}\`, change ${change.changeHash.slice(0, 12)}.`,
    '',
    '## Verification',
    describeVerification(state.verification),
    ...screenshots,
    '',
    '## Approvals',
    ...(approvals.length ? approvals : ['- none required by policy']),
    ...followupLines(state),
  ].join('\n');
}

function followupLines(state: SessionStatus): string[] {
  const later = (state.rounds ?? []).filter((r) => r.round > 1);
  if (later.length === 0) return [];
  return ['', '## Follow-ups', ...later.map((r) => `- round ${r.round} (${r.by}): ${r.request.split('\n')[0]}`)];
}
