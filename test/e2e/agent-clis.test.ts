/**
 * The real agent CLIs (Claude Code, Codex, opencode, the pinned versions from
 * the npm registry, cached per host) end to end in a sandbox on real
 * Temporal, Docker and git, against local servers speaking the Anthropic
 * Messages, Responses and chat-completions protocols (test/support/fake-providers.ts).
 * Each CLI uses its own edit and shell tools; its model calls go through the
 * worker's gateway, which adds the key the sandbox never holds, refuses
 * anything but the configured endpoint, and stops at the token budget.
 */
import { randomBytes } from 'node:crypto';
import { AGENT_CLIS, PLACEHOLDER_KEY, type AgentCliName } from '../../workflows/rules/agent-clis';
import { startFakeProviders, type FakeProviders, type RecordedRequest, type Turn } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';

// Built from two halves in the sandbox's command, so the command itself (kept in a CLI's transcript) never holds it.
const KEY_HEAD = 'sk-real';
const KEY_TAIL = randomBytes(12).toString('hex');
const KEY = `${KEY_HEAD}-${KEY_TAIL}`;

let fake: FakeProviders;
let stack: TestStack;

beforeAll(async () => {
  fake = await startFakeProviders({ apiKey: KEY });
  stack = await startStack({
    DRYDOCK_ANTHROPIC_BASE_URL: fake.url,
    DRYDOCK_ANTHROPIC_API_KEY: KEY,
    DRYDOCK_MODEL_BASE_URL: fake.baseUrl,
    DRYDOCK_MODEL_API_KEY: KEY,
  });
}, 600_000);
afterAll(async () => {
  await stack?.stop();
  await fake?.close();
});

/**
 * In the sandbox, from the CLI's shell tool: counts the placeholder (proof it
 * looked) and the real key in every process's environment and the files a
 * CLI writes; then asks the gateway for another host, a tunnel and a path
 * that is no model call.
 */
const PROBE = [
  `k="${KEY_HEAD}-""${KEY_TAIL}"`,
  `echo "placeholder=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c ${PLACEHOLDER_KEY})"`,
  `echo "key-env=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c "$k")"`,
  `echo "key-files=$(grep -rlsF "$k" /home /workspace /tmp /opt/drydock /run 2>/dev/null | wc -l)"`,
  // The image has no curl: Python's http.client speaks to the gateway's forwarder.
  `python3 - <<'PY'
import http.client
def status(method, target, host='127.0.0.1'):
    c = http.client.HTTPConnection('127.0.0.1', 3129, timeout=20)
    c.request(method, target, headers={'Host': host})
    return c.getresponse().status
print('other-host=%d' % status('GET', 'http://example.com/', 'example.com'))
print('tunnel=%d' % status('CONNECT', 'example.com:443', 'example.com:443'))
print('other-path=%d' % status('POST', '/v1/files'))
PY`,
].join('\n');

const addFile = (file: string, content: string) =>
  `*** Begin Patch\n*** Add File: ${file}\n+${content.trimEnd()}\n*** End Patch`;

/** Each CLI's own tools: a file edit, then a shell command. */
function toolsOf(cli: AgentCliName, file: string, content: string): Turn['toolCalls'][] {
  switch (cli) {
    case 'claude':
      return [
        [{ name: 'Write', arguments: { file_path: `/workspace/${file}`, content } }],
        [{ name: 'Bash', arguments: { command: PROBE, description: 'probe' } }],
      ];
    // With a GPT model opencode offers apply_patch (not write/edit), as Codex does through its shell.
    case 'opencode':
      return [
        [{ name: 'apply_patch', arguments: { patchText: addFile(file, content) } }],
        [{ name: 'bash', arguments: { command: PROBE, description: 'probe' } }],
      ];
    case 'codex':
      return [
        [{ name: 'exec_command', arguments: { cmd: `apply_patch <<'EOF'\n${addFile(file, content)}\nEOF` } }],
        [{ name: 'exec_command', arguments: { cmd: PROBE } }],
      ];
  }
}

/** The script: the edit, the probe, then done; the CLI's own requests (titles, summaries) just get text. */
function scriptFor(cli: AgentCliName, file: string, content: string) {
  const [edit, probe] = toolsOf(cli, file, content);
  const editName = edit![0].name;
  return (r: RecordedRequest): Turn => {
    if (!r.tools.includes(editName)) return { text: 'ok', usage: { input: 50, output: 5 } };
    const results = r.messages.filter((m) => m.role === 'tool').length;
    if (results === 0) return { toolCalls: edit, usage: { input: 400, output: 40 } };
    if (results === 1) return { toolCalls: probe, usage: { input: 500, output: 40 } };
    return { text: `Added ${file}.`, usage: { input: 600, output: 20 } };
  };
}

