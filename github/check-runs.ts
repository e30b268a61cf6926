/**
 * A session's check run on GitHub (with a GitHub App: check runs are the
 * Apps' API): one run named `drydock` per session on the commit it reports
 * on, found again by its external id and updated in place, its failing tests
 * as annotations on their lines. GitHub appends annotations on every update,
 * so they are sent once: to a run that has none yet. The failures come from
 * the sandbox: annotations only on the files the change touched, as plain
 * text without mentions (github/sandbox-text.ts).
 */
import type { Octokit } from '@octokit/rest';
import type { TestReport } from '../workflows/api';
import { withoutMentions } from './sandbox-text';
import type { RepoRef } from './writes';

export const CHECK_NAME = 'drydock';

/** GitHub takes at most 50 annotations per request. */
const MAX_ANNOTATIONS = 50;

export type CheckConclusion = 'success' | 'failure' | 'cancelled' | 'timed_out' | 'neutral';

export interface CheckReport {
  /** The session: the run's external id. */
  sessionId: string;
  /** Undefined while the session runs. */
  conclusion?: CheckConclusion;
  title: string;
  summary: string;
  detailsUrl: string;
  failures?: TestReport['failures'];
  /** The files the session's change touched: the only ones annotated. */
  changedFiles?: string[];
}

export interface Annotation {
  path: string;
  start_line: number;
  end_line: number;
  annotation_level: 'failure';
  title: string;
  message: string;
}

/**
 * The failing tests that name a place in a file of the change, as
 * annotations on their lines (a report naming any other path of the repo
 * would put drydock's words there).
 */
export function annotationsOf(failures: TestReport['failures'] = [], changedFiles: string[] = []): Annotation[] {
  const changed = new Set(changedFiles);
  return failures
    .filter((f): f is typeof f & { file: string; line: number } => Boolean(f.file && f.line && changed.has(f.file)))
    .slice(0, MAX_ANNOTATIONS)
    .map((f) => ({
      path: f.file,
      start_line: f.line,
      end_line: f.line,
      annotation_level: 'failure',
      title: withoutMentions(f.name).slice(0, 255),
      message: withoutMentions(f.message || 'failed').slice(0, 64_000),
    }));
}

/** Creates or updates the session's check run on `sha`; resolves with its id. */
export async function upsertCheckRun(
  octokit: Octokit,
  where: RepoRef & { sha: string },
  report: CheckReport,
): Promise<{ id: number; created: boolean }> {
  const { owner, repo, sha } = where;
  const { data } = await octokit.checks.listForRef({ owner, repo, ref: sha, check_name: CHECK_NAME, filter: 'all' });
  const found = data.check_runs.find((r) => r.external_id === report.sessionId);
  const annotations = found?.output.annotations_count ? [] : annotationsOf(report.failures, report.changedFiles);
  const output = {
    title: report.title.slice(0, 255),
    summary: report.summary.slice(0, 60_000),
    ...(annotations.length ? { annotations } : {}),
  };
  const state = report.conclusion
    ? { status: 'completed' as const, conclusion: report.conclusion, completed_at: new Date().toISOString() }
    : { status: 'in_progress' as const };
  if (found) {
    await octokit.checks.update({
      owner,
      repo,
      check_run_id: found.id,
      ...state,
      output,
      details_url: report.detailsUrl,
    });
    return { id: found.id, created: false };
  }
  const { data: run } = await octokit.checks.create({
    owner,
    repo,
    name: CHECK_NAME,
    head_sha: sha,
    external_id: report.sessionId,
    details_url: report.detailsUrl,
    ...state,
    output,
  });
  return { id: run.id, created: true };
}
