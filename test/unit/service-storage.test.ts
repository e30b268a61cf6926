/**
 * A service's folders on the sandbox's disk (sandbox/docker/service-storage.ts):
 * the root worker makes them only below the sandbox's services folder, never
 * through a symlink, whatever a service is called (docs/security.md, T4-M5).
 */
import { chmod, lstat, mkdir, mkdtemp, readdir, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import { ComposeError, parseCompose } from '../../sandbox/compose';
import { confinedDir, serviceOverlay } from '../../sandbox/docker/service-storage';
import { SandboxStorageRoot } from '../../sandbox/docker/storage';

let root: string;
let storage: SandboxStorageRoot;
let victim: string;
let lower: string;

beforeEach(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'drydock-svc-storage-'));
  storage = new SandboxStorageRoot({} as Docker, path.join(root, 'storage'));
  victim = path.join(root, 'victim');
  lower = path.join(root, 'lower');
  await mkdir(victim);
  await mkdir(lower);
  // What a repo can leave on the sandbox's disk: a symlink committed in it, in the workspace's upper layer.
  const upper = path.join(storage.root, 'sandboxes', 'sbx', 'fs', 'workspace', 'upper');
  await mkdir(upper, { recursive: true });
  await symlink(victim, path.join(upper, 'evil'));
});
afterEach(() => rm(root, { recursive: true, force: true }));

describe("a service's overlay folders (T4-M5)", () => {
  test("are made under the sandbox's services folder for a service named as the schema says", async () => {
    const dirs = await serviceOverlay(storage, 'sbx', 'db/0', lower);
    expect(dirs.upper).toBe(path.join(storage.root, 'sandboxes/sbx/fs/services/db/0/upper'));
    expect((await lstat(dirs.work)).isDirectory()).toBe(true);
  });

  test('a name climbing out of the services folder onto a symlink of the repo makes nothing outside', async () => {
    await expect(serviceOverlay(storage, 'sbx', '../workspace/upper/evil/0', lower)).rejects.toThrow(
      /is not <service name>\/<number>/,
    );
    await expect(serviceOverlay(storage, 'sbx', '../workspace/upper/evil', lower)).rejects.toThrow();
    expect(await readdir(victim)).toEqual([]);
  });

  test("an upper layer put back from a checkpoint keeps its mode, not the lower root's (chaos: PostgreSQL's 'invalid permissions')", async () => {
    await chmod(lower, 0o1777);
    const fresh = await serviceOverlay(storage, 'sbx', 'db/0', lower);
    expect((await stat(fresh.upper)).mode & 0o7777).toBe(0o1777);
    const restored = path.join(storage.root, 'sandboxes/sbx/fs/services/db/1/upper');
    await mkdir(restored, { recursive: true, mode: 0o700 });
    await chmod(restored, 0o700);
    const dirs = await serviceOverlay(storage, 'sbx', 'db/1', lower);
    expect((await stat(dirs.upper)).mode & 0o7777).toBe(0o700);
  });

  test('an existing symlink on the way is refused, never followed', async () => {
    const services = path.join(storage.root, 'sandboxes/sbx/fs/services');
    await mkdir(path.join(services, 'db'), { recursive: true });
    await symlink(victim, path.join(services, 'db', '0'));
    await expect(serviceOverlay(storage, 'sbx', 'db/0', lower)).rejects.toThrow(/never followed/);
    await expect(confinedDir(services, ['..', 'x'])).rejects.toThrow(/not a folder's name/);
    expect(await readdir(victim)).toEqual([]);
  });
});

test("a compose service's name is checked as .drydock/config.yaml's are, naming the field", () => {
  const text = [
    'services:',
    '  app: { image: drydock-sandbox-base }',
    "  '../workspace/upper/evil': { image: drydock-service-postgres:17 }",
  ].join('\n');
  let problems: string[] = [];
  try {
    parseCompose(text, 'compose.yaml', { devService: 'app' });
  } catch (err) {
    if (!(err instanceof ComposeError)) throw err;
    problems = err.problems;
  }
  expect(problems).toEqual([
    expect.stringMatching(/^compose\.yaml: services\.\.\.\/workspace\/upper\/evil: a service's name: lowercase/),
  ]);
});
