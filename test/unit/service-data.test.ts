/**
 * A service's data put back from a checkpoint's copy (sandbox/docker/service-data.ts),
 * with real tar on a real folder: an overlay's whiteout (a 0/0 device) and opaque folder
 * (a trusted xattr) come back as they were, a folder of the same service made earlier
 * is replaced whole, and a copy over other lower layers is not used. A copy
 * from a row drydock did not write cannot plant setuid files or devices: the
 * bits are cleared (owners kept), a device other than a whiteout is refused.
 * A pid file the copy holds (PostgreSQL's postmaster.pid) does not come back.
 */
import { execFileSync } from 'node:child_process';
import { chmod, chown, lstat, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import { lowersOf, restoreServiceData } from '../../sandbox/docker/service-data';
import { SandboxStorageRoot } from '../../sandbox/docker/storage';

const folders = [
  { path: '/var/lib/postgresql/data', from: { image: 'drydock-data-x:db', path: '/drydock-data/0/data' } },
];
let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'drydock-service-data-'));
});
afterEach(() => rm(root, { recursive: true, force: true }));

/** A copy as saveServiceData makes it: `0/upper` with a file, a whiteout and an opaque folder, gzipped. */
async function copyOf(plant: (upper: string) => Promise<void> = async () => undefined): Promise<Buffer> {
  const from = path.join(root, 'from');
  await mkdir(path.join(from, '0', 'upper', 'base', 'opaque'), { recursive: true });
  await writeFile(path.join(from, '0', 'upper', 'base', '16384'), 'row written');
  execFileSync('mknod', [path.join(from, '0', 'upper', 'base', 'deleted'), 'c', '0', '0']);
  // Python's os.setxattr: no attr package needed.
  const opaque = path.join(from, '0', 'upper', 'base', 'opaque');
  execFileSync('python3', ['-c', 'import os,sys; os.setxattr(sys.argv[1], "trusted.overlay.opaque", b"y")', opaque]);
  await plant(path.join(from, '0', 'upper'));
  return execFileSync('tar', [
    '-c',
    '-z',
    '--xattrs',
    '--xattrs-include=trusted.overlay.*',
    '--numeric-owner',
    '-C',
    from,
    '0/upper',
  ]);
}

test('a copy comes back as the upper layer, whiteouts and opaque folders kept; a stale folder is replaced', async () => {
  const tar = await copyOf();
  const storage = new SandboxStorageRoot({} as Docker, path.join(root, 'storage'));
  const services = path.join(root, 'storage', 'sandboxes', 'drydock-s-r1', 'fs', 'services');
  await mkdir(path.join(services, 'db', '0', 'upper'), { recursive: true });
  await writeFile(path.join(services, 'db', '0', 'upper', 'stale'), 'from an earlier try');
  const spec = { sandbox: 'drydock-s-r1', service: 'db', folders };
  expect(await restoreServiceData(storage, spec, { lowers: lowersOf(folders), tar })).toBe(true);
  const upper = path.join(services, 'db', '0', 'upper');
  expect(await readFile(path.join(upper, 'base', '16384'), 'utf8')).toBe('row written');
  const whiteout = await lstat(path.join(upper, 'base', 'deleted'));
  expect([whiteout.isCharacterDevice(), whiteout.rdev]).toEqual([true, 0]);
  const opaque = execFileSync('python3', [
    '-c',
    'import os,sys; print(os.getxattr(sys.argv[1], "trusted.overlay.opaque").decode(), end="")',
    path.join(upper, 'base', 'opaque'),
  ]);
  expect(opaque.toString()).toBe('y');
  await expect(lstat(path.join(upper, 'stale'))).rejects.toThrow(/ENOENT/);
});

test('a copy over other lower layers (another snapshot) is not used', async () => {
  const tar = await copyOf();
  const storage = new SandboxStorageRoot({} as Docker, path.join(root, 'storage'));
  await mkdir(path.join(root, 'storage', 'sandboxes', 'drydock-s-r1', 'fs'), { recursive: true });
  const other = [{ ...folders[0], from: { ...folders[0].from, image: 'drydock-data-y:db' } }];
  const spec = { sandbox: 'drydock-s-r1', service: 'db', folders };
  expect(await restoreServiceData(storage, spec, { lowers: lowersOf(other), tar })).toBe(false);
  await expect(lstat(path.join(root, 'storage', 'sandboxes', 'drydock-s-r1', 'fs', 'services'))).rejects.toThrow(
    /ENOENT/,
  );
});

const upperOf = (sandbox: string) =>
  path.join(root, 'storage', 'sandboxes', sandbox, 'fs', 'services', 'db', '0', 'upper');

