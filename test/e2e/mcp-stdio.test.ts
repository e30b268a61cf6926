/**
 * A stdio MCP server, end to end on real Docker: a real server made with the
 * official SDK, bundled into a locally built image (FROM the sandbox base
 * image, nothing pulled), declared by image and command; the built-in loop's
 * activities list its tools and, when the model stand-in asks, call one. The
 * worker runs it in a container of its own: while the client is open the
 * container is inspected (no network, read-only, nobody, no capabilities),
 * the server itself says it sees only loopback, and after each client closes
 * no container of it is left. Then the whole way, through a Temporal session:
 * the server declared for a repo with `repo add --mcp`, a session of the
 * built-in loop calls its tool, the call is audited, and the change is
 * verified, approved and pushed.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Pool } from 'pg';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { build } from 'esbuild';
import { createAgentLoopActivities as createAgentActivities } from '../../agent-loop/activities';
import { addRepo } from '../../cli/snapshots';
import type { ToolCallInput } from '../../agent-loop/contract';
import { listTools, withMcpClient } from '../../mcp/client';
import { MCP_STDIO_LABELS } from '../../mcp/stdio';
import { createMcpActivities } from '../../mcp/tools';
import { Redactor } from '../../platform/scrub';
import { DockerProvider } from '../../sandbox/docker/provider';
import { removeSnapshotSchedules } from '../../sandbox/snapshots';
import { ensureBaseImage } from '../../sandbox-images/base-image';
import { ArtifactStore } from '../../store/artifacts';
import { AuditTrail, type AuditInput } from '../../store/audit';
import { parseMcpDeclaration, type McpServer } from '../../workflows/mcp-servers';
import { startFakeProviders, toolResults, type FakeProviders } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  testAuditKey,
  waitForStatus,
} from '../support/helpers';

const exec = promisify(execFile);
const docker = async (...args: string[]) => (await exec('docker', args, { maxBuffer: 16 << 20 })).stdout.trim();
const IMAGE = `drydock-test-mcp-stdio:${process.pid}`;

let dir: string;
let server: McpServer;
let providers: FakeProviders;

/** Containers of the test's server (any state). */
const containers = () => docker('ps', '-aq', '--filter', `label=${MCP_STDIO_LABELS.server}=look`);

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-mcp-stdio-'));
  const context = path.join(dir, 'image');
  await build({
    entryPoints: [path.join(__dirname, '../support/mcp-stdio-server.ts')],
    bundle: true,
    platform: 'node',
    format: 'cjs',
    outfile: path.join(context, 'server.js'),
    logLevel: 'silent',
  });
  await writeFile(path.join(context, 'Dockerfile'), `FROM ${await ensureBaseImage()}\nCOPY server.js /srv/server.js\n`);
  await docker('build', '-q', '--pull=false', '-t', IMAGE, context);
  const parsed = parseMcpDeclaration([
    { name: 'look', stdio: { image: IMAGE, command: ['node', '/srv/server.js'] }, tools: ['look', 'missing'] },
  ]);
  if (!parsed.ok) throw new Error(parsed.problems.join('; '));
  server = parsed.servers[0];
  providers = await startFakeProviders({ apiKey: 'k' });
}, 300_000);

