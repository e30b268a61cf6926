/**
 * Admission: a host with one sandbox slot (DRYDOCK_MAX_SANDBOXES=1) gives it
 * to one session; the next ones wait in the `queued` phase with their place
 * in line (status, the API, the CLI), which moves up when the slot frees; a
 * start beyond the per-repo bound (DRYDOCK_MAX_QUEUED_PER_REPO) is refused
 * with 429 and Retry-After (and in Slack's channel). The session holding the slot is never evicted.
 * Memory (DRYDOCK_HOST_MEMORY) and free disk (DRYDOCK_HOST_DISK_FREE) bound a
 * host too, each named in the queued session's reason.
 * Serve is ready (/readyz) only once Temporal answers for its namespace and drydock's search
 * attributes there; a session's start in between waits for them.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { decide, type SessionStatus } from '../../workflows/api';
import { triggerSessionSchema } from '../../workflows/input';
import { personalTokens } from '../support/identity';
import { watched } from '../support/waits';
import {
  docker,
  makeFixtureRepo,
  newSessionId,
  runCli,
  scriptedSession,
  startServe,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { LABELS } from '../../sandbox/provider';
import { startSession as startSessionOf } from '../../platform/sessions';
import { ensureSearchAttributes } from '../../platform/temporal';
import { until } from '../support/k8s-deployment';
import { startFakeSlack, type FakeSlack } from '../support/fake-slack';

let ALICE: string;
let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let slack: FakeSlack;
const sessions: string[] = [];

const SLACK_TOKEN = 'xoxb-0000000000-drydock-test-bot';
const SLACK_SECRET = 'slack-signing-secret-for-tests';
const [SLACK_ALICE, CHANNEL] = ['U0ALICE', 'C0SHOP'];

beforeAll(async () => {
  const fixture = await makeFixtureRepo();
  ({ alice: ALICE } = await personalTokens('alice'));
  slack = await startFakeSlack({ token: SLACK_TOKEN, signingSecret: SLACK_SECRET });
  const identities = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-admission-')), 'identities.yaml');
  await writeFile(identities, `people:\n  alice:\n    slack: ${SLACK_ALICE}\n`);
  stack = await startStack({ DRYDOCK_MAX_SANDBOXES: 1 });
  serve = await startServe(stack, {
    DRYDOCK_REPOS: [`acme/fixture=${fixture.url}`],
    DRYDOCK_MAX_QUEUED_PER_REPO: 2,
    DRYDOCK_IDENTITIES_FILE: identities,
    DRYDOCK_SLACK_BOT_TOKEN: SLACK_TOKEN,
    DRYDOCK_SLACK_API_URL: slack.apiUrl,
    DRYDOCK_SLACK_SIGNING_SECRET: SLACK_SECRET,
    DRYDOCK_SLACK_CHANNELS: [`${CHANNEL}=acme/fixture`],
    DRYDOCK_TRIGGER_SESSION: triggerSessionSchema.parse({ agent: { steps: [{ run: 'echo slack >> slack.md' }] } }),
  });
});
afterAll(async () => {
  for (const id of sessions) {
    const handle = stack.client.workflow.getHandle(id);
    if ((await handle.describe()).status.name === 'RUNNING') await handle.cancel();
    await handle.result().catch(() => undefined);
  }
  await serve?.close();
  await stack?.stop();
  await slack?.close();
});

const api = (path: string, body?: unknown) =>
  fetch(`${serve.url}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      authorization: `Bearer ${ALICE}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

/** Starts a one-step session through the API; the answer as it came. */
async function start(name: string): Promise<Response> {
  const sessionId = newSessionId(name);
  const res = await api('/api/sessions', {
    sessionId,
    repo: 'acme/fixture',
    task: `admission ${name}`,
    agent: { steps: [{ run: `echo ${name} >> ${name}.md` }] },
  });
  if (res.status === 201) sessions.push(sessionId);
  return res;
}