test("a process's pid files do not come back (postmaster.pid names a process of the lost container); the rest does", async () => {
  const tar = await copyOf(async (upper) => {
    // As a paused or killed PostgreSQL leaves it: its PID, the data folder, its start time, its port.
    await writeFile(path.join(upper, 'postmaster.pid'), '7\n/var/lib/postgresql/data\n1764897600\n5432\n');
    await chown(path.join(upper, 'postmaster.pid'), 999, 999);
    await mkdir(path.join(upper, 'run'));
    await writeFile(path.join(upper, 'run', 'mysqld.pid'), '12\n');
    await writeFile(path.join(upper, 'postmaster.opts'), 'postgres -c listen_addresses=*\n');
    execFileSync('mknod', [path.join(upper, 'run', 'old.pid'), 'c', '0', '0']);
  });
  const storage = new SandboxStorageRoot({} as Docker, path.join(root, 'storage'));
  await mkdir(path.join(root, 'storage', 'sandboxes', 'drydock-s-r4', 'fs'), { recursive: true });
  const spec = { sandbox: 'drydock-s-r4', service: 'db', folders };
  expect(await restoreServiceData(storage, spec, { lowers: lowersOf(folders), tar })).toBe(true);
  const upper = upperOf('drydock-s-r4');
  await expect(lstat(path.join(upper, 'postmaster.pid'))).rejects.toThrow(/ENOENT/);
  await expect(lstat(path.join(upper, 'run', 'mysqld.pid'))).rejects.toThrow(/ENOENT/);
  // A whiteout named so stays one (it hides the lower's file), and every other file comes back.
  expect((await lstat(path.join(upper, 'run', 'old.pid'))).isCharacterDevice()).toBe(true);
  expect(await readFile(path.join(upper, 'postmaster.opts'), 'utf8')).toBe('postgres -c listen_addresses=*\n');
  expect(await readFile(path.join(upper, 'base', '16384'), 'utf8')).toBe('row written');
});

test("setuid and setgid bits are cleared; owners and the other bits are kept (a service's files are its uid's)", async () => {
  const tar = await copyOf(async (upper) => {
    await writeFile(path.join(upper, 'rootshell'), '#!/bin/sh\n');
    await chmod(path.join(upper, 'rootshell'), 0o4755);
    await mkdir(path.join(upper, 'shared'));
    await chmod(path.join(upper, 'shared'), 0o2770);
    await writeFile(path.join(upper, 'shared', 'pg_control'), 'x');
    await chown(path.join(upper, 'shared', 'pg_control'), 999, 999);
    await chmod(path.join(upper, 'shared', 'pg_control'), 0o6600);
  });
  const storage = new SandboxStorageRoot({} as Docker, path.join(root, 'storage'));
  await mkdir(path.join(root, 'storage', 'sandboxes', 'drydock-s-r2', 'fs'), { recursive: true });
  const spec = { sandbox: 'drydock-s-r2', service: 'db', folders };
  expect(await restoreServiceData(storage, spec, { lowers: lowersOf(folders), tar })).toBe(true);
  const upper = upperOf('drydock-s-r2');
  const mode = async (p: string) => (await lstat(path.join(upper, p))).mode & 0o7777;
  expect(await mode('rootshell')).toBe(0o755);
  expect(await mode('shared')).toBe(0o770);
  expect(await mode('shared/pg_control')).toBe(0o600);
  const owner = await lstat(path.join(upper, 'shared', 'pg_control'));
  expect([owner.uid, owner.gid]).toEqual([999, 999]);
  // The whiteout is kept.
  expect((await lstat(path.join(upper, 'base', 'deleted'))).isCharacterDevice()).toBe(true);
});

test.each([
  ['a character device other than a whiteout (/dev/null)', ['c', '1', '3']],
  ['a block device', ['b', '7', '0']],
])('a copy holding %s is refused, naming it, and nothing of it is left', async (_, device) => {
  const tar = await copyOf(async (upper) => void execFileSync('mknod', [path.join(upper, 'base', 'dev'), ...device]));
  const storage = new SandboxStorageRoot({} as Docker, path.join(root, 'storage'));
  await mkdir(path.join(root, 'storage', 'sandboxes', 'drydock-s-r3', 'fs'), { recursive: true });
  const spec = { sandbox: 'drydock-s-r3', service: 'db', folders };
  await expect(restoreServiceData(storage, spec, { lowers: lowersOf(folders), tar })).rejects.toThrow(
    "restoring service db's data: 0/upper/base/dev is a device and no overlay whiteout (a character device 0/0): refused",
  );
  await expect(lstat(path.join(upperOf('drydock-s-r3'), '..'))).rejects.toThrow(/ENOENT/);
});
