/**
 * Temporal's time-skipping test server for the workflow tests: the Java SDK's
 * in-memory server, fetched and patched by infra/test-server.sh. The tests
 * start it themselves and wait for it as long as it takes: the SDK gives a
 * server it starts 5 s to listen, which a JVM on a busy machine does not
 * always make ("ephemeral server ... did not start within 5s").
 */
import { execFileSync, spawn } from 'node:child_process';
import { connect } from 'node:net';
import path from 'node:path';
import type { ConnectionPlugin } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { RetryUntilClosed } from '../../platform/temporal-connection';
import { PHASE_ATTRIBUTE, REPO_ATTRIBUTE } from '../../workflows/api';
import { freePort } from '../support/ports';

const KEYWORD = temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD;
/** How long the server may take to listen: minutes only on a machine that is very busy indeed. */
const START_MS = 180_000;

/** The launcher of the Java test server, fetched from Maven once by infra/test-server.sh. */
function testServerPath(): string {
  const script = path.join(__dirname, '..', '..', 'infra', 'test-server.sh');
  return execFileSync('bash', [script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
}

const retry = new RetryUntilClosed();
let current: { env: TestWorkflowEnvironment; stop(): Promise<void> } | undefined;

/**
 * The client connection to the Java test server: keepalive pings no more often than the
 * server permits (grpc-java: at most every 5 minutes; more often and it closes the connection for "excess
 * pings", failing the calls under way), and no retry once the environment is being torn down.
 */
const testServerConnection: ConnectionPlugin = {
  name: 'drydock-test-server-connection',
  configureConnection: (options) => ({
    ...options,
    channelArgs: { ...options.channelArgs, 'grpc.keepalive_time_ms': 600_000 },
    interceptors: [retry.interceptor],
  }),
};

/**
 * The SDK's time-skipping environment on a server it did not start. Its public
 * createFromExistingServer turns time skipping off, so this calls the factory
 * behind both (internal to @temporalio/testing; a change there fails every workflow test at once).
 */
const connectTimeSkipping = (address: string): Promise<TestWorkflowEnvironment> =>
  (TestWorkflowEnvironment as unknown as { create(opts: object): Promise<TestWorkflowEnvironment> }).create.call(
    TestWorkflowEnvironment,
    {
      server: { type: 'existing' },
      address,
      namespace: 'default',
      supportsTimeSkipping: true,
      plugins: [testServerConnection],
    },
  );

/** The time-skipping test server, started and connected, with drydock's search attributes. */
export async function startTestServer(): Promise<TestWorkflowEnvironment> {
  const server = await launch();
  try {
    const env = await connectTimeSkipping(server.address);
    // The test server implements adding search attributes, not listing them.
    await env.connection.operatorService.addSearchAttributes({
      namespace: 'default',
      searchAttributes: { [PHASE_ATTRIBUTE.name]: KEYWORD, [REPO_ATTRIBUTE.name]: KEYWORD },
    });
    current = { env, stop: server.stop };
    return env;
  } catch (err) {
    await server.stop();
    throw err;
  }
}

/** Ends the environment and its server; the client retries nothing from then on (see platform/temporal-connection.ts). */
export async function stopEnvironment(env: TestWorkflowEnvironment | undefined): Promise<void> {
  await retry.close();
  await env?.teardown();
  await current?.stop();
  current = undefined;
}

/** The test server's clock (skipped time included), for the explanation of a wait that got no answer. */
export const serverTime = (): Promise<number> => current?.env.currentTimeMs() ?? Promise.resolve(Date.now());

/** Starts the launcher on a free port and waits until it listens; `stop` ends it. */
async function launch(): Promise<{ address: string; stop(): Promise<void> }> {
  const port = await freePort();
  const child = spawn(testServerPath(), [String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  const deadline = Date.now() + START_MS;
  while (!(await listens(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(
        `the time-skipping test server did not listen on port ${port} within ${START_MS / 1000} s:\n${stderr}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return { address: `127.0.0.1:${port}`, stop };
}

const listens = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
