/** Looking into sandboxes from the outside, and sandboxes made without a session. */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { DockerProvider } from '../../sandbox/docker/provider';
import { type SandboxSpec } from '../../sandbox/provider';
import { docker, testConfig } from './helpers';

/** Runs a shell script in a live sandbox as the sandbox user (or root, to look everywhere); stdout and stderr. */
export async function inSandbox(container: string, script: string, user = '1000:1000'): Promise<string> {
  const exec = await docker.getContainer(container).exec({
    Cmd: ['sh', '-c', script],
    User: user,
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = await exec.start({});
  const chunks: Buffer[] = [];
  const sink = new PassThrough().on('data', (c: Buffer) => chunks.push(c));
  docker.modem.demuxStream(stream, sink, sink);
  await new Promise((resolve) => stream.on('end', resolve));
  return Buffer.concat(chunks).toString();
}

/** A small sandbox of the base image made straight through sandbox/docker/provider.ts, outside any session. */
export async function createSandbox(
  name: string,
  spec: Partial<Pick<SandboxSpec, 'labels' | 'runtime'>> = {},
): Promise<{ id: string; created: boolean }> {
  return new DockerProvider().create({
    name,
    image: testConfig().DRYDOCK_BASE_IMAGE!,
    labels: {},
    cpus: 0.5,
    memoryBytes: 128 * 1024 ** 2,
    pids: 64,
    tmpBytes: 16 * 1024 ** 2,
    diskBytes: 1024 ** 3,
    egressDir: await mkdtemp(path.join(tmpdir(), 'drydock-egress-')),
    ...spec,
  });
}
