/**
 * Review minutes, measured (docs/audit.md): the time each reviewer spends on
 * each change, kept in `review_time`. The console adds what its review clock
 * counted (page visible and in use, with an idle cut-off); the CLI records its
 * first `status`/`diff` view of a change and counts from there to the decision.
 * A decision without either is unmeasured, never zero.
 */
import type { Pool } from 'pg';
import type { ReviewTime } from '../workflows/api';

/** The console's idle cut-off: without a key, pointer or scroll for this long, time stops. */
export const REVIEW_IDLE_MS = 120_000;
/** The most one report from the console may add (it reports every few seconds and when hidden). */
export const MAX_REPORT_MS = 15 * 60_000;
/** The CLI cannot tell a long read from a walk away: a longer gap from view to decision counts this much. */
export const CLI_REVIEW_CAP_MS = 30 * 60_000;

export interface ReviewKey {
  sessionId: string;
  /** The change's whole hash. */
  change: string;
  reviewer: string;
}

/** Whether `ms` is a time one console report may add. */
export function isReportableMs(ms: unknown): ms is number {
  return Number.isInteger(ms) && (ms as number) > 0 && (ms as number) <= MAX_REPORT_MS;
}

export class ReviewTimes {
  constructor(private readonly pool: Pool) {}

  /**
   * Adds console time to a reviewer's total on a change. The first report
   * dates the first view `ms` back; a total is never more than the time since then.
   */
  async addConsole(k: ReviewKey, ms: number): Promise<void> {
    await this.pool.query(
      `insert into review_time (session_id, change, reviewer, via, first_at, last_at, active_ms)
         values ($1, $2, $3, 'console', now() - make_interval(secs => $4::float8 / 1000), now(), $4)
       on conflict (session_id, change, reviewer, via) do update set
         last_at = now(),
         active_ms = least(review_time.active_ms + excluded.active_ms,
                           (extract(epoch from now() - review_time.first_at) * 1000)::bigint)`,
      [k.sessionId, k.change, k.reviewer, ms],
    );
  }

  /** The CLI showed the change to this reviewer (the first view is kept). */
  async viewedInCli(k: ReviewKey): Promise<void> {
    await this.pool.query(
      `insert into review_time (session_id, change, reviewer, via, first_at, last_at)
         values ($1, $2, $3, 'cli', now(), now()) on conflict do nothing`,
      [k.sessionId, k.change, k.reviewer],
    );
  }

  /** The CLI decides: the time from its first view to now (capped) becomes its total. */
  async decidedInCli(k: ReviewKey): Promise<void> {
    await this.pool.query(
      `update review_time set last_at = now(),
         active_ms = least((extract(epoch from now() - first_at) * 1000)::bigint, $4)
       where session_id = $1 and change = $2 and reviewer = $3 and via = 'cli'`,
      [k.sessionId, k.change, k.reviewer, CLI_REVIEW_CAP_MS],
    );
  }

  /** The reviewer's own measured time on the change, or undefined when nothing measured it. */
  async of(k: ReviewKey): Promise<ReviewTime | undefined> {
    const { rows } = await this.pool.query<{ via: 'console' | 'cli'; active_ms: string }>(
      `select via, active_ms from review_time where session_id = $1 and change = $2 and reviewer = $3
        order by active_ms desc`,
      [k.sessionId, k.change, k.reviewer],
    );
    if (!rows.length) return undefined;
    return { ms: rows.reduce((sum, r) => sum + Number(r.active_ms), 0), via: rows[0].via };
  }

  /** The changes of the session this reviewer has spent time on in the console. */
  async seenBy(sessionId: string, reviewer: string): Promise<string[]> {
    const { rows } = await this.pool.query<{ change: string }>(
      `select change from review_time where session_id = $1 and reviewer = $2 and via = 'console'`,
      [sessionId, reviewer],
    );
    return rows.map((r) => r.change);
  }
}
