/**
 * `drydock up`: the whole dev stack on embedded defaults. A Temporal dev
 * server (state in <data dir>/temporal.db, Web UI on :8233) unless
 * TEMPORAL_ADDRESS already answers, the sandbox base image, and a worker.
 * Ctrl-C stops everything it started.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import type { Config } from '../lib/config';
import type { Logger } from '../lib/log';
import { answers, ensureSearchAttributes, startDevServer } from '../lib/temporal';
import { ensureBaseImage } from '../sandbox-images/base-image';
import { createWorker, forwardTemporalLogs, hostQueueOf } from './worker';

const progress = (line: string) => process.stderr.write(`==> ${line}\n`);

export async function runDevStack(config: Config, log: Logger): Promise<void> {
  await mkdir(config.DRYDOCK_DATA_DIR, { recursive: true });
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
    const client = await Connection.connect({ address: config.TEMPORAL_ADDRESS });
    await ensureSearchAttributes(client, config.TEMPORAL_NAMESPACE);
    await client.close();

    forwardTemporalLogs(log);
    const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
    const worker = await createWorker({ config, connection, log });
    process.stderr.write(
      [
        '',
        'drydock is up.',
        `  Temporal Web UI  ${config.DRYDOCK_TEMPORAL_UI}`,
        `  worker           task queues ${config.DRYDOCK_TASK_QUEUE} and ${hostQueueOf(config)}`,
        '',
        'Start a session from another terminal, for example:',
        `  bin/drydock run --repo file://$PWD --task "say hello" --step 'echo hello > HELLO.md' --test 'test -s HELLO.md'`,
        '',
        'Ctrl-C stops everything drydock started.',
        '',
      ].join('\n'),
    );
    // The SDK's runtime shuts the worker down on SIGINT/SIGTERM; then we stop the server.
    await worker.run();
    await connection.close();
  } finally {
    stopServer();
  }
}
