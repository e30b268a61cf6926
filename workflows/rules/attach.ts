/** Who may attach to a session's sandbox, and when: pure, unit-tested without Temporal. */
import type { ApprovalPolicy, AttachInput, Attachment, HandOverInput, Phase } from '../api';
import { refuseSender } from './followup';

/** Phases with a live sandbox whose change is not being published: a person may step in. */
const ATTACHABLE: readonly Phase[] = ['agent', 'verifying', 'awaiting_approval'];

/** Characters of a name in `by`. */
const BY_LIMIT = 200;

export interface AttachState {
  phase: Phase;
  requestedBy?: string;
  attached?: Attachment;
  sandbox?: { name: string };
}

type Checked = { ok: true } | { ok: false; reason: string };

function checkBy(input: AttachInput | undefined, what: string): string | undefined {
  if (!input || typeof input !== 'object') return `${what} needs {by}`;
  if (typeof input.by !== 'string' || input.by.trim() === '') return `'by' must name who ${what}es`;
  if (input.by.length > BY_LIMIT) return `'by' is ${input.by.length} characters; at most ${BY_LIMIT}`;
  return undefined;
}

/**
 * Whether `input.by` may attach now: an approver or the requester, one person
 * at a time (the one attached may attach again: a reconnect, so one attach
 * may hold several shells; the console detaches only when the last of its
 * sockets leaves, sandbox/web-terminal.ts SessionTerminals), while the
 * session has a live sandbox it is not publishing from.
 */
export function checkAttach(
  state: AttachState,
  policy: Pick<ApprovalPolicy, 'approvers'>,
  input: AttachInput | undefined,
): Checked {
  const refuse = (reason: string) => ({ ok: false, reason }) as const;
  const bad = checkBy(input, 'attach');
  if (bad) return refuse(bad);
  const by = input!.by;
  const notAllowed = refuseSender(policy, state.requestedBy, by, 'attach to');
  if (notAllowed) return refuse(notAllowed);
  if (state.attached) {
    if (state.attached.by === by) return { ok: true };
    return refuse(`${state.attached.by} is attached since ${state.attached.at}; one person at a time`);
  }
  if (state.phase === 'awaiting_followup') {
    return refuse(
      'the sandbox was torn down after publishing (the session waits for follow-ups without one): ' +
        'send a follow-up to re-provision it, and attach while its round runs',
    );
  }
  if (state.phase === 'provisioning')
    return refuse('the sandbox is not ready yet (phase provisioning); try again soon');
  if (!ATTACHABLE.includes(state.phase) || !state.sandbox) {
    return refuse(`the session has no sandbox to attach to in phase ${state.phase}`);
  }
  return { ok: true };
}

/** Whether `input.by` may end the attach: the one attached, an approver or the requester. */
export function checkDetach(
  state: AttachState,
  policy: Pick<ApprovalPolicy, 'approvers'>,
  input: AttachInput | undefined,
): Checked {
  const bad = checkBy(input, 'detach');
  if (bad) return { ok: false, reason: bad };
  if (!state.attached) return { ok: false, reason: `nobody is attached (phase ${state.phase})` };
  if (state.attached.by === input!.by) return { ok: true };
  const notAllowed = refuseSender(policy, state.requestedBy, input!.by, 'detach from');
  return notAllowed ? { ok: false, reason: notAllowed } : { ok: true };
}

/**
 * Whether the attach may pass from `input.from` (who is attached) to
 * `input.to` (who stays in the terminal): `to` may attach as anyone may.
 */
export function checkHandOver(
  state: AttachState,
  policy: Pick<ApprovalPolicy, 'approvers'>,
  input: HandOverInput | undefined,
): Checked {
  if (!input || typeof input !== 'object') return { ok: false, reason: 'a hand-over needs {from, to}' };
  const bad = checkBy({ by: input.from }, 'detach') ?? checkBy({ by: input.to }, 'attach');
  if (bad) return { ok: false, reason: bad };
  if (state.attached?.by !== input.from) {
    return { ok: false, reason: `${input.from} is not the one attached (${state.attached?.by ?? 'nobody'} is)` };
  }
  if (input.to === input.from) return { ok: false, reason: 'a hand-over is to someone else' };
  const notAllowed = refuseSender(policy, state.requestedBy, input.to, 'attach to');
  return notAllowed ? { ok: false, reason: notAllowed } : { ok: true };
}