const probeOutput = (requests: RecordedRequest[]) =>
  requests
    .flatMap((r) => r.messages)
    .filter((m) => m.role === 'tool' && m.text.includes('placeholder='))
    .map((m) => m.text)
    .pop() ?? '';

test.each(Object.keys(AGENT_CLIS) as AgentCliName[])(
  '%s: edits and runs through its own tools, the model reached only through the gateway; verified, approved, pushed',
  async (cli) => {
    const repo = await makeFixtureRepo({
      'AGENTS.md': 'Marker: AGENTS-MD-5c1e.\n',
      'CLAUDE.md': 'Marker: CLAUDE-MD-9b2d.\n',
    });
    const file = `GREETING-${cli}.txt`;
    const content = `hello from ${cli}\n`;
    fake.script(scriptFor(cli, file, content));
    const before = fake.requests.length;
    const id = newSessionId(cli);
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: `add ${file}`,
      agent: { kind: 'cli', command: cli, model: cli === 'claude' ? 'claude-sonnet-4-5' : 'gpt-5' },
      verify: { test: `grep -qx 'hello from ${cli}' ${file}` },
    });
    const final = await approvePush(handle, 'alice', 480_000);
    const requests = fake.requests.slice(before);
    expect(final).toMatchObject({ phase: 'completed' });
    expect(git(['show', `drydock/${id}:${file}`], repo.bare)).toBe(content);
    // Every request reached the fake with the real key (it refuses others), through the protocol of the CLI.
    const protocol = { claude: 'anthropic', codex: 'responses', opencode: 'chat' }[cli];
    expect(requests.length).toBeGreaterThanOrEqual(3);
    expect(new Set(requests.map((r) => r.protocol))).toEqual(new Set([protocol]));
    expect(requests.every((r) => r.status === 200)).toBe(true);
    // The instruction file it knows was in the prompt.
    const marker = cli === 'claude' ? 'CLAUDE-MD-9b2d' : 'AGENTS-MD-5c1e';
    expect(JSON.stringify(requests[requests.length - 1].body)).toContain(marker);
    // In the sandbox: the placeholder, never the key; the gateway refused another host, a tunnel, another path.
    const probe = probeOutput(requests);
    expect(probe).toMatch(/placeholder=[1-9]/);
    expect(probe).toContain('key-env=0');
    expect(probe).toContain('key-files=0');
    expect(probe).toContain('other-host=403');
    expect(probe).toContain('tunnel=403');
    expect(probe).toContain('other-path=403');
    // Usage was read from the answers: status and budget see it.
    expect(final.agent).toMatchObject({ kind: 'cli', stopReason: 'done' });
    expect(final.agent!.usage!.totalTokens).toBeGreaterThan(1000);
    expect(final.agent!.lastTool).toBeTruthy();
    expect(await containersOf(id)).toHaveLength(0);
  },
  600_000,
);

test('claude: a token budget stops the CLI at the gateway, and the session ends as onExceeded says', async () => {
  const repo = await makeFixtureRepo({});
  fake.script(scriptFor('claude', 'BUDGET.txt', 'spent\n'));
  const before = fake.requests.length;
  const id = newSessionId('budget');
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'add BUDGET.txt',
    agent: { kind: 'cli', command: 'claude', budget: { maxTokens: 300, onExceeded: 'verify' } },
  });
  // onExceeded "verify": the session goes on with what the CLI did before the budget ran out.
  const final = await approvePush(handle, 'alice', 480_000);
  expect(final.phase).toBe('completed');
  expect(final.agent).toMatchObject({ stopReason: 'max_tokens' });
  expect(final.timeline.map((t) => t.detail ?? '').join('\n')).toContain('300 tokens');
  expect(git(['show', `drydock/${id}:BUDGET.txt`], repo.bare)).toBe('spent\n');
  // The first call was forwarded and counted; after it, nothing reached the model.
  const forwarded = fake.requests.slice(before).filter((r) => r.tools.includes('Write'));
  expect(forwarded).toHaveLength(1);
  expect(await containersOf(id)).toHaveLength(0);
}, 600_000);
