/**
 * The agent CLIs (the real, pinned Claude Code, Codex and opencode) use the repo's MCP tools
 * through the model gateway, end to end on real Temporal, Docker and git:
 * the operator declares a real MCP server (the SDK's, on loopback, demanding
 * its own token) with `repo add --mcp`; each CLI, configured by drydock,
 * list the server's allowlisted reading tools at the gateway's endpoint with
 * its step's token and call one; the worker makes the call with the
 * server's credential and the CLI reads the fenced result. The model is the
 * local stand-in of each protocol (test/support/fake-providers.ts).
 */
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { addRepo } from '../../cli/snapshots';
import { AGENT_CLIS, type AgentCliName } from '../../workflows/rules/agent-clis';
import { removeSnapshotSchedules } from '../../sandbox/snapshots';
import type { FakeProviders, RecordedRequest, Turn } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startCliStack,
  startSession,
  type CliStack,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server';

const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const SERVER_TOKEN = `mcp-${randomBytes(12).toString('hex')}`;

let fake: FakeProviders;
let mcp: TestMcpServer;
let stack: TestStack;
let clis: CliStack;
const repos: FixtureRepo[] = [];

beforeAll(async () => {
  mcp = await startTestMcpServer(SERVER_TOKEN);
  clis = await startCliStack(KEY, { secrets: { TRACKER_TOKEN: SERVER_TOKEN } });
  ({ fake, stack } = clis);
}, 600_000);
afterAll(async () => {
  for (const repo of repos) await removeSnapshotSchedules(stack.client, repo.url, [stack.config.DRYDOCK_HOST_ID]);
  await clis?.stop();
  await mcp?.close();
});

const addFile = (file: string, content: string) =>
  `*** Begin Patch\n*** Add File: ${file}\n+${content.trimEnd()}\n*** End Patch`;

/** Each CLI's own way of writing ISSUES.txt (as in agent-clis.test.ts). */
const EDIT: Record<AgentCliName, Turn['toolCalls']> = {
  claude: [{ name: 'Write', arguments: { file_path: '/workspace/ISSUES.txt', content: 'see #12\n' } }],
  codex: [
    { name: 'exec_command', arguments: { cmd: `apply_patch <<'EOF'\n${addFile('ISSUES.txt', 'see #12')}\nEOF` } },
  ],
  opencode: [{ name: 'apply_patch', arguments: { patchText: addFile('ISSUES.txt', 'see #12') } }],
};

/** The CLI's name of the server's tool, as its model is offered it (each CLI prefixes it its own way). */
const mcpToolOf = (r: RecordedRequest) => r.tools.find((t) => t.endsWith('search_issues'));

/** The call of the server's tool: Codex offers the server's tools as one Responses `namespace` tool, mcp__tracker. */
function mcpCall(r: RecordedRequest): NonNullable<Turn['toolCalls']>[number] | undefined {
  const args = { query: 'flaky' };
  if (r.tools.includes('mcp__tracker')) return { namespace: 'mcp__tracker', name: 'search_issues', arguments: args };
  const tool = mcpToolOf(r);
  return tool ? { name: tool, arguments: args } : undefined;
}

/** The script: the MCP tool, then a file written, then done; the CLI's side requests get text. */
function scriptFor(cli: AgentCliName) {
  const edit = EDIT[cli]![0].name;
  return (r: RecordedRequest): Turn => {
    if (!r.tools.includes(edit)) return { text: 'ok', usage: { input: 50, output: 5 } };
    const results = r.messages.filter((m) => m.role === 'tool').length;
    const call = mcpCall(r);
    if (results === 0 && call) return { toolCalls: [call], usage: { input: 400, output: 40 } };
    if (results <= 1) return { toolCalls: EDIT[cli], usage: { input: 500, output: 40 } };
    return { text: 'Noted the flaky test.', usage: { input: 600, output: 20 } };
  };
}

test.each(Object.keys(AGENT_CLIS) as AgentCliName[])(
  '%s: the allowlisted reading tool of the repo’s MCP server, through the gateway; the writing one not offered',
  async (cli) => {
    const repo = await makeFixtureRepo({});
    repos.push(repo);
    const declaration = path.join(process.env.DRYDOCK_TEST_DIR!, `mcp-${randomBytes(4).toString('hex')}.json`);
    await writeFile(
      declaration,
      JSON.stringify([
        {
          name: 'tracker',
          url: mcp.url,
          headers: { Authorization: { secret: 'TRACKER_TOKEN', prefix: 'Bearer ' } },
          tools: ['search_issues', 'create_issue'],
          writes: ['create_issue'],
        },
      ]),
    );
    await addRepo(stack.client, stack.config, repo.url, { every: '1h', mcp: declaration });
    fake.script(scriptFor(cli));
    const before = fake.requests.length;
    const served = mcp.calls.length;
    const id = newSessionId(`mcp-${cli}`);
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'look up the flaky test in the tracker and note it in ISSUES.txt',
      agent: { kind: 'cli', command: cli, model: cli === 'claude' ? 'claude-sonnet-4-5' : 'gpt-5' },
    });
    const final = await approvePush(handle, 'alice', 480_000);
    const requests = fake.requests.slice(before).filter((r) => r.tools.includes(EDIT[cli]![0].name));
    expect(final).toMatchObject({ phase: 'completed' });
    expect(git(['show', `drydock/${id}:ISSUES.txt`], repo.bare)).toBe('see #12\n');
    // The CLI listed the reading tool at the gateway's endpoint; the writing one was not offered.
    const offered = requests[0].tools.filter((t) => t.includes('tracker') || t.includes('issue'));
    if (cli === 'codex') {
      // Codex offers a server's tools as one Responses `namespace` tool, its model calling a function in it.
      expect(offered).toEqual(['mcp__tracker']);
      const namespace = JSON.stringify(
        (requests[0].body.tools as { name?: string }[]).find((t) => t.name === 'mcp__tracker'),
      );
      expect(namespace).toContain('search_issues');
      expect(namespace).not.toContain('create_issue');
    } else {
      expect(offered).toEqual([mcpToolOf(requests[0])]);
    }
    // The worker made the call with the server's credential; the CLI read the fenced result.
    expect(mcp.calls.slice(served)).toEqual([{ tool: 'search_issues', arguments: { query: 'flaky' } }]);
    expect(mcp.authorizations.at(-1)).toBe(`Bearer ${SERVER_TOKEN}`);
    const result = requests[1].messages.find((m) => m.role === 'tool')!.text;
    expect(result).toContain('<mcp-result server="tracker" tool="search_issues">');
    expect(result).toContain('2 issues match');
    expect(final.agent).toMatchObject({ kind: 'cli', mcpCalls: 1 });
    expect(await containersOf(id)).toHaveLength(0);
  },
  900_000,
);
