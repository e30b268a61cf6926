/**
 * Escaped defects: a merged drydock change that was reverted, or whose lines a
 * fix changed, within a window after its merge (DRYDOCK_DEFECT_WINDOW). Found
 * from GitHub (github/merged-changes.ts) by a sweep the worker's schedule
 * runs; the rules that decide are pure functions here.
 */
import type { Octokit } from '@octokit/rest';
import type { Pool } from 'pg';
import { commitsAfter, mergedChange, type LaterCommit, type MergedChange } from '../github/merged-changes';
import { escapedDefectsFound } from '../platform/metrics';

export type DefectKind = 'revert' | 'fix';

export interface EscapedDefect {
  kind: DefectKind;
  commit: string;
  committedAt: string;
  /** The commit's subject, and for a fix the lines it changed. */
  summary: string;
}

/** A commit message that says it fixes something. */
export const FIX_MESSAGE = /\b(fix(es|ed)?|bug ?fix|hotfix|regression|broke|broken)\b/i;

/** Whether `message` reverts the change: git's "This reverts commit <sha>" of one of its commits, or GitHub's `Revert "<title>"`. */
export function revertsChange(
  message: string,
  change: Pick<MergedChange, 'mergeCommit' | 'commits' | 'title'>,
): boolean {
  const shas = [change.mergeCommit, ...change.commits];
  const reverted = [...message.matchAll(/This reverts commit ([0-9a-f]{7,40})/g)].map((m) => m[1]);
  if (reverted.some((r) => shas.some((sha) => sha.startsWith(r)))) return true;
  const subject = message.split('\n')[0];
  return subject === `Revert "${change.title}"`;
}

/** Lines a patch adds (or removes), trimmed, without the trivial ones (blank, a lone brace or bracket). */
export function patchLines(patch: string, sign: '+' | '-'): string[] {
  return patch
    .split('\n')
    .filter((l) => l.startsWith(sign) && !l.startsWith(`${sign}${sign}${sign}`))
    .map((l) => l.slice(1).trim())
    .filter((l) => l.replace(/[\s{}()[\];,]/g, '').length >= 3);
}

/** The change's added lines that a later commit removed or rewrote, by file. */
export function linesTouched(change: Record<string, string>, later: Record<string, string>): string[] {
  const touched: string[] = [];
  for (const [file, patch] of Object.entries(later)) {
    const added = new Set(change[file] ? patchLines(change[file], '+') : []);
    for (const line of patchLines(patch, '-')) if (added.has(line)) touched.push(`${file}: ${line}`);
  }
  return touched;
}

/** The first revert, or every fix that touched the change's lines, among the commits after its merge. */
export function escapedDefects(change: MergedChange, later: LaterCommit[]): EscapedDefect[] {
  const found: EscapedDefect[] = [];
  for (const c of later) {
    const subject = c.message.split('\n')[0].slice(0, 200);
    if (revertsChange(c.message, change)) {
      found.push({ kind: 'revert', commit: c.sha, committedAt: c.committedAt, summary: subject });
      break; // reverted: later commits no longer touch the change
    }
    if (!FIX_MESSAGE.test(c.message) || !c.patches) continue;
    const touched = linesTouched(change.patches, c.patches);
    if (touched.length > 0) {
      const lines = touched.slice(0, 3).join('; ');
      found.push({ kind: 'fix', commit: c.sha, committedAt: c.committedAt, summary: `${subject} (${lines})` });
    }
  }
  return found;
}

/** The merged changes whose window is not searched through yet: their pull request and how far to look. */
export async function changesToSearch(
  pool: Pool,
  windowMs: number,
  now: Date,
): Promise<{ sessionId: string; prUrl: string; mergedAt: Date; until: Date }[]> {
  const { rows } = await pool.query<{ session_id: string; pr_url: string; merged_at: Date }>(
    `select m.session_id, m.pr_url, m.merged_at from session_metrics m
       left join defect_checks c on c.session_id = m.session_id
      where m.merged and m.pr_url is not null and m.merged_at is not null
        and (c.session_id is null or c.checked_until < c.window_ends)
      order by m.merged_at`,
  );
  return rows.map((r) => {
    const windowEnds = new Date(r.merged_at.getTime() + windowMs);
    return {
      sessionId: r.session_id,
      prUrl: r.pr_url,
      mergedAt: r.merged_at,
      until: windowEnds < now ? windowEnds : now,
    };
  });
}

/** Records what a search found (each defect once) and how far it looked. */
export async function recordSearch(
  pool: Pool,
  search: { sessionId: string; until: Date; windowEnds: Date },
  defects: EscapedDefect[],
): Promise<EscapedDefect[]> {
  const added: EscapedDefect[] = [];
  for (const d of defects) {
    const { rowCount } = await pool.query(
      `insert into escaped_defects (session_id, commit, kind, committed_at, summary) values ($1, $2, $3, $4, $5)
       on conflict (session_id, commit) do nothing`,
      [search.sessionId, d.commit, d.kind, d.committedAt, d.summary.slice(0, 500)],
    );
    if (rowCount) added.push(d);
  }
  await pool.query(
    `insert into defect_checks (session_id, checked_until, window_ends) values ($1, $2, $3)
     on conflict (session_id) do update set checked_until = excluded.checked_until, window_ends = excluded.window_ends`,
    [search.sessionId, search.until, search.windowEnds],
  );
  return added;
}

/** owner, repo and number of a pull request's URL (github.com's or a GitHub Enterprise's). */
export function pullRequestOf(url: string): { owner: string; repo: string; number: number } | undefined {
  const m = /\/([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)\/pull\/(\d+)\/?$/.exec(url);
  return m ? { owner: m[1], repo: m[2], number: Number(m[3]) } : undefined;
}

export interface SweepDeps {
  pool: Pool;
  /** An Octokit that may read the repository (the worker's GitHub credentials). */
  octokitFor(owner: string, repo: string): Promise<Octokit>;
  windowMs: number;
  now?: () => Date;
}

/**
 * Searches every merged change whose window is still open (or was never
 * searched to its end): what was found since the last search is recorded.
 * Returns the defects it added.
 */
export async function sweepEscapedDefects(deps: SweepDeps): Promise<{ searched: number; found: EscapedDefect[] }> {
  const now = deps.now?.() ?? new Date();
  const due = await changesToSearch(deps.pool, deps.windowMs, now);
  const found: EscapedDefect[] = [];
  for (const item of due) {
    const pr = pullRequestOf(item.prUrl);
    if (!pr) continue;
    const octokit = await deps.octokitFor(pr.owner, pr.repo);
    const repo = { owner: pr.owner, repo: pr.repo };
    const change = await mergedChange(octokit, repo, pr.number);
    const windowEnds = new Date(item.mergedAt.getTime() + deps.windowMs);
    const defects = change
      ? escapedDefects(change, await commitsAfter(octokit, repo, change, item.until, (m) => FIX_MESSAGE.test(m)))
      : [];
    const added = await recordSearch(deps.pool, { sessionId: item.sessionId, until: item.until, windowEnds }, defects);
    for (const d of added) escapedDefectsFound.inc({ kind: d.kind });
    found.push(...added);
  }
  return { searched: due.length, found };
}
