/**
 * The Docker provider's settings (a zod schema for the registry of
 * sandbox/host-provider.ts), how it is made from them, and the checks the
 * worker runs before it takes work: the engine answers, the runtime asked
 * for is registered there (runsc for gVisor), the base image is there. Each
 * failure is one line naming the setting to change.
 */
import path from 'node:path';
import Docker from 'dockerode';
import { z } from 'zod';
import { ProviderCheckFailed } from '../provider';
import { DockerProvider } from './provider';

/** Parsed from the worker's configuration (platform/config.ts documents its variables) and environment. */
export const dockerSettingsSchema = z.object({
  /** The engine: unix:///path, tcp://host:port, ssh://user@host (docker-modem's forms). Unset: the local socket. */
  DOCKER_HOST: z
    .string()
    .regex(
      /^(unix|npipe|tcp|ssh|http|https):\/\/\S*$/,
      'unix:///path/to/docker.sock, tcp://host:port or ssh://user@host',
    )
    .optional(),
  DRYDOCK_DOCKER_RUNTIME: z.string().min(1).optional(),
  /** Sandboxes' storage lives under `<data dir>/sandboxes`. */
  DRYDOCK_DATA_DIR: z.string().min(1),
});

export type DockerProviderSettings = z.infer<typeof dockerSettingsSchema>;

/** Where dockerode looks without DOCKER_HOST: /var/run/docker.sock, or Docker Desktop's in the home folder. */
const DEFAULT_ENGINE = 'the local socket (DOCKER_HOST unset)';

/** The engine DOCKER_HOST names (a unix socket path taken from it here, anything else read by dockerode). */
export function createDockerProvider(settings: DockerProviderSettings): DockerProvider {
  const host = settings.DOCKER_HOST;
  const docker = host?.startsWith('unix://') ? new Docker({ socketPath: host.slice('unix://'.length) }) : new Docker();
  return new DockerProvider(docker, path.join(settings.DRYDOCK_DATA_DIR, 'sandboxes'));
}

/** What the worker needs of the engine besides the settings. */
export interface DockerCheck {
  /** The image sandboxes start from, and the variable that names it. */
  baseImage: string;
  baseImageSetting: string;
}

/** Throws ProviderCheckFailed naming the first thing that keeps this worker from running sandboxes. */
export async function checkDocker(
  provider: DockerProvider,
  settings: DockerProviderSettings,
  need: DockerCheck,
): Promise<void> {
  const engine = settings.DOCKER_HOST ?? DEFAULT_ENGINE;
  let runtimes: string[];
  try {
    runtimes = Object.keys((await provider.docker.info()).Runtimes ?? {});
  } catch (err) {
    const why = ((err as Error).message ?? String(err)).split('\n')[0];
    throw new ProviderCheckFailed(
      'DOCKER_HOST',
      `the Docker engine at ${engine} does not answer (${why}); start dockerd, or set DOCKER_HOST to an engine that runs`,
    );
  }
  const runtime = settings.DRYDOCK_DOCKER_RUNTIME;
  if (runtime && !runtimes.includes(runtime)) {
    const install = runtime === 'runsc' ? 'install gVisor (bash infra/runsc.sh)' : 'register it in daemon.json';
    throw new ProviderCheckFailed(
      'DRYDOCK_DOCKER_RUNTIME',
      `the engine at ${engine} has no runtime "${runtime}" (it has ${runtimes.join(', ') || 'none'}); ${install}, or unset DRYDOCK_DOCKER_RUNTIME`,
    );
  }
  if (!(await provider.image(need.baseImage))) {
    throw new ProviderCheckFailed(
      need.baseImageSetting,
      `the base image ${need.baseImage} is not on the engine at ${engine}; build it (npx tsx sandbox-images/base-image.ts, or drydock up), or name an image it has`,
    );
  }
}
