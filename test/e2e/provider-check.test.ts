/**
 * The Docker provider's start checks against this machine's engine, and the
 * worker as a user starts it: a setting that keeps sandboxes from running
 * stops `drydock worker` before it takes work, in one line naming the
 * setting (issue 47: a bad provider setting used to show only at the first
 * session). The checks that need no engine: test/unit/provider-check.test.ts.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startHostProvider, type StartNeeds } from '../../sandbox/host-provider';
import { ProviderCheckFailed } from '../../sandbox/provider';
import { runCli, testConfig } from '../support/helpers';

const baseImage = process.env.DRYDOCK_BASE_IMAGE!;
const need: StartNeeds = { baseImage, baseImageSetting: 'DRYDOCK_BASE_IMAGE' };

/** The start's failure, which must be a ProviderCheckFailed in one line. */
async function failureOf(started: Promise<unknown>): Promise<string> {
  const err = await started.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderCheckFailed);
  expect((err as Error).message).not.toMatch(/\n/);
  return (err as Error).message;
}

test('an engine with the runtime and the base image passes', async () => {
  const provider = await startHostProvider(testConfig({ DRYDOCK_DOCKER_RUNTIME: 'runc' }), need);
  expect(provider.name).toBe('docker');
});

test('a runtime the engine does not have is named, with what it has', async () => {
  const message = await failureOf(
    startHostProvider(testConfig({ DRYDOCK_DOCKER_RUNTIME: 'drydock-no-such-runtime' }), need),
  );
  expect(message).toMatch(
    /^DRYDOCK_DOCKER_RUNTIME: the engine at .+ has no runtime "drydock-no-such-runtime" \(it has [^)]*\brunc\b[^)]*\); register it in daemon\.json, or unset DRYDOCK_DOCKER_RUNTIME$/,
  );
});

test('a base image the engine does not hold is named, with how to build it', async () => {
  const missing = { baseImage: 'drydock-no-such-base:0', baseImageSetting: 'DRYDOCK_BASE_IMAGE' };
  const message = await failureOf(startHostProvider(testConfig(), missing));
  expect(message).toMatch(
    /^DRYDOCK_BASE_IMAGE: the base image drydock-no-such-base:0 is not on the engine at .+; build it \(npx tsx sandbox-images\/base-image\.ts, or drydock up\), or name an image it has$/,
  );
});

test('drydock worker with a DOCKER_HOST socket that does not exist exits 1 with one line naming it', async () => {
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-no-engine-'));
  const socket = path.join(dir, 'docker.sock');
  const out = await runCli(['worker'], {
    DOCKER_HOST: `unix://${socket}`,
    DRYDOCK_DATA_DIR: path.join(dir, 'data'),
    DRYDOCK_TASK_QUEUE: `q-no-engine-${path.basename(dir)}`,
    LOG_LEVEL: 'warn',
  });
  expect(out.stderr).toBe(
    `drydock: DOCKER_HOST: the Docker engine at unix://${socket} does not answer (connect ENOENT ${socket}); ` +
      'start dockerd, or set DOCKER_HOST to an engine that runs\n',
  );
  expect(out.code).toBe(1);
});
