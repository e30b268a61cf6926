/**
 * Child sessions from an agent CLI end to end (docs/agents.md, Child
 * sessions), on real Temporal, Docker, git and PostgreSQL: the real, pinned
 * Claude Code, Codex and opencode in the parent's sandbox each find
 * `start_child` at the model gateway's /mcp/drydock endpoint (configured by
 * drydock, with its step's token) and call it; the session starts the child
 * (its own sandbox, the same CLI, at the parent's base commit), which edits
 * and verifies; the call's answer is the child's outcome and fenced words,
 * and the child's diff is in the parent's sandbox, where the parent's CLI
 * takes it with `git apply`. Only the parent's change is pushed. The model is
 * the local stand-in of each CLI's protocol (test/support/fake-providers.ts).
 */
import { randomBytes } from 'node:crypto';
import { status as statusQuery } from '../../workflows/api';
import { AGENT_CLIS, type AgentCliName } from '../../workflows/rules/agent-clis';
import { childDiffPath } from '../../workflows/rules/children';
import type { RecordedRequest, Turn } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startCliStack,
  startSession,
  type CliStack,
  auditData,
} from '../support/helpers';

const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const CHILD_TASK = 'add a line "hello" under the title of README.md';

let clis: CliStack;

beforeAll(async () => {
  clis = await startCliStack(KEY);
}, 600_000);
afterAll(async () => {
  await clis?.stop();
});

const results = (r: RecordedRequest) => r.messages.filter((m) => m.role === 'tool');

/** Each CLI's shell tool, by which its work requests are told from its side requests (titles, summaries). */
const SHELL: Record<AgentCliName, (command: string) => NonNullable<Turn['toolCalls']>[number]> = {
  claude: (command) => ({ name: 'Bash', arguments: { command, description: 'run' } }),
  codex: (command) => ({ name: 'exec_command', arguments: { cmd: command } }),
  opencode: (command) => ({ name: 'bash', arguments: { command, description: 'run' } }),
};

/**
 * start_child as each CLI offers it to its model: Claude Code as mcp__drydock__start_child,
 * opencode as drydock_start_child, Codex inside one Responses `namespace` tool, mcp__drydock.
 */
function startChildCall(cli: AgentCliName, r: RecordedRequest): NonNullable<Turn['toolCalls']>[number] | undefined {
  const args = { task: CHILD_TASK };
  if (cli === 'codex') {
    return r.tools.includes('mcp__drydock')
      ? { namespace: 'mcp__drydock', name: 'start_child', arguments: args }
      : undefined;
  }
  const name = r.tools.find((t) => t.endsWith('start_child'));
  return name ? { name, arguments: args } : undefined;
}

/**
 * The parent (offered start_child) starts the child, then applies its diff; the
 * child (not offered it: children.depth 1) writes README.md. Side requests get text.
 */
function script(cli: AgentCliName, diffAt: () => string) {
  const shellName = SHELL[cli]('').name;
  return (r: RecordedRequest): Turn => {
    const usage = { input: 400, output: 40 };
    if (!r.tools.includes(shellName)) return { text: 'ok', usage: { input: 50, output: 5 } };
    const done = results(r).length;
    const startChild = startChildCall(cli, r);
    if (startChild) {
      if (done === 0) return { toolCalls: [startChild], usage };
      if (done === 1) return { toolCalls: [SHELL[cli](`git apply ${diffAt()}`)], usage };
      return { text: "Took the child's change.", usage };
    }
    if (done === 0) return { toolCalls: [SHELL[cli]("printf '# fixture\\nhello\\n' > README.md")], usage };
    return { text: 'Added hello.', usage };
  };
}

test.each(Object.keys(AGENT_CLIS) as AgentCliName[])(
  "%s starts a child through the gateway's start_child and takes its diff into its change",
  async (cli) => {
    const { fake, stack } = clis;
    const repo = await makeFixtureRepo();
    const id = newSessionId(`cli-kids-${cli}`);
    const childId = `${id}.child-1`;
    fake.script(script(cli, () => childDiffPath(childId)));
    const before = fake.requests.length;
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'greet, with a child session doing the work',
      agent: { kind: 'cli', command: cli, model: cli === 'claude' ? 'claude-sonnet-4-5' : 'gpt-5' },
      verify: { test: 'sh check.sh' },
    });
    const final = await approvePush(handle, 'alice', 900_000);
    expect(final).toMatchObject({ phase: 'completed' });
    expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');

    const requests = fake.requests.slice(before).filter((r) => r.tools.includes(SHELL[cli]('').name));
    const parent = requests.filter((r) => startChildCall(cli, r));
    const child = requests.filter((r) => !startChildCall(cli, r));
    expect(parent.length).toBeGreaterThanOrEqual(3);
    expect(child.length).toBeGreaterThanOrEqual(2);
    // The call's answer, as the parent's CLI read it: the outcome, the fenced words, the diff's path.
    const answer = results(parent[1])[0].text;
    expect(answer).toContain(`child session ${childId} ended: completed`);
    expect(answer).toContain(`<child-words session="${childId}">`);
    expect(answer).toContain('verification: passed');
    expect(answer).toContain('Added hello.');
    expect(answer).toContain(`git apply ${childDiffPath(childId)}`);

    expect(final.children).toEqual([
      expect.objectContaining({ sessionId: childId, phase: 'completed', verified: true }),
    ]);
    expect(final.timeline.map((t) => t.name)).toEqual(expect.arrayContaining(['child: started', 'child: completed']));
    const kid = await stack.client.workflow.getHandle(childId).query(statusQuery);
    expect(kid).toMatchObject({ phase: 'completed', childOf: id });
    expect(kid.pushed).toBeUndefined();
    // The call is in the parent's audit trail, as the built-in loop's are.
    expect((await auditData(id, 'tool_call')).filter((d) => d.tool === 'start_child')).toEqual([
      expect.objectContaining({ via: 'gateway', child: childId, ok: true }),
    ]);
    expect(await containersOf(id)).toHaveLength(0);
    expect(await containersOf(childId)).toHaveLength(0);
  },
  1_200_000,
);
