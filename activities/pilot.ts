/**
 * The activities of parallel attempts and pilots (docs/pilot.md): the
 * operator's limits, a pilot's record of its sessions, what Temporal knows
 * of sessions started by an earlier run of the pilot, and the faults on
 * purpose that happen outside a sandbox (credentials rotated), with each
 * fault recorded in the session's audit trail.
 */
import { exec } from 'node:child_process';
import { recordEvent } from '../store/audit';
import type { Phase } from '../workflows/api';
import type { Database } from '../store/db';
import type { AuditTrail } from '../store/audit';
import type { Logger } from '../platform/log';
import type { GitHubSettings } from '../github/client';
import { deployEnv } from './publish';
import { tail } from '../sandbox';
import { sweepEscapedDefects } from '../figures/defects';
import { octokitFor } from '../github/client';

/**
 * A session as Temporal knows it: not started, running in a phase, or closed with an
 * outcome; `parent`: the workflow that started it as its child (none: started by a client).
 */
export type KnownSession =
  | { sessionId: string; state: 'missing' }
  | { sessionId: string; state: 'running' | 'closed'; phase?: Phase; parent?: string };

export interface PilotSessionRow {
  pilot: string;
  sessionId: string;
  task: string;
  tags: string[];
  configuration: string;
  attempt: number;
  faults: string[];
}

/** What pilots and parallel attempts use of the worker. */
export interface PilotDeps {
  db: Database;
  audit: AuditTrail;
  /** The operator's limits of parallel attempts and pilots (default 4 each), and the credentials-rotation drill's command. */
  operator?: { maxAttempts: number; pilotConcurrency: number; rotateCommand?: string };
  /** What Temporal knows of a session (a resumed pilot asks): not found, running in a phase, or closed; its parent. */
  sessionState?: (
    sessionId: string,
  ) => Promise<{ state: 'missing' } | { state: 'running' | 'closed'; phase?: Phase; parent?: string }>;
  /** The worker's GitHub credentials: merged changes are read for escaped defects. */
  github: GitHubSettings;
  /** How long after its merge a change is watched for escaped defects (ms). @default 14 days */
  defectWindowMs?: number;
  log: Logger;
}

export function createPilotActivities(deps: PilotDeps) {
  const { db, audit, log } = deps;
  const operator = deps.operator ?? { maxAttempts: 4, pilotConcurrency: 4 };
  return {
    /** What the operator allows: attempts of one task, sessions of a pilot working at once. */
    async operatorLimits(): Promise<{ maxAttempts: number; pilotConcurrency: number }> {
      return { maxAttempts: operator.maxAttempts, pilotConcurrency: operator.pilotConcurrency };
    },

    /** Which task, configuration and attempt a pilot's session is (before it starts; again on a retry). */
    async recordPilotSession(row: PilotSessionRow): Promise<void> {
      await db.pool.query(
        `insert into pilot_sessions (session_id, pilot, task, tags, configuration, attempt, faults)
         values ($1, $2, $3, $4, $5, $6, $7) on conflict (session_id) do nothing`,
        [row.sessionId, row.pilot, row.task, row.tags, row.configuration, row.attempt, row.faults],
      );
    },

    /** What Temporal knows of these sessions (a resumed pilot's, started by an earlier run). */
    async knownSessions(input: { sessionIds: string[] }): Promise<KnownSession[]> {
      if (!deps.sessionState) throw new Error('this worker cannot read sessions from Temporal');
      const known: KnownSession[] = [];
      for (const sessionId of input.sessionIds) known.push({ sessionId, ...(await deps.sessionState(sessionId)) });
      return known;
    },

    /**
     * Credentials rotated while a session waits for review: the operator's
     * DRYDOCK_ROTATE_COMMAND (say, a new GitHub token written to
     * GITHUB_TOKEN_FILE and the old one revoked), run on the worker with none
     * of its credentials in its environment.
     */
    async rotateCredentials(input: { sessionId: string }): Promise<{ rotated: boolean; detail: string }> {
      if (!operator.rotateCommand) return { rotated: false, detail: 'no DRYDOCK_ROTATE_COMMAND on the worker' };
      const ran = await new Promise<{ code: number; output: string }>((resolve) =>
        exec(operator.rotateCommand!, { env: deployEnv(process.env, [], {}) }, (err, stdout, stderr) =>
          resolve({ code: err ? ((err.code as number) ?? 1) : 0, output: stdout + stderr }),
        ),
      );
      log.warn({ sessionId: input.sessionId, exitCode: ran.code }, 'fault on purpose: credentials rotated');
      return { rotated: ran.code === 0, detail: `exit ${ran.code}: ${tail(ran.output, 300).trim()}` };
    },

    /** Merged drydock changes searched for escaped defects (the hourly schedule's run). */
    async sweepEscapedDefects(): Promise<{ searched: number; found: number }> {
      const github = deps.github;
      const { searched, found } = await sweepEscapedDefects({
        pool: db.pool,
        octokitFor: (owner, repo) => octokitFor(github, owner, repo, { contents: 'read', pull_requests: 'read' }),
        windowMs: deps.defectWindowMs ?? 14 * 86_400_000,
      });
      if (found.length) log.warn({ searched, found }, 'escaped defects found');
      return { searched, found: found.length };
    },

    /** A fault done to a session, in its audit trail (once per session and kind). */
    async recordFault(input: { sessionId: string; kind: string; applied: boolean; detail: string }): Promise<void> {
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: `fault/${input.kind}`,
        kind: 'fault',
        actor: 'drydock',
        data: { kind: input.kind, applied: input.applied, detail: input.detail },
      });
    },
  };
}
