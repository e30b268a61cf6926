/**
 * A real image registry for tests of pulls: Debian's `docker-registry`
 * (distribution 2.8) on a loopback port, its storage in a temp folder, with
 * images built here pushed into it, and dev container features made here
 * pushed as OCI artifacts (pushFeature). Docker treats registries on 127.0.0.0/8
 * as insecure by default, so the engine pulls from it over plain HTTP with
 * no daemon configuration. A killed run leaves it running: the next run's
 * global setup stops it (test/leftovers.ts).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { FEATURE_LAYER_TYPE } from '../../sandbox/feature-registry';
import { freePort } from './helpers';
import { own, ownProcess } from './leftovers';

const run = promisify(execFile);
const sha256 = (data: Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;
export const REGISTRY_BINARY = '/usr/bin/docker-registry';

export class ImageRegistry {
  private process?: ChildProcess;

  private constructor(
    readonly dir: string,
    /** "127.0.0.1:<port>": the registry part of an image reference. */
    readonly host: string,
  ) {}

  /** Starts a registry on a free loopback port, once it answers. */
  static async start(): Promise<ImageRegistry> {
    if (!existsSync(REGISTRY_BINARY)) {
      throw new Error(`${REGISTRY_BINARY} is missing (infra/test-services.sh installs Debian's docker-registry)`);
    }
    const dir = await mkdtemp(path.join(tmpdir(), 'drydock-registry-'));
    own(dir);
    const registry = new ImageRegistry(dir, `127.0.0.1:${await freePort()}`);
    await registry.serve();
    return registry;
  }

  private async serve(): Promise<void> {
    const config = path.join(this.dir, 'config.yml');
    await writeFile(
      config,
      [
        'version: 0.1',
        'log: { level: warn }',
        `storage: { filesystem: { rootdirectory: ${path.join(this.dir, 'data')} }, delete: { enabled: true } }`,
        `http: { addr: "${this.host}" }`,
        '',
      ].join('\n'),
    );
    this.process = spawn(REGISTRY_BINARY, ['serve', config], { stdio: 'ignore' });
    ownProcess(this.process.pid);
    const deadline = Date.now() + 30_000;
    while (!(await this.answers())) {
      if (this.process.exitCode !== null) throw new Error(`docker-registry exited with ${this.process.exitCode}`);
      if (Date.now() > deadline) throw new Error(`docker-registry did not answer on ${this.host} within 30 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  private async answers(): Promise<boolean> {
    try {
      return (await fetch(`http://${this.host}/v2/`)).ok;
    } catch {
      return false;
    }
  }

  /**
   * Pushes a local image as `<host>/<name>` and removes that local tag again
   * (the engine keeps only what it had). Returns the reference and the
   * manifest's digest the registry stored.
   */
  async push(localImage: string, name: string): Promise<{ ref: string; digest: string }> {
    const ref = `${this.host}/${name}`;
    await run('docker', ['tag', localImage, ref]);
    try {
      const { stdout } = await run('docker', ['push', ref]);
      const digest = /digest: (sha256:[0-9a-f]{64})/.exec(stdout)?.[1];
      if (!digest) throw new Error(`docker push ${ref} printed no digest: ${stdout}`);
      return { ref, digest };
    } finally {
      await run('docker', ['rmi', ref]).catch(() => undefined);
    }
  }

  /**
   * Pushes a dev container feature made here as an OCI artifact, the way
   * `devcontainer features publish` does: its folder as a tar layer of
   * FEATURE_LAYER_TYPE, an empty config, an OCI manifest under `tag`.
   * Returns its reference and the manifest's digest.
   */
  async pushFeature(
    name: string,
    tag: string,
    files: Record<string, { text: string; mode?: number }>,
  ): Promise<{ ref: string; digest: string }> {
    const folder = await mkdtemp(path.join(tmpdir(), 'drydock-feature-'));
    try {
      for (const [file, { text, mode }] of Object.entries(files)) {
        await writeFile(path.join(folder, file), text, { mode: mode ?? 0o644 });
      }
      const { stdout: tar } = await run('tar', ['-c', '--format=posix', '-f', '-', '-C', folder, '.'], {
        encoding: 'buffer',
      });
      const config = Buffer.from('{}');
      const layer = await this.pushBlob(name, tar);
      const manifest = Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          config: { mediaType: 'application/vnd.devcontainers', digest: await this.pushBlob(name, config), size: 2 },
          layers: [{ mediaType: FEATURE_LAYER_TYPE, digest: layer, size: tar.length }],
        }),
      );
      const res = await fetch(`http://${this.host}/v2/${name}/manifests/${tag}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
        body: new Uint8Array(manifest),
      });
      if (res.status !== 201)
        throw new Error(`pushing the manifest of ${name}:${tag}: ${res.status} ${await res.text()}`);
      return { ref: `${this.host}/${name}:${tag}`, digest: sha256(manifest) };
    } finally {
      await rm(folder, { recursive: true, force: true });
    }
  }

  /** A monolithic blob upload (POST, then PUT with the digest); returns the digest. */
  private async pushBlob(name: string, data: Buffer): Promise<string> {
    const digest = sha256(data);
    const started = await fetch(`http://${this.host}/v2/${name}/blobs/uploads/`, { method: 'POST' });
    const location = started.headers.get('location');
    if (started.status !== 202 || !location) throw new Error(`starting an upload to ${name}: ${started.status}`);
    const url = new URL(location, `http://${this.host}`);
    url.searchParams.set('digest', digest);
    const put = await fetch(url, {
      method: 'PUT',
      headers: { 'content-type': 'application/octet-stream' },
      body: new Uint8Array(data),
    });
    if (put.status !== 201) throw new Error(`uploading ${digest} to ${name}: ${put.status} ${await put.text()}`);
    return digest;
  }

  async stop(): Promise<void> {
    this.process?.kill('SIGTERM');
    await rm(this.dir, { recursive: true, force: true });
  }
}
