/**
 * bin/bundled.js, how bin/drydock runs the TypeScript sources: one esbuild bundle per entry,
 * built on first use and again when a source it holds changed, each source with its own
 * __dirname, from any working directory. A project of two sources in a temp folder, with
 * esbuild linked in as the project's node_modules has it.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { projectRoot } from '../../platform/config';

const run = promisify(execFile);
let root: string;

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'drydock-bundled-'));
  await mkdir(path.join(root, 'bin'));
  await mkdir(path.join(root, 'src', 'lib'), { recursive: true });
  await mkdir(path.join(root, 'node_modules'));
  await copyFile(path.join(projectRoot, 'bin', 'bundled.js'), path.join(root, 'bin', 'bundled.js'));
  await symlink(path.join(projectRoot, 'node_modules', 'esbuild'), path.join(root, 'node_modules', 'esbuild'));
  await writeFile(
    path.join(root, 'src', 'main.ts'),
    "import { here, word } from './lib/where';\nconsole.log(JSON.stringify({ here, word, args: process.argv.slice(2) }));\n",
  );
  await writeSource('first', 20_000);
});

/** The source's word, modified `ago` ms before now (a time of its own, however coarse the clock). */
async function writeSource(word: string, ago: number): Promise<void> {
  const file = path.join(root, 'src', 'lib', 'where.ts');
  await writeFile(file, `export const here: string = __dirname;\nexport const word = '${word}';\n`);
  const at = new Date(Date.now() - ago);
  await utimes(file, at, at);
}

/** Runs src/main.ts from another working directory; what it printed and the bundle it ran. */
async function start(...args: string[]) {
  const { stdout } = await run(
    process.execPath,
    [path.join(root, 'bin', 'bundled.js'), path.join(root, 'src', 'main.ts'), ...args],
    {
      cwd: tmpdir(),
    },
  );
  const meta = JSON.parse(
    await readFile(path.join(root, 'node_modules', '.cache', 'drydock-bundles', 'src-main.json'), 'utf8'),
  );
  return { printed: JSON.parse(stdout), bundle: meta.bundle as string };
}

test('a source sees its own __dirname and the entry its arguments; the bundle is built once and again after a change', async () => {
  const first = await start('a', 'b');
  expect(first.printed).toEqual({ here: path.join(root, 'src', 'lib'), word: 'first', args: ['a', 'b'] });
  expect((await start()).bundle).toBe(first.bundle);
  await writeSource('other', 10_000);
  const changed = await start();
  expect(changed.printed.word).toBe('other');
  expect(changed.bundle).not.toBe(first.bundle);
}, 60_000);

test("another checkout sharing the project's node_modules (a git worktree's link) runs its own sources, not the kept bundle of the first", async () => {
  await start(); // the first checkout's bundle is kept, its sources unchanged
  const other = await mkdtemp(path.join(tmpdir(), 'drydock-bundled-wt-'));
  await mkdir(path.join(other, 'bin'));
  await mkdir(path.join(other, 'src', 'lib'), { recursive: true });
  await copyFile(path.join(root, 'bin', 'bundled.js'), path.join(other, 'bin', 'bundled.js'));
  await copyFile(path.join(root, 'src', 'main.ts'), path.join(other, 'src', 'main.ts'));
  await writeFile(
    path.join(other, 'src', 'lib', 'where.ts'),
    "export const here = __dirname;\nexport const word = 'mine';\n",
  );
  await symlink(path.join(root, 'node_modules'), path.join(other, 'node_modules'));
  const { stdout } = await run(
    process.execPath,
    [path.join(other, 'bin', 'bundled.js'), path.join(other, 'src', 'main.ts')],
    {
      cwd: tmpdir(),
    },
  );
  expect(JSON.parse(stdout)).toMatchObject({ word: 'mine', here: path.join(other, 'src', 'lib') });
  expect((await start()).printed.word).toBe('other'); // and the first still its own
}, 60_000);

test('a source that asks require.main === module is refused with what to write instead', async () => {
  await writeFile(path.join(root, 'src', 'script.ts'), 'if (require.main === module) console.log("main");\n');
  await expect(
    run(process.execPath, [path.join(root, 'bin', 'bundled.js'), path.join(root, 'src', 'script.ts')], {
      cwd: tmpdir(),
    }),
  ).rejects.toMatchObject({ stderr: expect.stringContaining('write process.argv[1] === __filename') });
}, 60_000);

test('where the project cannot keep its bundle, it is kept in a folder of the user in the temp dir, and still finds the project’s packages', async () => {
  const project = await mkdtemp(path.join(tmpdir(), 'drydock-bundled-ro-'));
  await mkdir(path.join(project, 'bin'));
  await mkdir(path.join(project, 'node_modules'));
  await copyFile(path.join(projectRoot, 'bin', 'bundled.js'), path.join(project, 'bin', 'bundled.js'));
  await symlink(path.join(projectRoot, 'node_modules', 'esbuild'), path.join(project, 'node_modules', 'esbuild'));
  // Where the cache would be, a file: as unwritable as a read-only root (this test runs as root, whom modes do not stop).
  await writeFile(path.join(project, 'node_modules', '.cache'), '');
  await writeFile(path.join(project, 'main.ts'), "import { version } from 'esbuild';\nconsole.log(version);\n");
  const temp = await mkdtemp(path.join(tmpdir(), 'drydock-bundled-tmp-'));
  const { stdout } = await run(
    process.execPath,
    [path.join(project, 'bin', 'bundled.js'), path.join(project, 'main.ts')],
    {
      cwd: tmpdir(),
      env: { ...process.env, TMPDIR: temp },
    },
  );
  expect(stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  const kept = await readFile(path.join(temp, `drydock-bundles-${process.getuid!()}`, 'main.json'), 'utf8');
  expect(JSON.parse(kept).bundle).toMatch(/^main-.*\.js$/);
}, 60_000);
