/** The drydock command as a user runs it: start, follow, list by phase, approve, errors. */
import { randomBytes } from 'node:crypto';
import { git, makeFixtureRepo, runCli, startStack, type TestStack } from './helpers';

let stack: TestStack;
let env: Record<string, string>;
let repo: { url: string; bare: string };

beforeAll(async () => {
  stack = await startStack({ DRYDOCK_APPROVAL_REQUIRED: [] });
  repo = await makeFixtureRepo();
  env = { TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS, DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE };
});
afterAll(() => stack?.stop());

const id = (name: string) => `${process.env.DRYDOCK_TEST_RUN}-cli-${name}-${randomBytes(3).toString('hex')}`;

test('run follows the phases live and exits 0 when completed (the server requires no approval)', async () => {
  const sessionId = id('run');
  const out = await runCli(
    [
      'run',
      '--id',
      sessionId,
      '--repo',
      repo.url,
      '--task',
      'hello',
      '--step',
      'echo hello >> README.md',
      '--test',
      'sh check.sh',
    ],
    env,
  );
  expect(out.stderr).toMatch(/\[agent\]/);
  expect(out.stderr).toMatch(/verify: sh check.sh {2}ok/);
  expect(out.stderr).toMatch(new RegExp(`session ${sessionId}: completed`));
  expect(out.code).toBe(0);
  expect(git(['rev-parse', `drydock/${sessionId}`], repo.bare)).toMatch(/^[0-9a-f]{40}/);
});

test('run --detach, list by phase, status, approve: the session completes', async () => {
  const sessionId = id('approve');
  const started = await runCli(
    // The session asks for an approval the server does not require: a session may tighten.
    [
      'run',
      '--detach',
      '--id',
      sessionId,
      '--repo',
      repo.url,
      '--task',
      'hello',
      '--step',
      'echo hello >> README.md',
      '--input',
      '-',
    ],
    env,
    JSON.stringify({ approval: { required: ['push'] } }),
  );
  expect(started).toMatchObject({ code: 0, stdout: `${sessionId}\n` });

  let listed = '';
  for (let i = 0; i < 60 && !listed.includes(sessionId); i++) {
    await new Promise((r) => setTimeout(r, 500));
    listed = (await runCli(['list', '--phase', 'awaiting_approval'], env)).stdout;
  }
  expect(listed).toContain(sessionId);

  const shown = await runCli(['status', sessionId], env);
  expect(shown.stdout).toMatch(/awaiting_approval/);
  expect(shown.stdout).toMatch(new RegExp(`approve: bin/drydock approve ${sessionId}`));

  const approved = await runCli(['approve', sessionId, '--by', 'carol'], env);
  expect(approved).toMatchObject({ code: 0, stdout: `approved push of ${sessionId} as carol\n` });
  const watched = await runCli(['watch', sessionId, '--json'], env);
  expect(watched.code).toBe(0);
  expect(JSON.parse(watched.stdout)).toMatchObject({ phase: 'completed', decisions: [{ by: 'carol' }] });
});

test('bad input is one clear line and a non-zero exit, and starts nothing', async () => {
  const out = await runCli(['run', '--task', 'no repo'], env);
  expect(out.code).toBe(1);
  expect(out.stderr).toBe('drydock: invalid session input: repo: Invalid input: expected object, received undefined\n');
});

test('an unknown session is one clear line', async () => {
  const out = await runCli(['status', 'no-such-session'], env);
  expect(out.code).toBe(1);
  expect(out.stderr.trim().split('\n')).toHaveLength(1);
  expect(out.stderr).toMatch(/^drydock: .*no-such-session/);
});