/** Polls the API's status of `id` until `until` holds. */
async function apiStatusUntil(id: string, until: (s: SessionStatus) => boolean): Promise<SessionStatus> {
  const handle = watched(stack.client.workflow.getHandle(id));
  await waitForStatus(handle, () => true); // the workflow answers at all
  for (let polls = 0; ; polls++) {
    const s = (await (await api(`/api/sessions/${id}`)).json()) as SessionStatus;
    if (until(s)) return s;
    if (polls > 480) throw new Error(`the API's status never matched; last: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const sandboxesOnHost = async () =>
  (await docker.listContainers({ filters: { label: [`${LABELS.host}=${stack.config.DRYDOCK_HOST_ID}`] } })).length;

test('one slot: the next sessions queue in line, move up when it frees, and the bound answers 429 with Retry-After', async () => {
  expect((await start('holder')).status).toBe(201);
  const [holder] = sessions;
  // The holder keeps its sandbox while it waits for the push's approval.
  await waitForStatus(
    watched(stack.client.workflow.getHandle(holder)),
    (s) => s.phase === 'awaiting_approval',
    120_000,
  );

  expect((await start('second')).status).toBe(201);
  expect((await start('third')).status).toBe(201);
  const [, second, third] = sessions;
  const first = await apiStatusUntil(second, (s) => s.queued?.position === 1);
  expect(first.phase).toBe('queued');
  expect(first.queued!.reason).toBe(`host ${stack.config.DRYDOCK_HOST_ID} holds 1 of 1 sandboxes`);
  expect((await apiStatusUntil(third, (s) => s.queued?.position === 2)).phase).toBe('queued');
  expect(await sandboxesOnHost()).toBe(1);

  // Asked again while the status came from the memo (no worker answered within 2 s): it has no place in line.
  let cli = await runCli(['status', third], {});
  for (let i = 0; i < 20 && !cli.stdout.includes('in line'); i++) cli = await runCli(['status', third], {});
  expect(cli.stdout).toContain(`session ${third}: queued`);
  expect(cli.stdout).toContain('number 2 in line: host');

  // Two of the repo's sessions are queued: the bound.
  const refused = await start('fourth');
  expect(refused.status).toBe(429);
  expect(refused.headers.get('retry-after')).toBe('30');
  expect(((await refused.json()) as { error: string }).error).toContain('DRYDOCK_MAX_QUEUED_PER_REPO');
  // Slack is told the same, in the channel, and nothing starts.
  const said = await slack.command(serve.url, { user: SLACK_ALICE, channel: CHANNEL, text: 'one more' });
  expect(said).toMatchObject({
    status: 200,
    body: { text: expect.stringContaining('drydock did not start a session: 2 sessions of acme/fixture are queued') },
  });
  expect((await apiStatusUntil(third, (s) => !s.unanswered)).queued?.position).toBe(2);

  // The holder was never evicted; once it ends, its slot goes to the next in line.
  expect((await apiStatusUntil(holder, () => true)).phase).toBe('awaiting_approval');
  await stack.client.workflow
    .getHandle(holder)
    .executeUpdate(decide, { args: [{ decision: 'reject', action: 'push', by: 'ops' }] });
  await waitForStatus(
    watched(stack.client.workflow.getHandle(second)),
    (s) => s.phase === 'awaiting_approval',
    150_000,
  );
  expect((await apiStatusUntil(third, (s) => s.queued?.position === 1)).phase).toBe('queued');
  expect(await sandboxesOnHost()).toBe(1);
}, 420_000);

test("memory and disk: a session beyond the host's memory queues while a smaller one starts; low free disk queues every new one", async () => {
  const fixture = await makeFixtureRepo();
  const GiB = 1024 ** 3;
  const small = await startStack({ DRYDOCK_HOST_MEMORY: 3 * GiB });
  const full = await startStack({ DRYDOCK_HOST_DISK_FREE: 1024 ** 5 }); // a petabyte free: no host has it
  const begin = async (on: TestStack, name: string, memory: string) => {
    const id = newSessionId(name);
    await startSession(on, id, scriptedSession(fixture.url, name, `echo ${name} > ${name}.md`, { limits: { memory } }));
    return watched(on.client.workflow.getHandle(id));
  };
  try {
    const big = await begin(small, 'big', '2g');
    await waitForStatus(big, (s) => s.phase === 'awaiting_approval', 120_000);
    const bigger = await begin(small, 'bigger', '2g');
    const waiting = await waitForStatus(bigger, (s) => s.phase === 'queued', 60_000);
    expect(waiting.queued!.reason).toBe(
      `host ${small.config.DRYDOCK_HOST_ID}: its sandboxes hold 2.0 GiB of 3.0 GiB of memory (DRYDOCK_HOST_MEMORY); this session needs 2.0 GiB`,
    );
    // What fits beside it starts; the queued one starts once the first ends.
    const smaller = await begin(small, 'smaller', '512m');
    await waitForStatus(smaller, (s) => s.phase === 'awaiting_approval', 120_000);
    await big.executeUpdate(decide, { args: [{ decision: 'reject', action: 'push', by: 'ops' }] });
    await waitForStatus(bigger, (s) => s.phase === 'awaiting_approval', 150_000);

    const stuck = await begin(full, 'no-disk', '512m');
    const queued = await waitForStatus(stuck, (s) => s.phase === 'queued', 60_000);
    expect(queued.queued!.reason).toMatch(
      new RegExp(
        `^host ${full.config.DRYDOCK_HOST_ID} has [\\d.]+ GiB free on its sandbox storage, under the 1048576\\.0 GiB it keeps \\(DRYDOCK_HOST_DISK_FREE\\)$`,
      ),
    );
    for (const h of [bigger, smaller, stuck]) await h.cancel();
    await Promise.all([bigger, smaller, stuck].map((h) => h.result().catch(() => undefined)));
  } finally {
    await small.stop();
    await full.stop();
  }
}, 420_000);

test('serve is ready once Temporal answers for its namespace; /healthz says only that it lives', async () => {
  expect(await (await fetch(`${serve.url}/readyz`)).json()).toEqual({ ok: true });
  // A namespace its setup has not made yet: a session's start would fail with "Namespace not found".
  const early = new Client({ connection: stack.client.connection, namespace: 'drydock-not-made-yet' });
  const unready = await startServe({ ...stack, client: early });
  try {
    const res = await fetch(`${unready.url}/readyz`);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: string }).error).toContain('namespace "drydock-not-made-yet"');
    expect((await fetch(`${unready.url}/healthz`)).status).toBe(200);
  } finally {
    await unready.close();
  }
});

test("a start before the namespace's search attributes are usable waits for them, and serve is not ready until then", async () => {
  const namespace = `drydock-no-attributes-${process.pid}`;
  const { connection } = stack.client;
  await connection.workflowService.registerNamespace({
    namespace,
    workflowExecutionRetentionPeriod: msToTs('1 day'),
  });
  await until('the new namespace answers', async () =>
    connection.workflowService.describeNamespace({ namespace }).then(() => true),
  );
  const early = new Client({ connection, namespace });
  const unready = await startServe({ ...stack, client: early });
  const sessionId = newSessionId('unmapped');
  try {
    // The namespace answers, its attributes are not made yet (a setup Job between its two steps).
    const res = await fetch(`${unready.url}/readyz`);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: string }).error).toContain('DrydockPhase');
    // What CI's loaded Kubernetes run did: a session's start in that moment. It waits for them.
    const started = startSessionOf(early, scriptedSession('https://example.invalid/r.git', 'early', 'true'), {
      sessionId,
      taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    });
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    await ensureSearchAttributes(connection, namespace);
    await started;
    await until('serve ready', async () => ((await fetch(`${unready.url}/readyz`)).ok ? true : undefined));
  } finally {
    await early.workflow
      .getHandle(sessionId)
      .terminate('test over')
      .catch(() => undefined);
    await unready.close();
  }
}, 120_000);
