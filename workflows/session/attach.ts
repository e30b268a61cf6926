/**
 * Takeover: a person in the session's sandbox (drydock attach). The attach
 * update shows phase `attached` at once and answers once the step under way
 * has ended (the person and the agent never work in the sandbox at the same
 * time); the agent's next step, the commit and verification wait in inSandbox
 * until the detach. Edits made after the change was committed void its approval: the
 * session commits and verifies them (a round of their own) before anyone
 * approves. The CLI or `drydock serve` runs the shell; the workflow only
 * records who is in, which is what survives a crash of either.
 */
import { condition, log, setHandler } from '@temporalio/workflow';
import {
  attach,
  detach,
  handOver,
  startPreview,
  type AttachInput,
  type Attachment,
  type HandOverInput,
  type Detached,
  type PreviewStarted,
} from '../api';
import { checkAttach, checkDetach, checkHandOver, type AttachState } from '../rules/attach';
import { checkPreview } from '../rules/preview';
import { sandboxLimitsOf } from '../units';
import { onHost, records } from './proxies';
import { bringBack } from './sandbox';
import type { SessionRun } from './state';

export function installAttachHandlers(run: SessionRun): void {
  const state = (): AttachState => ({
    phase: run.status.phase,
    requestedBy: run.status.requestedBy,
    attached: run.status.attached,
    sandbox: run.sandbox,
  });
  const validate = (check: typeof checkAttach) => (input: AttachInput) => {
    const checked = check(state(), run.policy, input);
    if (!checked.ok) throw new Error(checked.reason);
  };
  setHandler(
    attach,
    async (input) => {
      validate(checkAttach)(input); // the validator ran on the same state
      // Only a parked session waits here: any other attach begins in the same turn as it arrives.
      if (!run.status.attached && (run.parking || run.status.parked)) await unparkForAttach(run);
      const attachment = run.status.attached ?? begin(run, input.by);
      // The step under way ends first (a step's end stops every process it left, a shell too): then the answer.
      await condition(() => run.sandboxBusy === 0 || run.status.attached !== attachment);
      return attachment;
    },
    { validator: validate(checkAttach) },
  );
  setHandler(
    detach,
    (input) => {
      validate(checkDetach)(input);
      return end(run, input.by);
    },
    { validator: validate(checkDetach) },
  );
  const validateHandOver = (input: HandOverInput) => {
    const checked = checkHandOver(state(), run.policy, input);
    if (!checked.ok) throw new Error(checked.reason);
  };
  setHandler(
    handOver,
    async (input) => {
      validateHandOver(input);
      const during = run.status.attached!.during;
      await record(run, run.status.attached!, { by: input.from, handedTo: input.to });
      const { name, host } = run.sandbox!;
      run.status.attached = { by: input.to, at: new Date().toISOString(), sandbox: name, host, during };
      log.info('attach handed over', { from: input.from, to: input.to });
      return run.status.attached;
    },
    { validator: validateHandOver },
  );
}

/** A person attaching to a parked session gets a sandbox brought back from the checkpoint. */
async function unparkForAttach(run: SessionRun): Promise<void> {
  if (run.parking) await condition(() => !run.parking);
  if (run.status.parked) await bringBack(run, 're-provision for an attach');
}

/** Whether the change on display is not the sandbox's any more: someone is in it, or edited it since the commit. */
export function editedByHand(run: SessionRun): boolean {
  return run.status.attached !== undefined || run.uncommittedEditsBy !== undefined;
}

/** At teardown: an attach still open ends with the sandbox, and is recorded. */
export async function endAttach(run: SessionRun): Promise<void> {
  if (!run.status.attached) return;
  try {
    await end(run, 'drydock (the session ended)');
  } catch (err) {
    log.error('the attach was not recorded', { error: err instanceof Error ? err.message : String(err) });
  }
}

function begin(run: SessionRun, by: string): Attachment {
  const { name, host } = run.sandbox!;
  const attached = { by, at: new Date().toISOString(), sandbox: name, host, during: run.status.phase };
  run.status.attached = attached;
  run.setPhase('attached');
  log.info('attached', { by, sandbox: name });
  return attached;
}

/** Ends the attach: the phase it held comes back, its edits await the next commit, the audit trail gets it. */
async function end(run: SessionRun, by: string): Promise<Detached> {
  const attached = run.status.attached!;
  run.status.attached = undefined;
  run.setPhase(attached.during);
  const durationMs = await record(run, attached, { by });
  return { by, attachedBy: attached.by, durationMs };
}

/**
 * One person's part of an attach, ended (detached by `by`, or handed over by
 * them to `handedTo`, who stays): on the timeline and in the audit trail under their name;
 * their edits await the next commit. Answers how long it was.
 */
async function record(
  run: SessionRun,
  attached: Attachment,
  { by, handedTo }: { by: string; handedTo?: string },
): Promise<number> {
  run.uncommittedEditsBy = attached.by;
  const durationMs = Date.now() - Date.parse(attached.at);
  const n = (run.status.attaches = (run.status.attaches ?? 0) + 1);
  run.status.timeline.push({
    name: `attached: ${attached.by}`,
    phase: 'attached',
    startedAt: attached.at,
    durationMs,
    ok: true,
    detail:
      `${attached.sandbox} on ${attached.host}` +
      (handedTo ? `; handed over to ${handedTo}` : by === attached.by ? '' : `; detached by ${by}`),
  });
  log.info('detached', { by, attachedBy: attached.by, durationMs });
  await records.recordAudit({
    sessionId: run.sessionId,
    key: `attach-${n}`,
    kind: 'attach',
    actor: attached.by,
    at: attached.at,
    data: {
      sandbox: attached.sandbox,
      host: attached.host,
      detachedAt: new Date().toISOString(),
      detachedBy: by,
      durationMs,
      ...(handedTo ? { handedTo } : {}),
    },
  });
  return durationMs;
}

/**
 * startPreview: the repo's app in its companion (the one kept for the agent,
 * sandbox/activities/agent-app.ts) while the session waits at its gate; the
 * next verification or agent step stops it first (run.previewStarted).
 */
export function installPreviewHandler(run: SessionRun): void {
  const validate = (input: AttachInput) => {
    const checked = checkPreview({ phase: run.status.phase, sandbox: run.sandbox, parked: run.status.parked }, input);
    if (!checked.ok) throw new Error(checked.reason);
  };
  setHandler(
    startPreview,
    async (input): Promise<PreviewStarted> => {
      validate(input);
      const sandbox = run.sandbox!;
      const app = sandbox.preview!;
      run.previewStarted = true;
      log.info('starting the app for its preview', { by: input.by, port: app.port });
      const started = await onHost(sandbox, app.readyTimeoutMs + 5 * 60_000).startAgentApp({
        sandbox: sandbox.name,
        image: sandbox.image,
        app,
        limits: sandboxLimitsOf(run.input.limits),
      });
      return started.ready ? { ready: true, port: app.port } : started;
    },
    { validator: validate },
  );
}
