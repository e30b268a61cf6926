/**
 * The copy-on-write workspace (sandbox/docker/storage.ts) with real Docker: a
 * sandbox starts from its image's /workspace without a copy, its writes show
 * in `git diff`, reach neither the image's lower layer nor another sandbox,
 * vanish with it (storage included, also when the reaper finds it), and its
 * disk limit holds (also on a spare disk formatted ahead).
 */
import { sandboxOf } from '../../sandbox/handle';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DockerProvider } from '../../sandbox/docker/provider';
import { sandboxFault } from '../../sandbox/faults';
import { type SandboxSpec } from '../../sandbox/provider';
import { docker, testConfig } from '../support/helpers';

const sandboxes = new DockerProvider(undefined, path.join(process.env.DRYDOCK_TEST_DIR!, 'cow-storage'));
const prefix = `drydock-cow-${process.pid}`;
const image = `${prefix}:snapshot`;
let egressDir: string;

function spec(name: string, overrides: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    name,
    image,
    labels: {},
    cpus: 1,
    memoryBytes: 256 * 1024 ** 2,
    pids: 64,
    tmpBytes: 16 * 1024 ** 2,
    diskBytes: 256 * 1024 ** 2,
    egressDir,
    ...overrides,
  };
}

const sh = (name: string, script: string) => sandboxes.exec(name, ['sh', '-c', script]);
const out = async (name: string, script: string) => (await sh(name, script)).stdout.toString();

/** The host paths behind a sandbox's /workspace overlay, from its volume's options. */
async function overlayOf(name: string): Promise<{ volume: string; lower: string; upper: string }> {
  const mount = (await docker.getContainer(name).inspect()).Mounts.find((m) => m.Destination === '/workspace')!;
  const options = (await docker.getVolume(mount.Name!).inspect()).Options!.o;
  const field = (key: string) => new RegExp(`${key}=([^,]+)`).exec(options)![1];
  return { volume: mount.Name!, lower: field('lowerdir'), upper: field('upperdir') };
}

beforeAll(async () => {
  egressDir = await mkdtemp(path.join(tmpdir(), 'drydock-cow-egress-'));
  // A snapshot image the way drydock makes one: a sandbox's /workspace committed onto the base image.
  const base = testConfig().DRYDOCK_BASE_IMAGE!;
  await sandboxes.create(spec(`${prefix}-build`, { image: base }));
  await sandboxOf(sandboxes, `${prefix}-build`).commands.run([
    'sh',
    '-c',
    'git init -q && echo one > a.txt && mkdir d && echo two > d/b.txt && git add . && ' +
      'git -c user.name=t -c user.email=t@t commit -qm init',
  ]);
  await sandboxes.imageFromWorkspace(`${prefix}-build`, { baseImage: base, tag: image, labels: {} });
  await sandboxes.destroy(`${prefix}-build`);
});

afterAll(async () => {
  for (const n of ['a', 'b', 'c', 'full', 'crashed']) await sandboxes.destroy(`${prefix}-${n}`);
  const imageId = (await sandboxes.image(image))!.id;
  expect(await sandboxes.removeImage(image)).toBe('removed');
  // The image's lower layers went with it.
  const lowers = await docker.listVolumes({ filters: { label: [`drydock.lower=${imageId}`] } });
  expect(lowers.Volumes ?? []).toEqual([]);
  await rm(egressDir, { recursive: true, force: true });
});

test("a sandbox's writes show in its diff and reach neither the snapshot nor another sandbox", async () => {
  const [a, b] = [`${prefix}-a`, `${prefix}-b`];
  await sandboxes.create(spec(a));
  await sandboxes.create(spec(b));
  // The workspace and home are the sandbox user's, and the snapshot's files are there.
  expect(await out(a, 'stat -c "%u %a" /workspace $HOME; cat a.txt d/b.txt')).toBe('1000 755\n1000 700\none\ntwo\n');

  await sh(a, 'echo changed > a.txt && echo new > c.txt && rm d/b.txt && git add -A');
  expect(await out(a, 'git diff --cached --name-status')).toBe('M\ta.txt\nA\tc.txt\nD\td/b.txt\n');
  expect(await out(b, 'cat a.txt d/b.txt; ls c.txt 2>&1 || true')).toMatch(/^one\ntwo\nls: .*c\.txt.*No such file/);
  expect(await out(b, 'git status --porcelain')).toBe('');

  // The lower layer on the host is untouched, shared, and out of a sandbox's reach.
  const [overlayA, overlayB] = [await overlayOf(a), await overlayOf(b)];
  expect(overlayA.lower).toBe(overlayB.lower);
  expect(overlayA.upper).not.toBe(overlayB.upper);
  const hostLower = (await stat(path.join(overlayA.lower, 'a.txt'))).size;
  expect(hostLower).toBe('one\n'.length);
  const reach = await sh(a, `ls ${overlayA.lower} ${overlayB.upper}; echo x > ${overlayA.lower}/a.txt`);
  expect(reach.exitCode).not.toBe(0);
  expect((await stat(path.join(overlayA.lower, 'a.txt'))).size).toBe(hostLower);

  // A new sandbox of the snapshot starts clean.
  await sandboxes.create(spec(`${prefix}-c`));
  expect(await out(`${prefix}-c`, 'git status --porcelain; cat a.txt')).toBe('one\n');
});

