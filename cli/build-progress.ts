/**
 * `drydock snapshot build`'s progress while it waits (and a session
 * follower's, for a build inside its step): the build's pending
 * activity and what it heartbeats (sandbox/activities/snapshot-build.ts
 * phases, the isolated builder's current step, setup's output), read from
 * Temporal's description of the workflow. A line on stderr for each new
 * phase or step, with the seconds since the start; on a terminal the latest
 * output line too, on one updating line.
 */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { plainLogText } from '../platform/scrub';

/** How often the build's description is read. */
export const FOLLOW_EVERY_MS = 2_000;

/** What the build's pending activity heartbeats (the fields drydock's activities write). */
export interface BuildDetails {
  phase?: string;
  building?: { source?: string; step?: string; line?: string };
  outputTail?: string;
}

export interface PendingBuildActivity {
  activity: string;
  attempt: number;
  lastFailure?: string;
  details?: BuildDetails;
}

/** The words for a build's activities that heartbeat no phase of their own. */
const ACTIVITY_WORDS: Record<string, string> = {
  startSnapshotBuild: 'starting',
  runStep: 'running setup',
  finishSnapshotBuild: 'saving the snapshot image',
  fillPools: "refilling the host's warm pool",
  destroySandbox: 'removing the build container',
};

/** One line of text as a terminal may show it: what the sandbox printed keeps no sequence or control character. */
const oneLine = (text: string) => plainLogText(text).replace(/\s+/g, ' ').trim();

/** The words for where a build is (a new one is printed as a line), and its latest output line. */
export function buildProgressText(a: PendingBuildActivity): { text: string; line?: string } {
  const d = a.details ?? {};
  const retry = a.attempt > 1 ? ` (attempt ${a.attempt}${a.lastFailure ? `, after: ${a.lastFailure}` : ''})` : '';
  const where = d.building
    ? `building ${d.building.source ?? 'an image'}: ${d.building.step ?? 'starting the builder'}`
    : (d.phase ?? ACTIVITY_WORDS[a.activity] ?? a.activity);
  const last =
    d.building?.line ??
    plainLogText(d.outputTail ?? '')
      .trimEnd()
      .split('\n')
      .pop();
  const line = last && oneLine(last);
  return { text: oneLine(where + retry), ...(line ? { line } : {}) };
}

/** The workflow's pending activities with their heartbeat details decoded. */
async function pendingActivities(client: Client, handle: WorkflowHandle): Promise<PendingBuildActivity[]> {
  const { raw } = await handle.describe();
  const converter = client.options.loadedDataConverter.payloadConverter;
  return (raw.pendingActivities ?? []).map((p) => {
    const payload = p.heartbeatDetails?.payloads?.[0];
    let details: BuildDetails | undefined;
    try {
      details = payload ? (converter.fromPayload(payload) as BuildDetails) : undefined;
    } catch {
      details = undefined; // not ours to read: the activity's name still says where the build is
    }
    return {
      activity: p.activityType?.name ?? '?',
      attempt: p.attempt ?? 1,
      ...(p.lastFailure?.message ? { lastFailure: p.lastFailure.message } : {}),
      ...(details ? { details } : {}),
    };
  });
}

/**
 * For a session's follower (`drydock run`, `watch`): where an image build
 * inside its running step is (a cold start building its environment), a new
 * text each time the build moves, else undefined; Temporal is asked at most
 * every FOLLOW_EVERY_MS however often it is called.
 */
export function buildInStep(client: Client, handle: WorkflowHandle): () => Promise<string | undefined> {
  let askedAt = 0;
  let shown = '';
  return async () => {
    if (Date.now() - askedAt < FOLLOW_EVERY_MS) return undefined;
    askedAt = Date.now();
    const build = (await pendingActivities(client, handle).catch(() => [])).find((p) => p.details?.building);
    const text = build && buildProgressText(build).text;
    if (!text || text === shown) return undefined;
    shown = text;
    return text;
  };
}

/** Prints the build's progress on stderr until `done` settles. */
export async function followBuild(client: Client, handle: WorkflowHandle, done: Promise<unknown>): Promise<void> {
  const started = Date.now();
  const live = process.stderr.isTTY;
  let ended = false;
  void done.finally(() => (ended = true)).catch(() => undefined);
  let shown = '';
  let lineShown = false;
  const clearLine = () => {
    if (lineShown) process.stderr.write('\r\x1b[2K');
    lineShown = false;
  };
  while (!ended) {
    const pending = await pendingActivities(client, handle).catch(() => []);
    const now = pending[0] && buildProgressText(pending[0]);
    if (now && now.text !== shown && !ended) {
      clearLine();
      console.error(`[${Math.round((Date.now() - started) / 1000)} s] ${now.text}`);
      shown = now.text;
    }
    if (live && now?.line && !ended) {
      const width = Math.max(20, (process.stderr.columns ?? 80) - 4);
      process.stderr.write(`\r\x1b[2K  ${now.line.slice(0, width)}`);
      lineShown = true;
    }
    await Promise.race([done.catch(() => undefined), new Promise((r) => setTimeout(r, FOLLOW_EVERY_MS))]);
  }
  clearLine();
}
