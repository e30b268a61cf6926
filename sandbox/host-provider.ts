/**
 * Which sandbox provider this host uses: the one place outside sandbox/docker/
 * that names the Docker engine. A second provider is chosen here.
 */
import path from 'node:path';
import { DockerProvider } from './docker/provider';
import type { SandboxProvider } from './provider';

/**
 * The provider of the Docker engine DOCKER_HOST names (default: the local
 * socket), its sandboxes' storage under `<dataDir>/sandboxes`.
 */
export function hostProvider(dataDir: string): SandboxProvider {
  return new DockerProvider(undefined, path.join(dataDir, 'sandboxes'));
}
