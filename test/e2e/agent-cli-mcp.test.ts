/**
 * An agent CLI (the real, pinned Claude Code) uses the repo's MCP tools
 * through the model gateway, end to end on real Temporal, Docker and git:
 * the operator declares a real MCP server (the SDK's, on loopback, demanding
 * its own token) with `repo add --mcp`; Claude Code, configured by drydock,
 * lists the server's allowlisted reading tools at the gateway's endpoint with
 * its step's token and calls one; the worker makes the call with the
 * server's credential and the CLI reads the fenced result. The model is the
 * local Anthropic stand-in (test/support/fake-providers.ts).
 */
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { addRepo } from '../../cli/snapshots';
import { removeSnapshotSchedules } from '../../sandbox/snapshots';
import { startFakeProviders, type FakeProviders, type RecordedRequest, type Turn } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server';

const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const SERVER_TOKEN = `mcp-${randomBytes(12).toString('hex')}`;

let fake: FakeProviders;
let mcp: TestMcpServer;
let stack: TestStack;
let repo: FixtureRepo | undefined;

beforeAll(async () => {
  fake = await startFakeProviders({ apiKey: KEY });
  mcp = await startTestMcpServer(SERVER_TOKEN);
  stack = await startStack({
    DRYDOCK_ANTHROPIC_BASE_URL: fake.url,
    DRYDOCK_ANTHROPIC_API_KEY: KEY,
    secrets: { TRACKER_TOKEN: SERVER_TOKEN },
  });
}, 600_000);
afterAll(async () => {
  if (repo) await removeSnapshotSchedules(stack.client, repo.url, [stack.config.DRYDOCK_HOST_ID]);
  await stack?.stop();
  await mcp?.close();
  await fake?.close();
});

/** The script: the MCP tool, then a file written with what it said, then done; the CLI's side requests get text. */
function script(r: RecordedRequest): Turn {
  if (!r.tools.includes('Write')) return { text: 'ok', usage: { input: 50, output: 5 } };
  const results = r.messages.filter((m) => m.role === 'tool').length;
  if (results === 0) {
    return {
      toolCalls: [{ name: 'mcp__tracker__search_issues', arguments: { query: 'flaky' } }],
      usage: { input: 400, output: 40 },
    };
  }
  if (results === 1) {
    return {
      toolCalls: [{ name: 'Write', arguments: { file_path: '/workspace/ISSUES.txt', content: 'see #12\n' } }],
      usage: { input: 500, output: 40 },
    };
  }
  return { text: 'Noted the flaky test.', usage: { input: 600, output: 20 } };
}

test('claude: the allowlisted reading tool of the repo’s MCP server, through the gateway; the writing one not offered', async () => {
  repo = await makeFixtureRepo({});
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
  fake.script(script);
  const before = fake.requests.length;
  const served = mcp.calls.length;
  const id = newSessionId('cli-mcp');
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'look up the flaky test in the tracker and note it in ISSUES.txt',
    agent: { kind: 'cli', command: 'claude', model: 'claude-sonnet-4-5' },
  });
  const final = await approvePush(handle, 'alice', 480_000);
  const requests = fake.requests.slice(before).filter((r) => r.tools.includes('Write'));
  expect(final).toMatchObject({ phase: 'completed' });
  expect(git(['show', `drydock/${id}:ISSUES.txt`], repo.bare)).toBe('see #12\n');
  // Claude Code listed the reading tool at the gateway's endpoint; the writing one was not offered.
  expect(requests[0].tools).toContain('mcp__tracker__search_issues');
  expect(requests[0].tools).not.toContain('mcp__tracker__create_issue');
  // The worker made the call with the server's credential; the CLI read the fenced result.
  expect(mcp.calls.slice(served)).toEqual([{ tool: 'search_issues', arguments: { query: 'flaky' } }]);
  expect(mcp.authorizations.at(-1)).toBe(`Bearer ${SERVER_TOKEN}`);
  const result = requests[1].messages.find((m) => m.role === 'tool')!.text;
  expect(result).toContain('<mcp-result server="tracker" tool="search_issues">');
  expect(result).toContain('2 issues match "flaky"');
  expect(final.agent).toMatchObject({ kind: 'cli', mcpCalls: 1 });
  expect(await containersOf(id)).toHaveLength(0);
}, 900_000);
