/**
 * Repo memory end to end (docs/agents.md, Repo memory) on real Temporal,
 * Docker, git and PostgreSQL, with the model stand-in: a session's agent
 * proposes a note (the built-in loop's propose_note tool), a maintainer
 * approves it with an edit (`drydock notes`), and the next session of the
 * repo is given it, fenced, in its system prompt; a session with
 * memory.use false is not, and its agent proposes through the notes file.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { AuditTrail, loadAuditKey } from '../../store/audit';
import { openDatabase, type Database } from '../../store/db';
import { Redactor } from '../../platform/scrub';
import { RepoNotes } from '../../repos/notes';
import { startFakeProviders, toolResults, type FakeProviders } from '../support/fake-providers';
import {
  approvePush,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  runCli,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { redactUrl } from '../../workflows/rules/repo-url';

const KEY = `sk-test-${randomBytes(12).toString('hex')}`;
let model: FakeProviders;
let stack: TestStack;
let db: Database;
let repo: { url: string; bare: string };
/** The CLI without anyone's stored login: it works in the database as --by. */
let cliEnv: Record<string, string>;

beforeAll(async () => {
  model = await startFakeProviders({ apiKey: KEY });
  stack = await startStack({
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: KEY,
  });
  repo = await makeFixtureRepo();
  db = await openDatabase(stack.config);
  cliEnv = { XDG_CONFIG_HOME: await mkdtemp(path.join(tmpdir(), 'drydock-cli-')) };
});
afterAll(async () => {
  await stack?.stop();
  await db?.close();
  await model?.close();
});

const agent = { kind: 'openai', model: 'fake-1' } as const;
const greet = {
  name: 'edit_file',
  arguments: { path: 'README.md', old_string: '# fixture\n', new_string: '# fixture\nhello\n' },
};

test('a note proposed by one session, approved with an edit, is given to the next session of the repo, fenced', async () => {
  const marker = `NOTE-${randomBytes(4).toString('hex')}`;
  // 1. The agent proposes a note while it works.
  const first = newSessionId('mem-a');
  const before = model.requests.length;
  model.script([
    { toolCalls: [greet, { name: 'propose_note', arguments: { text: `Run sh check.sh to test. ${marker}` } }] },
    { text: 'Greeted; proposed a note.' },
  ]);
  const a = await startSession(stack, first, {
    repo: { url: repo.url },
    task: 'greet',
    agent,
    verify: { test: 'sh check.sh' },
  });
  const atGate = await waitForStatus(a, inPhase('awaiting_approval'), 120_000);
  expect(toolResults(model.requests[before + 1])[1]).toMatch(/^note proposed/);
  expect(atGate.memory?.proposed).toHaveLength(1);
  expect(atGate.timeline.map((s) => s.name)).toContain('notes: proposed');
  const id = atGate.memory!.proposed[0];
  expect((await approvePush(a)).phase).toBe('completed');

  // 2. A maintainer sees it and approves it with an edit; proposed notes are given to nobody.
  const notes = new RepoNotes(db.pool);
  const repoName = redactUrl(repo.url);
  expect(await notes.given(repoName)).toEqual([]);
  const listed = await runCli(['notes', 'list', '--repo', repoName, '--json'], cliEnv);
  expect(listed.code).toBe(0);
  expect(JSON.parse(listed.stdout)).toEqual([
    expect.objectContaining({ id, sessionId: first, status: 'proposed', text: `Run sh check.sh to test. ${marker}` }),
  ]);
  const edited = `Run sh check.sh to test (it greps README.md). ${marker}`;
  const approved = await runCli(['notes', 'approve', String(id), '--text', edited, '--by', 'maria'], cliEnv);
  expect(approved.stdout).toContain(`note #${id} approved (v2) by maria`);
  expect(approved.code).toBe(0);

  // 3. The next session's agent reads it in its system prompt, between markers it cannot forge.
  const second = newSessionId('mem-b');
  const next = model.requests.length;
  model.script([{ toolCalls: [greet] }, { text: 'Greeted.' }]);
  const b = await startSession(stack, second, {
    repo: { url: repo.url },
    task: 'greet again',
    agent,
    verify: { test: 'sh check.sh' },
  });
  const bAtGate = await waitForStatus(b, inPhase('awaiting_approval'), 120_000);
  expect(bAtGate.memory?.given).toEqual([{ id, version: 2 }]);
  const system = model.requests[next].messages[0].text;
  expect(system).toContain(edited);
  expect(system).toMatch(
    new RegExp(
      `=== BEGIN REPO NOTE [0-9a-f]{32}: #${id} v2 ===\\n${edited.replace(/[().]/g, '\\$&')}\\n=== END REPO NOTE`,
    ),
  );
  expect(system).toContain('hints, not instructions');
  expect(system).not.toContain('Run sh check.sh to test. '); // the proposal as the agent wrote it: replaced by the edit
  expect((await approvePush(b)).phase).toBe('completed');

  // 4. Every step is audited: the proposal in the session's chain, the decision in the repo's notes chain.
  const trail = new AuditTrail(db.pool, 'test', new Redactor(), loadAuditKey(stack.config));
  expect((await trail.events(first)).filter((e) => e.kind === 'note')).toEqual([
    expect.objectContaining({ actor: 'agent', data: expect.objectContaining({ repo: repoName }) }),
  ]);
  expect((await trail.events(`notes:${repoName}`)).map((e) => [e.kind, e.actor, e.data.action])).toContainEqual([
    'note',
    'maria',
    'approve',
  ]);
  expect((await notes.versions(id)).map((v) => [v.version, v.status, v.by])).toEqual([
    [1, 'proposed', `agent (${first})`],
    [2, 'approved', 'maria'],
  ]);

  // 5. Without memory (a pilot's configuration with memory: false) nothing is given; the agent's
  //    notes file (what an agent CLI or a script writes) is still read, unless propose is off too.
  const third = newSessionId('mem-c');
  const last = model.requests.length;
  model.script([
    {
      toolCalls: [
        greet,
        { name: 'run', arguments: { command: `printf 'The README needs hello.\\n---\\n' >> /tmp/drydock-notes.md` } },
      ],
    },
    { text: 'Greeted.' },
  ]);
  const c = await startSession(stack, third, {
    repo: { url: repo.url },
    task: 'greet once more',
    agent,
    verify: { test: 'sh check.sh' },
    memory: { use: false },
  });
  const cAtGate = await waitForStatus(c, inPhase('awaiting_approval'), 120_000);
  expect(model.requests[last].messages[0].text).not.toContain(marker);
  expect(cAtGate.memory?.given ?? []).toEqual([]);
  const fromFile = cAtGate.memory!.proposed;
  expect(fromFile).toHaveLength(1);
  expect((await notes.get(fromFile[0]))?.text).toBe('The README needs hello.');
  await c.cancel();
  await c.result().catch(() => undefined); // cancelled: torn down before the test ends
});
