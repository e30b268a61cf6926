/**
 * drydock attach end to end (real Temporal, Docker, git, PostgreSQL), driven
 * under a pseudo-terminal (util-linux `script`) as a person would: a command
 * typed in the shell changes a file, the agent's next step waits for the
 * detach, the edit reaches the change under review and the pushed branch,
 * and the audit trail has the attach with its duration. Once on the
 * sandbox's host, once from "elsewhere" through drydock serve with a token.
 */
import { sandboxOf } from '../../sandbox/handle';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { Pool } from 'pg';
import { AuditTrail } from '../../store/audit';
import { DockerProvider } from '../../sandbox/docker/provider';
import { Redactor } from '../../platform/scrub';
import { status, type SessionStatus } from '../../workflows/api';
import {
  approveAs,
  docker,
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  projectRoot,
  runCli,
  startServe,
  startSession,
  startStack,
  testAuditKey,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { personalTokens } from '../support/identity';
import { decide } from '../../workflows/api';

let stack: TestStack;
let repo: { url: string; bare: string };
let env: Record<string, string>;
let pool: Pool;
const started: WorkflowHandle[] = [];

beforeAll(async () => {
  stack = await startStack();
  repo = await makeFixtureRepo();
  env = { TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS, DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE };
  pool = new Pool({ connectionString: process.env.DATABASE_URL });
});
afterAll(async () => {
  // A test that failed half-way leaves no sandbox behind.
  for (const handle of started) await handle.cancel().catch(() => undefined);
  for (const handle of started) await handle.result().catch(() => undefined);
  await pool?.end();
  await stack?.stop();
});

/** A terminal session: `drydock <args>` under `script`, its screen so far, and a way to type. */
interface Pty {
  child: ChildProcessWithoutNullStreams;
  screen(): string;
  type(text: string): void;
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  exited: Promise<number | null>;
}

function underPty(args: string[], extraEnv: Record<string, string>): Pty {
  const command = [path.join(projectRoot, 'bin', 'drydock'), ...args].map((a) => `'${a}'`).join(' ');
  const child = spawn('/usr/bin/script', ['-qfec', command, '/dev/null'], {
    env: { ...process.env, ...env, ...extraEnv, TERM: 'xterm' },
  });
  let screen = '';
  child.stdout.on('data', (c: Buffer) => (screen += c.toString()));
  child.stderr.on('data', (c: Buffer) => (screen += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  return {
    child,
    screen: () => screen,
    type: (text) => child.stdin.write(text),
    async waitFor(pattern, timeoutMs = 60_000) {
      for (const until = Date.now() + timeoutMs; !pattern.test(screen);) {
        if (Date.now() > until) throw new Error(`never saw ${pattern} on the terminal:\n${screen}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    exited,
  };
}

async function attachEvents(sessionId: string) {
  const trail = new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey());
  return (await trail.events(sessionId)).filter((e) => e.kind === 'attach');
}

async function session(sessionId: string, steps: { run: string; timeout?: string }[]): Promise<WorkflowHandle> {
  const handle = await startSession(stack, sessionId, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'rita',
    agent: { steps },
    verify: { test: 'sh check.sh' },
    approval: { required: ['push'], approvers: ['alice'] },
  });
  started.push(handle);
  return handle;
}

test('attach on the host: a typed command changes a file, step 2 waits for the detach, the edit is reviewed and pushed, audited', async () => {
  const id = newSessionId('attach');
  // Step 1 is under way when the person attaches (it waits for the test to let it end);
  // step 2 records whether the person's edit was there when it started.
  const handle = await session(id, [
    { run: 'echo hello >> README.md; while [ ! -e /tmp/go ]; do sleep 0.2; done', timeout: '3m' },
    { run: 'if [ -e by-hand.txt ]; then echo after > step2.txt; else echo before > step2.txt; fi' },
  ]);
  await waitForStatus(handle, (s) => s.timeline.some((t) => t.name.startsWith('step 1') && t.ok === undefined));

  // Someone who is neither an approver nor the requester is refused, in one line.
  const refused = await runCli(['attach', id, '--by', 'mallory'], env);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toBe('drydock: refused: mallory may not attach to this session (allowed: alice, rita)\n');

  const pty = underPty(['attach', id, '--by', 'rita'], {});
  const held = await waitForStatus(handle, inPhase('attached'));
  expect(held.attached).toMatchObject({ by: 'rita', during: 'agent' });
  await sandboxOf(new DockerProvider(docker), held.sandbox!.name).commands.run(['touch', '/tmp/go']);
  // The shell opens once step 1 has ended: the person and the agent never work in the sandbox at once.
  await pty.waitFor(/attached to .* as rita; exit the shell to detach/);
  expect((await handle.query(status)).timeline.find((t) => t.name.startsWith('step 1'))?.ok).toBe(true);
  pty.type('id -u; pwd\n');
  await pty.waitFor(/1000\s+\/workspace\s/);
  // Step 2 would start now if the attach did not hold it.
  await new Promise((r) => setTimeout(r, 2_000));
  // (The answer differs from the typed line, which the terminal echoes.)
  pty.type('echo STEP2-$(test -e step2.txt && echo RAN || echo WAITS)\n');
  await pty.waitFor(/STEP2-(RAN|WAITS)/);
  expect(pty.screen()).toMatch(/STEP2-WAITS/);
  pty.type('echo typed-in-the-sandbox > by-hand.txt; exit\n');
  expect(await pty.exited).toBe(0);
  expect(pty.screen()).toMatch(/detached from .* after \d+s; the session goes on to verify your edits/);

  const review = await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);
  expect(review.attached).toBeUndefined();
  expect(review.pendingApproval!.evidence.diffstat).toMatch(/by-hand\.txt/);
  expect(review.verification?.passed).toBe(true);
  await handle.executeUpdate(decide, approveAs('alice', 'push', review.pendingApproval!.change));
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  const branch = `drydock/${id}`;
  expect(git(['show', `${branch}:by-hand.txt`], repo.bare)).toBe('typed-in-the-sandbox\n');
  expect(git(['show', `${branch}:step2.txt`], repo.bare)).toBe('after\n'); // step 2 began after the edit

  const [event, ...more] = await attachEvents(id);
  expect(more).toEqual([]);
  expect(event).toMatchObject({ actor: 'rita', data: { detachedBy: 'rita' } });
  expect(event.data.durationMs).toBeGreaterThan(0);
  expect(final.timeline.some((t) => t.name === 'attached: rita' && t.phase === 'attached')).toBe(true);
});

test('attach through drydock serve with a token, at the approval gate: the edit becomes a new change to review', async () => {
  const tokens = await personalTokens('rita', 'mallory');
  const serve = await startServe(stack);
  try {
    const id = newSessionId('attach-serve');
    const handle = await session(id, [{ run: 'echo hello >> README.md' }]);
    const first = await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);

    const refused = await runCli(['attach', id, '--server', serve.url], { DRYDOCK_API_TOKEN: tokens.mallory });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      'drydock: refused: 409: mallory may not attach to this session (allowed: alice, rita)\n',
    );
    const nobody = await runCli(['attach', id, '--server', serve.url], { DRYDOCK_API_TOKEN: 'not-a-token' });
    expect(nobody.stderr).toBe('drydock: refused: 401: a valid bearer token is required\n');

    const asked = Date.now();
    const pty = underPty(['attach', id, '--server', serve.url], { DRYDOCK_API_TOKEN: tokens.rita });
    // The change on display is no longer the sandbox's: its approval goes.
    const held = await waitForStatus(handle, (s) => s.phase === 'attached' && !s.pendingApproval);
    expect(held.attached).toMatchObject({ by: 'rita', sandbox: first.sandbox!.name });
    await pty.waitFor(/\/workspace\$ /);
    const promptMs = Date.now() - asked;
    pty.type('echo through-serve > remote.txt; exit\n');
    expect(await pty.exited).toBe(0);
    const detachedAt = Date.now();

    const second = await waitForStatus(
      handle,
      (s) => s.pendingApproval !== undefined && s.pendingApproval.change !== first.pendingApproval!.change,
      120_000,
    );
    // The measurements, not asserted: attach through serve to a prompt, and detach to the edit awaiting review.
    console.log(`attach → prompt: ${promptMs} ms; detach → new change awaiting review: ${Date.now() - detachedAt} ms`);
    expect(second.pendingApproval!.evidence.diffstat).toMatch(/remote\.txt/);
    expect(second.rounds?.map((r) => [r.round, r.by, r.request])).toEqual([
      [1, 'rita', 'greet in the README'],
      [2, 'rita', 'edited by hand in the sandbox (drydock attach)'],
    ]);
    const [event] = await attachEvents(id);
    expect(event).toMatchObject({ actor: 'rita', data: { detachedBy: 'rita' } });
    expect(event.data.durationMs).toBeGreaterThan(0);
  } finally {
    await serve.close();
  }
});
