/** What every drydock container shares: its name, where drydock keeps state inside it, and how its loss fails. */
import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import { SandboxNotFound } from '../lib/sandbox';

/** Where the sandbox keeps per-step state (see sandbox-images/base/drydock-run). */
export const STATE_DIR = '/home/drydock/.drydock';

/** Container name from the session id (and replacement number): the idempotency key of provisioning. */
export function sandboxName(sessionId: string, generation = 0): string {
  const safe = sessionId.replace(/[^A-Za-z0-9_.-]/g, '-').slice(0, 100);
  const name =
    safe === sessionId
      ? `drydock-${safe}`
      : `drydock-${safe}-${createHash('sha256').update(sessionId).digest('hex').slice(0, 8)}`;
  return generation ? `${name}-r${generation}` : name;
}

/** A sandbox that is gone stays gone: no retry, the workflow replaces it. Other errors pass as they are. */
export function permanent(err: unknown): never {
  if (err instanceof SandboxNotFound) {
    throw ApplicationFailure.nonRetryable(err.message, ErrorType.SandboxNotFound);
  }
  throw err;
}

/** The activities of a group that work in a session's sandbox, failing permanently (see permanent) when it is gone. */
export function inSandbox<T extends Record<string, (...args: any[]) => Promise<unknown>>>(group: T): T {
  return Object.fromEntries(
    Object.entries(group).map(([name, fn]) => [name, (...args: unknown[]) => fn(...args).catch(permanent)]),
  ) as T;
}
