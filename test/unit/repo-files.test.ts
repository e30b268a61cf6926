/**
 * Files of the repo a service sees (sandbox/repo-files.ts,
 * sandbox/docker/service-storage.ts serviceFiles) and the names that resolve
 * to the loopback (loopbackHosts): read from git objects with every symlink
 * confined to the repo, written on the sandbox's disk without following a
 * link, and every service name in the sandbox's /etc/hosts.
 */
import { execFileSync } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import { sandboxCreateOptions } from '../../sandbox/docker/create-options';
import { serviceFiles } from '../../sandbox/docker/service-storage';
import { SandboxStorageRoot } from '../../sandbox/docker/storage';
import { sandboxPod } from '../../sandbox/kubernetes/pod';
import { loopbackHosts, type SandboxSpec, type ServiceContainerSpec } from '../../sandbox/provider';
import { RepoTree } from '../../sandbox/repo-files';
import { declaredStack } from '../../sandbox/activities/services';
import { parseDevcontainer } from '../../sandbox/repo-image';

let dir: string;
let tree: RepoTree;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-repo-files-'));
  const repo = path.join(dir, 'repo');
  const file = (p: string, text: string) =>
    mkdir(path.dirname(path.join(repo, p)), { recursive: true }).then(() => writeFile(path.join(repo, p), text));
  await file('db/init.sql', 'CREATE TABLE t (id int);\n');
  await file('db/seeds/1.sql', 'INSERT INTO t VALUES (1);\n');
  await file('db/seeds/run.sh', '#!/bin/sh\n');
  execFileSync('chmod', ['+x', path.join(repo, 'db/seeds/run.sh')]);
  await file('config/pg_hba.conf', 'local all all trust\n');
  await symlink('../config/pg_hba.conf', path.join(repo, 'db/hba.conf'));
  await symlink('../../config/pg_hba.conf', path.join(repo, 'db/seeds/hba.conf'));
  await symlink('/etc/passwd', path.join(repo, 'db/passwd'));
  await symlink('../..', path.join(repo, 'db/up'));
  await mkdir(path.join(repo, 'leaky'));
  await symlink('/etc/shadow', path.join(repo, 'leaky/shadow'));
  const git = (...args: string[]) => execFileSync('git', args, { cwd: repo, encoding: 'utf8' }).trim();
  git('init', '-q');
  git('add', '-A');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'files');
  tree = new RepoTree(repo, git('rev-parse', 'HEAD'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('RepoTree: paths of the repo, symlinks resolved within it', () => {
  test('a file, a folder and a symlink to a file of the repo resolve to their objects', async () => {
    expect(await tree.resolve('db/init.sql', 'f')).toMatchObject({ kind: 'file', path: 'db/init.sql', mode: 0o644 });
    expect(await tree.resolve('db/seeds', 'f')).toMatchObject({ kind: 'folder', path: 'db/seeds' });
    expect(await tree.resolve('db/hba.conf', 'f')).toMatchObject({ kind: 'file', path: 'config/pg_hba.conf' });
    expect(await tree.resolve('db/nope.sql', 'f')).toBeUndefined();
    expect(await tree.read('db/hba.conf')).toBe('local all all trust\n');
  });

  test.each([
    ['db/passwd', /f: "db\/passwd" leads outside the repository \(the symlink db\/passwd points to \/etc\/passwd\)/],
    ['db/up/x', /leads outside the repository \(the symlink db\/up points to \.\.\/\.\.\)/],
    ['leaky', /f: the symlink leaky\/shadow does not lead to a file of the repository|leads outside/],
  ])('%s is refused, naming the field', async (p, message) => {
    await expect(tree.resolve(p, 'f')).rejects.toThrow(message);
  });

  test("a folder's content: its files with their modes, a symlink within the repo as its file", async () => {
    const seeds = (await tree.resolve('db/seeds', 'f'))!;
    const content = await tree.tree(seeds.object, 'folder', 'db/seeds');
    if (content.kind !== 'folder') throw new Error('a folder');
    expect(Object.keys(content.entries).sort()).toEqual(['1.sql', 'hba.conf', 'run.sh']);
    expect(content.entries['run.sh']).toMatchObject({ kind: 'file', mode: 0o755 });
    expect(content.entries['hba.conf']).toMatchObject({ data: Buffer.from('local all all trust\n') });
  });
});

describe('serviceFiles: the copies a service binds read-only', () => {
  test("are written below the sandbox's services folder; a link planted there is replaced, never followed", async () => {
    const storage = new SandboxStorageRoot({} as Docker, path.join(dir, 'storage'));
    const victim = path.join(dir, 'victim');
    await mkdir(victim);
    const base = path.join(storage.root, 'sandboxes/sbx/fs/services/db/files');
    await mkdir(base, { recursive: true });
    await symlink(victim, path.join(base, '0'));
    const init = (await tree.resolve('db/init.sql', 'f'))!;
    const seeds = (await tree.resolve('db/seeds', 'f'))!;
    const copies = await serviceFiles(storage, 'sbx', 'db', [
      { target: '/docker-entrypoint-initdb.d/init.sql', tree: await tree.tree(init.object, 'file', 'db/init.sql') },
      { target: '/seeds', tree: await tree.tree(seeds.object, 'folder', 'db/seeds') },
      { target: '/run/secrets/pw', tree: { kind: 'file', mode: 0o444, data: Buffer.from('pw') } },
    ]);
    expect(copies).toEqual([
      { source: path.join(base, '0/file'), target: '/docker-entrypoint-initdb.d/init.sql' },
      { source: path.join(base, '1/folder'), target: '/seeds' },
      { source: path.join(base, '2/file'), target: '/run/secrets/pw' },
    ]);
    expect(await readFile(copies[0].source, 'utf8')).toBe('CREATE TABLE t (id int);\n');
    expect((await stat(path.join(copies[1].source, 'run.sh'))).mode & 0o777).toBe(0o755);
    expect((await stat(copies[2].source)).mode & 0o777).toBe(0o444);
    expect((await lstat(path.join(base, '0'))).isDirectory()).toBe(true);
    await expect(readlink(path.join(base, '0'))).rejects.toThrow();
    expect(execFileSync('ls', ['-A', victim], { encoding: 'utf8' })).toBe('');
  });
});

describe('service names on the loopback', () => {
  const service = (name: string, hostNames?: string[]) =>
    ({ service: name, ...(hostNames ? { hostNames } : {}) }) as ServiceContainerSpec;
  const spec = {
    name: 'drydock-s',
    image: 'drydock-base:x',
    labels: {},
    cpus: 1,
    memoryBytes: 1024 ** 3,
    pids: 100,
    tmpBytes: 1024 ** 2,
    diskBytes: 1024 ** 3,
    egressDir: '/data/egress/abc',
    hostNames: ['app', 'web'],
    services: [service('db', ['postgres', 'shop-db']), service('cache')],
  } satisfies SandboxSpec;
  const dirs = { lower: '/l', upper: '/u', work: '/w' };

  test("every service's name and aliases, and the sandbox's own, are 127.0.0.1 in its /etc/hosts", () => {
    const host = sandboxCreateOptions(spec, { workspace: dirs, home: dirs }).HostConfig!;
    expect(host.ExtraHosts).toEqual([
      'app:127.0.0.1',
      'web:127.0.0.1',
      'db:127.0.0.1',
      'postgres:127.0.0.1',
      'shop-db:127.0.0.1',
      'cache:127.0.0.1',
    ]);
    // A companion shares the sandbox's /etc/hosts (Docker refuses extra hosts with container: networking).
    const companion = sandboxCreateOptions({ ...spec, companionOf: 'drydock-s' }, { workspace: dirs, home: dirs });
    expect(companion.HostConfig!.ExtraHosts).toBeUndefined();
    expect(() => loopbackHosts({ hostNames: ['a b'] })).toThrow(/"a b" is not a host name/);
  });

  test("on Kubernetes they are the pod's hostAliases", () => {
    const pod = sandboxPod({ ...spec, services: [], hostNames: ['app', 'db'] }, {
      node: 'n',
      namespace: 'ns',
      imagePullPolicy: 'Never',
    } as Parameters<typeof sandboxPod>[1]);
    expect(pod.spec!.hostAliases).toEqual([{ ip: '127.0.0.1', hostnames: ['app', 'db'] }]);
  });
});

test('a folder a compose service mounts that the repo does not hold is an empty data folder, as Docker makes it', async () => {
  const files: Record<string, string> = {
    '.devcontainer/devcontainer.json': JSON.stringify({ dockerComposeFile: '../compose.yaml', service: 'app' }),
    'compose.yaml':
      'services:\n  app:\n    image: x\n  db:\n    image: x\n    volumes: ["./db/init.sql:/docker-entrypoint-initdb.d/init.sql", "./data/db:/var/lib/postgresql/data"]\n',
  };
  const env = parseDevcontainer(files['.devcontainer/devcontainer.json'], '.devcontainer/devcontainer.json');
  const { stack, notes } = await declaredStack((f) => Promise.resolve(files[f]), env, undefined, tree);
  expect(stack.services[0]).toMatchObject({
    data: ['/var/lib/postgresql/data'],
    files: [{ target: '/docker-entrypoint-initdb.d/init.sql', source: 'db/init.sql', kind: 'file' }],
  });
  expect(notes).toContain(
    "compose.yaml services.db /var/lib/postgresql/data: data/db is not in the repository: an empty folder of the service's data, as Docker makes it",
  );
});