test('teardown removes the writes, the overlay volumes and the upper filesystem; the reaper does it after a crash', async () => {
  const name = `${prefix}-crashed`;
  await sandboxes.create(spec(name));
  await sh(name, 'echo kept-nowhere > a.txt');
  const overlay = await overlayOf(name);
  await expect(stat(overlay.upper)).resolves.toBeDefined();

  // A crash: the container goes without drydock's teardown; its storage stays behind.
  await docker.getContainer(name).remove({ force: true, v: true });
  await expect(stat(overlay.upper)).resolves.toBeDefined();
  expect(await sandboxes.reapStorage(0)).toContain(name);
  await expect(stat(path.dirname(path.dirname(path.dirname(overlay.upper))))).rejects.toThrow(/ENOENT/);
  await expect(docker.getVolume(overlay.volume).inspect()).rejects.toThrow(/no such volume/i);

  // The ordinary teardown of a sandbox does the same at once.
  await sandboxes.create(spec(name));
  const again = await overlayOf(name);
  expect(await out(name, 'cat a.txt')).toBe('one\n'); // the crashed sandbox's write is gone
  expect(await sandboxes.destroy(name)).toBe(true);
  await expect(stat(path.dirname(path.dirname(path.dirname(again.upper))))).rejects.toThrow(/ENOENT/);
  await expect(docker.getVolume(again.volume).inspect()).rejects.toThrow(/no such volume/i);
  const mounts = await import('node:fs/promises').then((fs) => fs.readFile('/proc/self/mountinfo', 'utf8'));
  expect(mounts).not.toContain(name);
});

/** The spare disk of 256 MiB formatted in the background after an earlier create (storage.ts, makeSpare): its inode. */
async function spareDisk(): Promise<number> {
  const dir = path.join(sandboxes.storage.root, 'spare');
  for (let i = 0; i < 600; i++) {
    const spare = (await readdir(dir).catch(() => [] as string[])).find((n) => n.startsWith(`${256 * 1024 ** 2}-`));
    if (spare) return (await stat(path.join(dir, spare))).ino;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('no spare disk was made');
}

test('the disk limit holds: writing 1.5 GiB into a 256 MiB sandbox fails as disk_full, the host file stays small', async () => {
  const name = `${prefix}-full`;
  // The sandbox gets the spare disk formatted after the earlier ones were made, and its limit holds as well.
  const spare = await spareDisk();
  await sandboxes.create(spec(name));
  const overlay = await overlayOf(name);
  expect((await stat(path.join(path.dirname(path.dirname(path.dirname(overlay.upper))), 'disk.img'))).ino).toBe(spare);
  const result = await sh(
    name,
    'dd if=/dev/zero of=/workspace/big bs=1M count=1536 2>&1; s=$?; df -k /workspace; exit $s',
  );
  const output = result.stdout.toString();
  expect(result.exitCode).not.toBe(0);
  expect(output).toMatch(/No space left on device/);
  const none = { oomKills: 0, pidsMax: 0 };
  expect(sandboxFault({ exitCode: result.exitCode, output, before: none, after: none })).toBe('disk_full');
  // The home folder shares the limit.
  expect((await sh(name, 'head -c 4194304 /dev/zero > $HOME/more')).exitCode).not.toBe(0);
  // What the host gave: the sparse file's blocks, never more than the limit.
  const disk = path.join(path.dirname(path.dirname(path.dirname(overlay.upper))), 'disk.img');
  expect((await stat(disk)).blocks * 512).toBeLessThanOrEqual(256 * 1024 ** 2);
  // Space comes back when the sandbox deletes its files.
  expect((await sh(name, 'rm /workspace/big && head -c 4194304 /dev/zero > $HOME/more')).exitCode).toBe(0);
});
