/**
 * Parking at the approval gate, end to end (real Temporal, Docker, git): past
 * DRYDOCK_PARK_AFTER with no decision the session's container is really gone;
 * a follow-up brings a sandbox back from the checkpoint, its change keeps
 * round 1's work, and once that change parks too, approving it pushes from
 * the worker's mirror without any sandbox.
 */
import { spawn } from 'node:child_process';
import { LABELS } from '../../sandbox/provider';
import { decide, followup, type SessionStatus } from '../../workflows/api';
import {
  approveAs,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';

let repo: { url: string; bare: string };
let stack: TestStack;

beforeAll(async () => {
  repo = await makeFixtureRepo();
  // Parks a few seconds after the change is shown (the default is 15 minutes).
  stack = await startStack({ DRYDOCK_PARK_AFTER: '3s' });
});
afterAll(async () => {
  await stack?.stop();
});

/** The execs made in the session's containers from now on, each as `<container>\t<its command>`, until stopped. */
function execsOf(sessionId: string): { stop: () => string[] } {
  const events = spawn('docker', [
    'events',
    // From now, as the engine kept them: none is missed while this process subscribes.
    '--since',
    (Date.now() / 1000).toFixed(3),
    '--filter',
    'type=container',
    '--filter',
    'event=exec_create',
    '--filter',
    `label=${LABELS.session}=${sessionId}`,
    '--format',
    '{{.Actor.Attributes.name}}\t{{json .Action}}', // one line each (a script's newlines escaped)
  ]);
  let out = '';
  events.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  return {
    stop: () => {
      events.kill();
      return out.split('\n').filter(Boolean);
    },
  };
}

const parkedAtGate = (s: SessionStatus) => s.phase === 'awaiting_approval' && s.parked !== undefined;

test('parked at the gate: no container; a follow-up comes back from the checkpoint; the approved change is pushed without a sandbox', async () => {
  const id = newSessionId('park');
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'rita',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
  });
  const first = await waitForStatus(handle, parkedAtGate, 120_000);
  expect(await containersOf(id)).toEqual([]); // the sandbox (and anything it ran) is gone while it waits
  expect(first.parked!.sandbox).toBe(first.sandbox!.name);

  const execs = execsOf(id);
  await handle.executeUpdate(followup, { args: [{ by: 'rita', steps: [{ run: 'echo bye >> README.md' }] }] });
  const round2 = await waitForStatus(
    handle,
    (s) =>
      s.round === 2 && s.pendingApproval !== undefined && s.pendingApproval.change !== first.pendingApproval!.change,
    300_000,
  );
  expect(round2.sandbox!.name).not.toBe(first.sandbox!.name);
  expect(round2.timeline.map((r) => r.name)).toContain('re-provision: parked');
  // The checkpoint was applied and the sandbox marked by its first process (the cold path, as here, and
  // from a snapshot): no exec (prepare, apply, mark); the pushed change below shows it was applied.
  const made = execs.stop().filter((e) => e.startsWith(`${round2.sandbox!.name}\t`));
  expect(made.length).toBeGreaterThan(0); // the step's own, at least: the watch saw the sandbox
  expect(made.filter((e) => /git apply|provisioned/.test(e))).toHaveLength(0);

  // Round 2's change parks too; approved, it is pushed with no sandbox brought back for it.
  const second = await waitForStatus(handle, parkedAtGate, 120_000);
  expect(await containersOf(id)).toEqual([]);
  const reprovisions = second.timeline.filter((r) => r.name.startsWith('re-provision')).length;
  await handle.executeUpdate(decide, approveAs('alice', 'push', second.pendingApproval!.change));
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(final.timeline.filter((r) => r.name.startsWith('re-provision'))).toHaveLength(reprovisions);
  // The pushed change holds round 1's work (from the checkpoint) and round 2's.
  const pushed = final.pushed!.commit;
  expect(git(['rev-parse', `refs/heads/${final.branch}`], repo.bare).trim()).toBe(pushed);
  expect(git(['show', `${pushed}:README.md`], repo.bare)).toBe('# fixture\nhello\nbye\n');
  expect(await containersOf(id)).toEqual([]);
});