afterAll(async () => {
  await providers?.close();
  const left = await containers().catch(() => '');
  if (left) await docker('rm', '-f', ...left.split('\n'));
  await docker('rmi', '-f', IMAGE).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

test("while its client is open the server's container is hardened; after, it is gone", async () => {
  const inspected = await withMcpClient(server, {}, async (client) => {
    const tools = await listTools(client, server);
    expect(tools.map((t) => t.name)).toEqual(['look']);
    const [id] = (await containers()).split('\n');
    return JSON.parse(await docker('inspect', id!))[0] as {
      Config: { User: string };
      HostConfig: Record<string, unknown>;
      Mounts: unknown[];
    };
  });
  expect(inspected.Config.User).toBe('65534:65534');
  expect(inspected.HostConfig).toMatchObject({
    NetworkMode: 'none',
    ReadonlyRootfs: true,
    CapDrop: ['ALL'],
    SecurityOpt: ['no-new-privileges'],
    Memory: 256 * 1024 * 1024,
    PidsLimit: 64,
    NanoCpus: 500_000_000,
    Privileged: false,
    Binds: null,
  });
  expect(inspected.Mounts).toEqual([]);
  expect(await containers()).toBe('');
}, 120_000);

test('the built-in loop lists its tools and calls one through the worker; the server sees no network', async () => {
  const audit: AuditInput[] = [];
  const d = {
    artifacts: new ArtifactStore(dir),
    audit: { append: async (event: AuditInput) => audit.push(event) },
    redactor: new Redactor([]),
    secrets: {},
  } as unknown as Parameters<typeof createMcpActivities>[0];
  const env = () => new MockActivityEnvironment({}, { logger: new DefaultLogger('ERROR') });
  const models = {
    defaultBaseUrl: providers.baseUrl,
    defaultApi: 'compatible' as const,
    defaultApiKey: 'k',
    endpoints: {},
    prices: {},
  };
  const agent = createAgentActivities({ ...d, models } as unknown as Parameters<typeof createAgentActivities>[0]);
  const sessionId = 'stdio1';
  // A worker's secret in its environment (as DRYDOCK_SECRET_<NAME> are) must not reach the server.
  process.env.DRYDOCK_SECRET_STDIO_PROBE = 'probe-value';
  await agent.addAgentMessage({ sessionId, index: 0, content: 'system' });
  await agent.addAgentMessage({ sessionId, index: 1, content: 'look around' });
  const listed = await env().run(createMcpActivities(d).listMcpTools, { sessionId, servers: [server] });
  expect(listed).toEqual({
    tools: ['mcp__look__look'],
    problems: ['MCP server look does not list the allowlisted tool missing'],
  });
  providers.script([{ toolCalls: [{ name: 'mcp__look__look', arguments: { note: 'hi' } }] }, { text: 'done' }]);
  const modelInput = {
    sandbox: 'unused',
    sessionId,
    model: 'm',
    turn: 1,
    messageCount: 2,
    requirePrice: false,
    maxOutputTokens: 100,
    remaining: {},
    contextWindow: 128_000,
    compactedBefore: 0,
  };
  const answer = await env().run(agent.modelCall, modelInput);
  expect(answer).toMatchObject({ toolCalls: [{ name: 'mcp__look__look' }] });
  const call: ToolCallInput = {
    sandbox: 'unused',
    sessionId,
    turn: 1,
    assistantIndex: 2,
    callIndex: 0,
    index: 3,
    nonce: '0'.repeat(32),
    outputLimit: 10_000,
    runTimeoutMs: 60_000,
    checkpointBase: 'b'.repeat(40),
    mcp: { server, tool: 'look', writes: false },
  };
  expect(await env().run(agent.runTool, call)).toMatchObject({ type: 'tool', tool: 'mcp__look__look', ok: true });
  await env().run(agent.modelCall, { ...modelInput, turn: 2, messageCount: 4 });
  const [result] = toolResults(providers.requests[1]);
  const fenced = /^<mcp-result server="look" tool="look">\n(.*)\n<\/mcp-result>$/s.exec(result!);
  expect(fenced).not.toBeNull();
  const seen = JSON.parse(fenced![1]!) as { uid: number; interfaces: string[]; env: string[] };
  // Loopback only (a Docker daemon without a default bridge shows the same: the inspection above is the proof).
  expect(seen).toMatchObject({ note: 'hi', uid: 65534, interfaces: ['lo'], rootWritable: false });
  expect(seen.env).not.toContain('DRYDOCK_SECRET_STDIO_PROBE');
  delete process.env.DRYDOCK_SECRET_STDIO_PROBE;
  expect(audit.filter((e) => e.kind === 'mcp_call').map((e) => e.data)).toEqual([
    expect.objectContaining({ server: 'look', tool: 'look', writes: false, ok: true }),
  ]);
  expect(await containers()).toBe('');
}, 180_000);

test("the reaper removes a stdio server's container a dead worker left, once it has expired, and spares one in use", async () => {
  const leftover = (name: string, expires: Date) =>
    docker(
      'create',
      `--name=${name}`,
      `--label=${MCP_STDIO_LABELS.server}=look`,
      `--label=${MCP_STDIO_LABELS.expires}=${expires.toISOString()}`,
      '--network=none',
      IMAGE,
      'true',
    );
  const suffix = process.pid;
  await leftover(`drydock-mcp-look-expired-${suffix}`, new Date(Date.now() - 1000));
  await leftover(`drydock-mcp-look-live-${suffix}`, new Date(Date.now() + 600_000));
  const removed = await new DockerProvider().reapMcpStdio();
  expect(removed).toContain(`MCP stdio server container drydock-mcp-look-expired-${suffix}`);
  expect(removed.join()).not.toContain('live');
  const left = await docker('ps', '-a', '--format', '{{.Names}}', '--filter', `label=${MCP_STDIO_LABELS.server}=look`);
  expect(left.split('\n')).toEqual([`drydock-mcp-look-live-${suffix}`]);
  await docker('rm', '-f', `drydock-mcp-look-live-${suffix}`);
}, 60_000);

test('a session of the built-in loop calls the tool of a stdio server declared for its repo; audited, verified, approved, pushed', async () => {
  const key = 'k-session';
  const model = await startFakeProviders({ apiKey: key });
  const stack = await startStack({ DRYDOCK_MODEL_BASE_URL: model.baseUrl, DRYDOCK_MODEL_API_KEY: key });
  const repo = await makeFixtureRepo();
  const pool = new Pool({ connectionString: process.env.DATABASE_URL });
  try {
    const declaration = path.join(dir, 'servers.json');
    await writeFile(
      declaration,
      JSON.stringify([{ name: 'look', stdio: { image: IMAGE, command: ['node', '/srv/server.js'] }, tools: ['look'] }]),
    );
    await addRepo(stack.client, stack.config, repo.url, { every: '1h', mcp: declaration });
    model.script([
      { toolCalls: [{ name: 'mcp__look__look', arguments: { note: 'from the session' } }] },
      {
        toolCalls: [
          {
            name: 'edit_file',
            arguments: { path: 'README.md', old_string: '# fixture\n', new_string: '# fixture\nhello\n' },
          },
        ],
      },
      { text: 'Looked, then greeted.' },
    ]);
    const id = newSessionId('mcp-stdio');
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'look around with the look tool, then greet in the README',
      agent: { kind: 'openai', model: 'fake-1' },
      verify: { test: 'sh check.sh' },
    });
    const waiting = await waitForStatus(handle, inPhase('awaiting_approval'), 240_000);
    expect(waiting.verification).toMatchObject({ passed: true });
    expect(waiting.agent).toMatchObject({ kind: 'openai', mcpCalls: 1, stopReason: 'done' });
    expect(waiting.timeline.map((t) => t.name)).toContain('agent: MCP tools');
    // The model was offered the server's tool beside drydock's, and read its fenced answer from the container.
    expect(model.requests[0]!.tools).toContain('mcp__look__look');
    const [result] = toolResults(model.requests[1]!);
    const fenced = /^<mcp-result server="look" tool="look">\n(.*)\n<\/mcp-result>$/s.exec(result!);
    expect(JSON.parse(fenced![1]!)).toMatchObject({ note: 'from the session', uid: 65534, interfaces: ['lo'] });
    const final = await approvePush(handle, 'alice', 240_000);
    expect(final.phase).toBe('completed');
    expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');
    // The call is one mcp_call event of the session's trail: sizes, not contents.
    const events = await new AuditTrail(pool, 'test-host', new Redactor([]), testAuditKey()).events(id);
    const calls = events.filter((e) => e.kind === 'mcp_call').map((e) => e.data);
    expect(calls).toEqual([
      expect.objectContaining({ server: 'look', tool: 'look', writes: false, ok: true, turn: 1 }),
    ]);
    expect(JSON.stringify(calls)).not.toContain('from the session');
    expect(await containersOf(id)).toHaveLength(0);
    expect(await containers()).toBe('');
  } finally {
    await removeSnapshotSchedules(stack.client, repo.url, [stack.config.DRYDOCK_HOST_ID]);
    await pool.end();
    await stack.stop();
    await model.close();
  }
}, 600_000);
