/** Who may send a follow-up to a session, and what it may carry: pure, unit-tested without Temporal. */
import type { ZodType } from 'zod';
import type { ApprovalPolicy, FollowupInput, Phase } from '../api';
import type { ScriptStep } from '../input';
import { sessionSchemas } from '../schemas';

/** Characters of a follow-up's text (a comment on GitHub may be longer: it is refused, not cut). */
export const FOLLOWUP_TEXT_LIMIT = 8_000;
/** Steps of a script follow-up. */
export const FOLLOWUP_STEPS_LIMIT = 50;
/** Follow-ups queued for one round. */
export const FOLLOWUP_QUEUE_LIMIT = 10;

/** Phases in which a follow-up is taken: it is worked on at the next gate, or at once when the session is open. */
const TAKES_FOLLOWUPS: readonly Phase[] = [
  'agent',
  'verifying',
  'awaiting_approval',
  'publishing',
  'awaiting_followup',
  'attached',
];

let steps: ZodType<ScriptStep[]> | undefined;

/**
 * The schema of a follow-up's steps, loaded on first use: a workflow
 * evaluates every module it imports at each start, and the input's schemas
 * (zod) would cost every new session 15–40 ms (units.ts) for the few that get
 * a script follow-up. A synchronous load: update validators are synchronous.
 */
function stepsSchema(): ZodType<ScriptStep[]> {
  return (steps ??= sessionSchemas().scriptSteps(FOLLOWUP_STEPS_LIMIT));
}

export type Followup = { by: string; text?: string; steps?: ScriptStep[]; ci?: { run: number; commit: string } };

/** Who sends a CI follow-up: drydock serve, for the failed run. */
export const CI_SENDER = 'drydock (CI)';
/** Characters of a CI follow-up's text: the failure, its annotations and log tail, fenced (github/task-context.ts). */
export const CI_FOLLOWUP_TEXT_LIMIT = 16_000;

/**
 * The queue with `followup` added: a person's follow-up wins over an
 * automatic one (a CI failure's), which leaves the queue when it arrives.
 */
export function queueFollowup(queue: readonly Followup[], followup: Followup): Followup[] {
  return followup.ci ? [...queue, followup] : [...queue.filter((f) => !f.ci), followup];
}

/**
 * A CI failure's follow-up, or why the session does not take it: one at a
 * time (none while anything is queued: a person's wins), at most `cap`
 * rounds per pull request, text for a model or CLI agent only.
 */
function checkCiFollowup(
  state: { queued: number; ciRounds: number; agentKind: 'script' | 'openai' | 'cli' },
  input: FollowupInput & { ci: NonNullable<FollowupInput['ci']> },
): { ok: true; followup: Followup } | { ok: false; reason: string } {
  const refuse = (reason: string) => ({ ok: false, reason }) as const;
  const { run, commit, cap } = input.ci;
  if (!Number.isSafeInteger(run) || run < 1 || typeof commit !== 'string' || !/^[0-9a-f]{7,64}$/.test(commit))
    return refuse("'ci' must name the failed run and its commit");
  if (!Number.isInteger(cap) || cap < 0) return refuse("'ci.cap' must be a whole number");
  if (input.by !== CI_SENDER) return refuse(`a CI follow-up is sent by ${CI_SENDER}`);
  if (state.agentKind === 'script') return refuse('a script agent takes no CI failure: it cannot fix one');
  if (state.ciRounds >= cap) {
    return refuse(`CI fixed ${state.ciRounds} time(s) already: at most ${cap} automatic rounds per pull request`);
  }
  if (state.queued > 0) return refuse("a follow-up is waiting already (a person's wins over CI's)");
  if (typeof input.text !== 'string' || input.text.trim() === '') return refuse("'text' must hold the failure");
  if (input.text.length > CI_FOLLOWUP_TEXT_LIMIT) {
    return refuse(`'text' is ${input.text.length} characters; at most ${CI_FOLLOWUP_TEXT_LIMIT}`);
  }
  return { ok: true, followup: { by: CI_SENDER, text: input.text.trim(), ci: { run, commit } } };
}

