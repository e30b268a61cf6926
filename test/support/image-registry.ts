/**
 * A real image registry for tests of pulls: Debian's `docker-registry`
 * (distribution 2.8) on a loopback port, its storage in a temp folder, with
 * images built here pushed into it. Docker treats registries on 127.0.0.0/8
 * as insecure by default, so the engine pulls from it over plain HTTP with
 * no daemon configuration. A killed run leaves it running: the next run's
 * global setup stops it (test/leftovers.ts).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './helpers';
import { own, ownProcess } from './leftovers';

const run = promisify(execFile);
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

  async stop(): Promise<void> {
    this.process?.kill('SIGTERM');
    await rm(this.dir, { recursive: true, force: true });
  }
}
