/**
 * `drydock up`: the whole dev stack on embedded defaults. A Temporal dev
 * server (state in <data dir>/temporal.db, Web UI on :8233) unless
 * TEMPORAL_ADDRESS already answers, the sandbox base image, and a worker
 * whose sandboxes trust the machine's extra CAs (sandbox/ca.ts, machineExtraCa).
 * Ctrl-C stops everything it started.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { userInfo } from 'node:os';
import type { Config } from '../platform/config';
import type { Logger } from '../platform/log';
import { ensureDevToken } from '../identity/dev-token';
import { PersonalTokens } from '../identity/personal-tokens';
import { openDatabase } from '../store/db';
import { answers, ensureSearchAttributes, startDevServer } from '../platform/temporal';
import { connectClient, connectWorker } from '../platform/temporal-connection';
import { ensureBaseImage } from '../sandbox-images/base-image';
import { machineExtraCa } from '../sandbox';
import { startServer } from './serve';
import { createWorker, drainOnSignals, hostQueueOf, logUnhandledRejections } from './worker';
import { installTemporalRuntime } from './telemetry';

const progress = (line: string) => process.stderr.write(`==> ${line}\n`);

export async function runDevStack(config: Config, log: Logger): Promise<void> {
  await mkdir(config.DRYDOCK_DATA_DIR, { recursive: true });
  // Development mode: sessions may use repos that are not registered (file:// on this machine included).
  config.DRYDOCK_DEV_MODE = true;
  let server: ChildProcess | undefined;
  if (await answers(config.TEMPORAL_ADDRESS)) {
    progress(`using the Temporal server at ${config.TEMPORAL_ADDRESS}`);
  } else {
    const dbFile = path.join(config.DRYDOCK_DATA_DIR, 'temporal.db');
    progress(
      `starting the Temporal dev server on ${config.TEMPORAL_ADDRESS} (state: ${dbFile}, UI: ${config.DRYDOCK_TEMPORAL_UI})`,
    );
    server = await startDevServer({
      address: config.TEMPORAL_ADDRESS.replace(/^localhost:/, '127.0.0.1:'),
      // The UI's port is the one DRYDOCK_TEMPORAL_UI links to (8233 by default).
      uiPort: Number(new URL(config.DRYDOCK_TEMPORAL_UI).port || 80),
      dbFile,
      logFile: path.join(config.DRYDOCK_DATA_DIR, 'temporal.log'),
    });
  }
  const stopServer = () => server?.kill('SIGTERM');
  try {
    progress('checking the sandbox base image');
    if (!config.DRYDOCK_BASE_IMAGE) config.DRYDOCK_BASE_IMAGE = await ensureBaseImage(progress);
    const client = await connectClient(config);
    await ensureSearchAttributes(client.connection, config.TEMPORAL_NAMESPACE);

    // Sandboxes trust what this machine trusts beyond the usual roots (a network that intercepts TLS).
    const extraCa = await machineExtraCa(
      config.DRYDOCK_EXTRA_CA_CERTS,
      process.env,
      path.join(config.DRYDOCK_DATA_DIR, 'machine-ca-certificates.pem'),
    );
    if (extraCa.file) config.DRYDOCK_EXTRA_CA_CERTS = extraCa.file;
    progress(extraCa.line);
    const sdkMetricsUrl = await installTemporalRuntime(log, config);
    logUnhandledRejections(log);
    const connection = await connectWorker(config);
    const worker = await createWorker({ config, connection, log, sdkMetricsUrl });
    drainOnSignals(worker, config, log);
    // The console and `drydock login` need a token: the local user gets a personal one in a file.
    const db = await openDatabase(config, log);
    const tokenFile = await ensureDevToken(
      new PersonalTokens(db.pool),
      config.DRYDOCK_DATA_DIR,
      config.DRYDOCK_USER ?? userInfo().username,
    ).finally(() => db.close());
    const tokenHint = `your token is in ${tokenFile}`;
    const server = await startServer({ config, client, log });
    process.stderr.write(
      [
        '',
        'drydock is up.',
        `  Temporal Web UI  ${config.DRYDOCK_TEMPORAL_UI}`,
        `  worker           task queues ${config.DRYDOCK_TASK_QUEUE} and ${hostQueueOf(config)}`,
        `  review console   ${server.url}  (${tokenHint})`,
        `  webhooks         ${server.url}/webhooks/github, ${server.url}/webhooks/ci`,
        '  development mode on: sessions may use unregistered repos (drydock repo add registers one)',
        '',
        'Take the tour from another terminal: bin/drydock demo',
        'or start a session of your own, for example:',
        `  bin/drydock run --repo file://$PWD --task "say hello" --step 'echo hello > HELLO.md' --test 'test -s HELLO.md'`,
        '',
        'Ctrl-C stops everything drydock started.',
        '',
      ].join('\n'),
    );
    // Ctrl-C (or SIGTERM) drains the worker; then we stop the server.
    try {
      await worker.run();
    } finally {
      await server.close();
      await client.connection.close();
      await connection.close();
    }
  } finally {
    stopServer();
  }
}
