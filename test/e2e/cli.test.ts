/** The drydock command as a user runs it: start, follow, list by phase, approve, errors. */
import { git, makeFixtureRepo, newSessionId, runCli, startStack, type TestStack } from '../support/helpers';

let stack: TestStack;
let env: Record<string, string>;
let repo: { url: string; bare: string };

beforeAll(async () => {
  stack = await startStack({ DRYDOCK_APPROVAL_REQUIRED: [] });
  repo = await makeFixtureRepo();
  env = { TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS, DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE };
});
afterAll(() => stack?.stop());

const id = (name: string) => newSessionId(`cli-${name}`);

/** `drydock run` of a session that says hello in the README, with `options` added. */
const runHello = (sessionId: string, options: string[]) => [
  'run',
  ...options,
  '--id',
  sessionId,
  '--repo',
  repo.url,
  '--task',
  'hello',
  '--step',
  'echo hello >> README.md',
];

test('run follows the phases live and exits 0 when completed (the server requires no approval)', async () => {
  const sessionId = id('run');
  const out = await runCli(runHello(sessionId, ['--test', 'sh check.sh']), env);
  expect(out.stderr).toMatch(/\[agent\]/);
  expect(out.stderr).toMatch(/verify: sh check.sh {2}ok/);
  expect(out.stderr).toMatch(new RegExp(`session ${sessionId}: completed`));
  expect(out.code).toBe(0);
  expect(git(['rev-parse', `drydock/${sessionId}`], repo.bare)).toMatch(/^[0-9a-f]{40}/);
});

test('run --detach, list by phase, status, approve: the session completes', async () => {
  const sessionId = id('approve');
  const started = await runCli(
    runHello(sessionId, ['--detach', '--input', '-']),
    env,
    // The session asks for an approval the server does not require: a session may tighten.
    JSON.stringify({ approval: { required: ['push'] } }),
  );
  expect(started).toMatchObject({ code: 0, stdout: `${sessionId}\n` });

  let listed = '';
  for (let i = 0; i < 60 && !listed.includes(sessionId); i++) {
    await new Promise((r) => setTimeout(r, 500));
    listed = (await runCli(['list', '--phase', 'awaiting_approval'], env)).stdout;
  }
  expect(listed).toContain(sessionId);

  // Asked again while the status came from the memo (no worker answered within 2 s): it names no change.
  let shown = await runCli(['status', sessionId], env);
  for (let i = 0; i < 20 && !/--change [0-9a-f]{64}/.test(shown.stdout); i++)
    shown = await runCli(['status', sessionId], env);
  expect(shown.stdout).toMatch(/awaiting_approval/);
  expect(shown.stdout).toMatch(new RegExp(`approve: bin/drydock approve ${sessionId}`));

  // An approval names the change reviewed: without --change, the CLI shows the pending one and approves nothing.
  const change = /--change ([0-9a-f]{64})/.exec(shown.stdout)![1];
  const unnamed = await runCli(['approve', sessionId, '--by', 'carol'], env);
  expect(unnamed.code).not.toBe(0);
  expect(unnamed.stderr).toContain(`approve it: drydock approve ${sessionId} --change ${change}`);
  const approved = await runCli(['approve', sessionId, '--by', 'carol', '--change', change], env);
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

test('logs prints the whole output of a step; list --repo and --json filter by repo', async () => {
  const sessionId = id('logs');
  const run = await runCli(
    ['run', '--id', sessionId, '--repo', repo.url, '--task', 'noisy', '--step', 'seq 1 3000; echo hello >> README.md'],
    env,
  );
  expect(run.code).toBe(0);
  const logsEnv = { ...env, DRYDOCK_DATA_DIR: stack.config.DRYDOCK_DATA_DIR };
  const out = await runCli(['logs', sessionId, '--step', 'step 1'], logsEnv);
  expect(out.code).toBe(0);
  // The whole output (the status keeps only the last 2,000 characters).
  expect(out.stdout).toMatch(/^== step 1: seq 1 3000; echo hello >> README.md \(exit 0\)\n1\n2\n3\n/);
  expect(out.stdout).toContain('\n3000\n');
  const json = JSON.parse((await runCli(['logs', sessionId, '--json', '--step', 'step'], logsEnv)).stdout);
  expect(json).toMatchObject([{ step: 'step 1: seq 1 3000; echo hello >> README.md', exitCode: 0, complete: true }]);
  expect((await runCli(['logs', sessionId, '--step', 'nothing'], logsEnv)).code).toBe(1);

  let rows: { sessionId: string; repo: string }[] = [];
  for (let i = 0; i < 40 && !rows.some((r) => r.sessionId === sessionId); i++) {
    rows = JSON.parse(
      (
        await runCli(['list', '--repo', 'acme/fixture', '--json'], {
          ...env,
          DRYDOCK_REPOS: `acme/fixture=${repo.url}`,
        })
      ).stdout,
    );
    await new Promise((r) => setTimeout(r, 250));
  }
  expect(rows.map((r) => r.sessionId)).toContain(sessionId);
  expect(new Set(rows.map((r) => r.repo))).toEqual(new Set([repo.url]));
  const unknown = await runCli(['list', '--repo', 'someone/else'], env);
  expect(unknown).toMatchObject({
    code: 1,
    stderr:
      'drydock: repo someone/else is not served by this drydock (register it: drydock repo add <url> --name owner/name)\n',
  });
});
