/**
 * The CLI's side of review minutes (docs/audit.md): `drydock status` and
 * `drydock diff` record the first view of the change waiting for approval,
 * and `drydock approve|reject` counts from there to the decision. `drydock
 * diff` prints the change, or what changed since an earlier round.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import type { Config } from '../platform/config';
import { getStatus } from '../platform/sessions';
import { openDatabase } from '../store/db';
import { ReviewTimes, type ReviewKey } from '../review/review-time';
import { roundDiffName } from '../review/rounds';
import type { ReviewTime, SessionStatus } from '../workflows/api';

/** Runs `fn` over the review-time store; a database that cannot be opened leaves the review unmeasured. */
async function withReviewTimes<T>(config: Config, fn: (times: ReviewTimes) => Promise<T>): Promise<T | undefined> {
  try {
    const db = await openDatabase(config);
    try {
      return await fn(new ReviewTimes(db.pool));
    } finally {
      await db.close();
    }
  } catch (err) {
    process.stderr.write(`drydock: review time not recorded (${(err as Error).message})\n`);
    return undefined;
  }
}

/** The status was shown to `reviewer`: the first view of the change waiting for approval. */
export async function recordCliView(config: Config, s: SessionStatus, reviewer: string): Promise<void> {
  const change = s.pendingApproval?.change;
  if (!change) return;
  await withReviewTimes(config, (t) => t.viewedInCli({ sessionId: s.sessionId, change, reviewer }));
}

/** The decider's review time on `change`, counted from the CLI's view to now; undefined: unmeasured. */
export async function cliDecisionReview(config: Config, key: ReviewKey): Promise<ReviewTime | undefined> {
  return withReviewTimes(config, async (t) => {
    await t.decidedInCli(key);
    return t.of(key);
  });
}

/**
 * `drydock diff <session> [--since <round>]`: the change as the console shows
 * it (this machine's artifact store), or what changed since round `since`;
 * else the diffstat kept in status. Records the view.
 */
export async function printDiff(
  client: Client,
  config: Config,
  id: string,
  opts: { since?: number; reviewer: string },
): Promise<number> {
  const s = await getStatus(client, id);
  const round = s.round ?? 1;
  const name = opts.since ? roundDiffName(round, opts.since) : 'change.diff';
  const dir = path.join(config.DRYDOCK_DATA_DIR, 'artifacts');
  const diff = await readFile(path.join(dir, id, name), 'utf8').catch(() => undefined);
  await recordCliView(config, s, opts.reviewer);
  if (diff !== undefined) {
    process.stdout.write(diff);
    return 0;
  }
  if (opts.since) {
    console.error(`drydock: no diff of round ${round} since round ${opts.since} on this machine`);
    return 1;
  }
  console.log(s.agent?.diffstat || 'no change');
  return 0;
}