/**
 * The follow-up as the session takes it, or why it is refused: the sender must
 * be an approver or the requester (with no approvers listed, the requester
 * only, or anyone when there is no requester either); a script agent takes
 * steps, the others text; both are bounded.
 */
export function checkFollowup(
  state: {
    phase: Phase;
    requestedBy?: string;
    queued: number;
    agentKind: 'script' | 'openai' | 'cli';
    /** Rounds a CI failure started so far. @default 0 */
    ciRounds?: number;
  },
  policy: Pick<ApprovalPolicy, 'approvers'>,
  input: FollowupInput | undefined,
): { ok: true; followup: Followup } | { ok: false; reason: string } {
  const refuse = (reason: string) => ({ ok: false, reason }) as const;
  if (!input || typeof input !== 'object')
    return refuse('a follow-up needs {by, text} (or {by, steps} for a script agent)');
  if (input.ci !== undefined) {
    if (!TAKES_FOLLOWUPS.includes(state.phase))
      return refuse(`the session takes no follow-ups in phase ${state.phase}`);
    if (typeof input.ci !== 'object' || input.ci === null) return refuse("'ci' must name the failed run");
    return checkCiFollowup({ ...state, ciRounds: state.ciRounds ?? 0 }, { ...input, ci: input.ci });
  }
  if (typeof input.by !== 'string' || input.by.trim() === '') return refuse("'by' must name who sends the follow-up");
  const notAllowed = refuseSender(policy, state.requestedBy, input.by, 'send follow-ups to');
  if (notAllowed) return refuse(notAllowed);
  if (!TAKES_FOLLOWUPS.includes(state.phase)) return refuse(`the session takes no follow-ups in phase ${state.phase}`);
  if (state.queued >= FOLLOWUP_QUEUE_LIMIT) return refuse(`${FOLLOWUP_QUEUE_LIMIT} follow-ups are already waiting`);
  if (state.agentKind === 'script') {
    if (input.text !== undefined) return refuse("'text': a script agent takes 'steps', not text");
    const parsed = stepsSchema().safeParse(input.steps);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return refuse(`'steps${issue.path.map((p) => `.${String(p)}`).join('')}': ${issue.message}`);
    }
    return { ok: true, followup: { by: input.by, steps: parsed.data } };
  }
  if (input.steps !== undefined) return refuse(`'steps': a ${state.agentKind} agent takes 'text', not steps`);
  if (typeof input.text !== 'string' || input.text.trim() === '') return refuse("'text' must say what to change");
  if (input.text.length > FOLLOWUP_TEXT_LIMIT) {
    return refuse(`'text' is ${input.text.length} characters; at most ${FOLLOWUP_TEXT_LIMIT}`);
  }
  return { ok: true, followup: { by: input.by, text: input.text.trim() } };
}

/**
 * Who may work on a session besides deciding (follow-ups, attach): its
 * approvers and its requester; anyone when neither is known. The refusal, or undefined.
 */
export function refuseSender(
  policy: Pick<ApprovalPolicy, 'approvers'>,
  requestedBy: string | undefined,
  by: string,
  what: string,
): string | undefined {
  const allowed = [...policy.approvers, ...(requestedBy ? [requestedBy] : [])];
  if (allowed.length === 0 || allowed.includes(by)) return undefined;
  return `${by} may not ${what} this session (allowed: ${allowed.join(', ')})`;
}

/** What a round of queued follow-ups asks, in one line per follow-up (for status and the audit). */
export function describeFollowups(followups: Followup[]): string {
  return followups
    .map((f) => `${f.by}: ${f.text ?? `${f.steps!.length} step(s)`}`)
    .join('\n')
    .slice(0, 1_000);
}
