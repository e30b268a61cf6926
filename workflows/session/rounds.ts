/**
 * A session that lives as long as its pull request: a follow-up at the gate
 * starts a new round in the same sandbox; after publishing, the sandbox goes,
 * the session waits (continuing as new, so each wait starts a small history)
 * and a follow-up re-provisions it from snapshot plus checkpoint. Each round:
 * the agent works, a new commit on top of the last pushed one, verification,
 * the gate with the new change hash, and publishing to the same branch and PR.
 */
import { allHandlersFinished, condition, log } from '@temporalio/workflow';
import type { CommitResult } from '../../sandbox/contract';
import { durationMs } from '../units';
import { describeFollowups } from '../rules/followup';
import { workUntilVerified } from './agents';
import { FollowupArrived } from './approval';
import { onHost, records } from './proxies';
import { publish } from './publish';
import { bringBack, inSandbox, parkSandbox } from './sandbox';
import type { SessionRun } from './state';

/** Rounds kept in status; the audit trail has every one. */
const RECENT_ROUNDS = 20;

/** Publishes the change; a follow-up that arrives at a gate voids it and starts the next round here. */
export async function publishRounds(run: SessionRun, first: CommitResult): Promise<void> {
  let change = first;
  for (;;) {
    endRound(run, change);
    if (run.input.childOf) {
      await run.note('publish', `nothing published: a child session's change goes to ${run.input.childOf.session}`);
      return;
    }
    if (!change.changed || change.commit === run.status.pushed?.commit) {
      await run.note('publish', change.changed ? 'the follow-up changed nothing' : 'the agent changed nothing');
      return;
    }
    try {
      await publish(run, change);
      return;
    } catch (err) {
      if (!(err instanceof FollowupArrived)) throw err;
    }
    change = await followupRound(run);
  }
}

/**
 * After publishing a pull request: without a sandbox, waits for a follow-up
 * until the PR is merged or closed or publish.openFor passes; each follow-up
 * re-provisions the sandbox and runs a round.
 */
export async function stayOpen(run: SessionRun, parked: boolean): Promise<void> {
  for (;;) {
    // Without a pull request only a follow-up sent while publishing gets a round.
    if (run.pullRequestClosed || (!run.status.pullRequest && run.followups.length === 0)) break;
    if (!parked && run.followups.length === 0) {
      await park(run); // continues as new, unless a follow-up came meanwhile
      parked = true;
    }
    if (!(await awaitFollowup(run))) return;
    if (run.pullRequestClosed) break;
    if (run.status.parked) await bringBack(run, `re-provision for follow-up ${(run.status.round ?? 1) + 1}`);
    parked = false;
    await publishRounds(run, await followupRound(run));
  }
  if (run.pullRequestClosed) {
    const { merged, by } = run.pullRequestClosed;
    run.status.closedBy = run.pullRequestClosed;
    await run.note('pull request', `${merged ? 'merged' : 'closed'} by ${by}`);
  }
}

/** Waits for a follow-up or the PR's end; false when publish.openFor passed without either. */
async function awaitFollowup(run: SessionRun): Promise<boolean> {
  const openFor = run.input.publish.openFor;
  run.status.openUntil = new Date(Date.now() + durationMs(openFor)).toISOString();
  const asked = await condition(
    () => run.followups.length > 0 || run.pullRequestClosed !== undefined,
    durationMs(openFor),
  );
  run.status.openUntil = undefined;
  if (!asked) await run.note('open for follow-ups', `no follow-up within ${openFor}`);
  return asked;
}

/**
 * Tears the sandbox down and keeps its checkpoint (the session's change), then
 * hands over to a new run that waits: the history of finished rounds stays behind.
 */
async function park(run: SessionRun): Promise<void> {
  if (!run.status.parked) await parkSandbox(run, 'teardown (until a follow-up)');
  run.setPhase('awaiting_followup');
  await condition(allHandlersFinished);
  // A follow-up that came meanwhile is worked on here, without a new run.
  if (run.followups.length > 0 || run.pullRequestClosed) return;
  await run.continueAsNew(true);
}

/** The next round: every follow-up sent so far, worked on in the session's sandbox, then committed and verified. */
async function followupRound(run: SessionRun): Promise<CommitResult> {
  const { status, loop, input } = run;
  const taken = run.followups.splice(0);
  const round = (status.round ?? 1) + 1;
  status.round = round;
  if (taken.some((f) => f.ci)) status.ciRounds = (status.ciRounds ?? 0) + 1;
  // No follow-up: a person attached at the gate, and their edits are the round's change (the attach is audited).
  run.nextChangeByHand = taken.length === 0;
  const by = run.nextChangeByHand ? (status.attached?.by ?? run.uncommittedEditsBy) : taken[0].by;
  const request = run.nextChangeByHand ? 'edited by hand in the sandbox (drydock attach)' : describeFollowups(taken);
  status.rounds = [...(status.rounds ?? []), { round, by, request, startedAt: new Date().toISOString() }].slice(
    -RECENT_ROUNDS,
  );
  run.verdicts.clear(); // each round's change is decided on anew
  run.commitDate = undefined;
  if (!run.nextChangeByHand) {
    await records.recordAudit({
      sessionId: run.sessionId,
      key: `followup-${round}`,
      kind: 'followup',
      actor: taken[0].by,
      data: { round, followups: taken },
    });
  }
  run.setPhase('agent');
  Object.assign(loop, { attempt: 1, startedAt: Date.now(), feedback: undefined, request: undefined });
  Object.assign(status.agent!, { attempt: 1, stopReason: undefined });
  if (run.nextChangeByHand) {
    await run.whenDetached(); // the round's time starts at the detach
  } else if (input.agent.kind === 'script') {
    run.scriptSteps = taken.flatMap((f) => f.steps ?? []);
  } else {
    const text = taken.map((f) => f.text).join('\n\n');
    if (input.agent.kind === 'cli') loop.request = text;
    else await addUserTurn(run, text);
  }
  log.info('follow-up round', { round, followups: taken.length });
  return withinRoundTime(run, () => workUntilVerified(run));
}

/** The model loop hears the follow-up as the conversation's next user turn. */
async function addUserTurn(run: SessionRun, text: string): Promise<void> {
  const { loop, sessionId } = run;
  await run.track(`follow-up: round ${run.status.round}`, async (record) => {
    record.detail = text.split('\n')[0].slice(0, 200);
    await inSandbox(run, (sb) => onHost(sb).addAgentMessage({ sessionId, index: loop.messageCount, content: text }));
    loop.messageCount++;
  });
}

/** A follow-up round gets the session's wall time again, counted from its start. */
function withinRoundTime<T>(run: SessionRun, fn: () => Promise<T>): Promise<T> {
  return run.withinWorkScope(durationMs(run.input.limits.wallTime), fn);
}

/** The round's change, in status. */
function endRound(run: SessionRun, change: CommitResult): void {
  const { status } = run;
  status.round ??= 1;
  if (!status.rounds?.length) {
    status.rounds = [
      { round: 1, by: status.requestedBy, request: status.task.slice(0, 1_000), startedAt: status.startedAt },
    ];
  }
  const last = status.rounds!.at(-1)!;
  Object.assign(last, { commit: change.commit, change: change.changeHash });
}
