/**
 * A second Docker host for the multi-host tests: another engine on this
 * machine (infra/docker-host.sh: its own socket, data root, exec root and
 * containerd), with the run's base image copied over from the first engine
 * (`docker save | docker load`), as a real host would have it built.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { LABELS } from '../../sandbox/provider';
import { docker, projectRoot } from './helpers';

export interface DockerHost {
  /** Its DOCKER_HOST, for a worker process's environment. */
  dockerHost: string;
  docker: Docker;
}

const engines = new Map<string, Promise<DockerHost>>();

/** The second engine, started (or found running) once per test file, with the base image. */
export function secondDockerHost(): Promise<DockerHost> {
  return dockerHost('test-b', process.env.DRYDOCK_BASE_IMAGE!);
}

/** infra/docker-host.sh's engine `name` (started, or found running), with `image` copied from this machine's. */
export function dockerHost(name: string, image: string): Promise<DockerHost> {
  if (!engines.has(name)) {
    const started = (async () => {
      const { stdout } = await promisify(execFile)('bash', [path.join(projectRoot, 'infra', 'docker-host.sh'), name]);
      const dockerHost = stdout.trim();
      const engine = new Docker({ socketPath: dockerHost.replace(/^unix:\/\//, '') });
      await copyImage(image, docker, engine);
      return { dockerHost, docker: engine };
    })();
    // A start that failed is tried again by the next test, not handed to it.
    started.catch(() => engines.delete(name));
    engines.set(name, started);
  }
  return engines.get(name)!;
}

/** Streams an image from one engine into another, unless it is there already. */
export async function copyImage(image: string, from: Docker, to: Docker): Promise<void> {
  if (
    await to
      .getImage(image)
      .inspect()
      .catch(() => undefined)
  )
    return;
  const loading = await to.loadImage(await from.getImage(image).get());
  await new Promise((resolve, reject) => to.modem.followProgress(loading, (err) => (err ? reject(err) : resolve(0))));
}

/** Containers (any state) of a session on one engine. */
export function containersOn(engine: Docker, sessionId: string): Promise<Docker.ContainerInfo[]> {
  return engine.listContainers({ all: true, filters: { label: [`${LABELS.session}=${sessionId}`] } });
}
