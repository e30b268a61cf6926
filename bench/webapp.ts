/**
 * The benchmark repo: a TypeScript web app with real npm dependencies (a web
 * framework, a test runner, TypeScript, a bundler), as a bare git repo, plus
 * the tarballs of every dependency its lockfile names for linux-x64, for the
 * loopback registry stand-in (test/support/npm-registry.ts). Generating it asks the
 * npm registry (with the host's normal npm config) for the lockfile and the
 * tarballs, once; later runs reuse `<dir>`. Sandboxes never reach the registry:
 * their setup installs from the stand-in through the egress proxy.
 *
 *   tsx bench/webapp.ts <dir>     (default dir: data/bench/webapp)
 */
import { execFile } from 'node:child_process';
import { access, mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const DEFAULT_BENCH_DIR = path.join(__dirname, '..', 'data', 'bench', 'webapp');

const PACKAGE = {
  name: 'bench-webapp',
  version: '1.0.0',
  private: true,
  type: 'module',
  scripts: {
    build: 'tsc --noEmit && esbuild src/server.ts --bundle --platform=node --format=esm --outfile=dist/server.js',
    test: 'vitest run',
    start: 'node dist/server.js',
  },
  dependencies: { express: '^4.21.0' },
  devDependencies: { '@types/express': '^4.17.21', esbuild: '^0.24.0', typescript: '^5.6.0', vitest: '^2.1.0' },
};

const FILES: Record<string, string> = {
  '.gitignore': 'node_modules/\ndist/\n',
  'tsconfig.json': JSON.stringify(
    {
      compilerOptions: {
        target: 'ES2022',
        module: 'ESNext',
        moduleResolution: 'Bundler',
        strict: true,
        esModuleInterop: true,
        skipLibCheck: true,
        types: ['node'],
      },
      include: ['src', 'test'],
    },
    null,
    2,
  ),
  'src/app.ts': `import express from 'express';

export function createApp() {
  const app = express();
  app.get('/', (_req, res) => res.send('<h1>Hello bench</h1>'));
  app.get('/api/items', (_req, res) => res.json(items()));
  return app;
}

export function items(): { id: number; name: string }[] {
  return [1, 2, 3].map((id) => ({ id, name: \`item \${id}\` }));
}
`,
  'src/server.ts': `import { createApp } from './app';

createApp().listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
`,
  'test/app.test.ts': `import { describe, expect, it } from 'vitest';
import { items } from '../src/app';

describe('items', () => {
  it('lists three', () => expect(items()).toHaveLength(3));
});
`,
};

interface LockEntry {
  version?: string;
  resolved?: string;
  os?: string[];
  cpu?: string[];
  link?: boolean;
  name?: string;
}

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

/** Whether npm on linux-x64 installs this entry (optional platform packages of other systems are skipped). */
function forThisPlatform(e: LockEntry): boolean {
  const allows = (list: string[] | undefined, value: string) =>
    !list || list.includes(value) || (list.every((v) => v.startsWith('!')) && !list.includes(`!${value}`));
  return allows(e.os, 'linux') && allows(e.cpu, 'x64');
}

/** Generates (once) the bench repo and its tarballs; returns where they are. */
export async function ensureBenchRepo(
  dir = DEFAULT_BENCH_DIR,
  progress: (line: string) => void = (l) => process.stderr.write(`==> ${l}\n`),
): Promise<{ bare: string; url: string; tarballs: string; work: string }> {
  const bare = path.join(dir, 'remote.git');
  const work = path.join(dir, 'work');
  const tarballs = path.join(dir, 'tarballs');
  const result = { bare, url: `file://${bare}`, tarballs, work };
  if (await exists(path.join(dir, 'complete'))) return result;
  await rm(dir, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  await mkdir(tarballs, { recursive: true });
  progress(`generating the benchmark web app in ${work}`);
  await writeFile(path.join(work, 'package.json'), `${JSON.stringify(PACKAGE, null, 2)}\n`);
  for (const [file, content] of Object.entries(FILES)) {
    await mkdir(path.dirname(path.join(work, file)), { recursive: true });
    await writeFile(path.join(work, file), content);
  }
  progress('resolving its dependencies with the npm registry (npm install --package-lock-only)');
  await run('npm', ['install', '--package-lock-only', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: work });
  const lock = JSON.parse(await readFile(path.join(work, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockEntry>;
  };
  const specs = Object.entries(lock.packages)
    .filter(([key, e]) => key !== '' && !e.link && e.version && forThisPlatform(e))
    .map(
      ([key, e]) => `${e.name ?? key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length)}@${e.version}`,
    );
  const unique = [...new Set(specs)];
  progress(`fetching ${unique.length} package tarballs (npm pack) for the loopback registry stand-in`);
  for (let i = 0; i < unique.length; i += 50) {
    await run('npm', ['pack', '--silent', '--pack-destination', tarballs, ...unique.slice(i, i + 50)], {
      cwd: work,
      maxBuffer: 64 * 1024 ** 2,
    });
  }
  progress(`${(await readdir(tarballs)).length} tarballs; committing the app`);
  const g = (args: string[], cwd: string) => run('git', args, { cwd });
  await g(['init', '--quiet', '--initial-branch=main'], work);
  await g(['add', '.'], work);
  await g(['-c', 'user.name=bench', '-c', 'user.email=b@x', 'commit', '--quiet', '-m', 'bench web app'], work);
  await g(['init', '--quiet', '--bare', '--initial-branch=main', bare], dir);
  await g(['push', '--quiet', bare, 'main'], work);
  await writeFile(path.join(dir, 'complete'), new Date().toISOString());
  return result;
}

if (require.main === module) {
  ensureBenchRepo(process.argv[2]).then(
    (r) => console.log(JSON.stringify(r)),
    (err: Error) => {
      console.error(`bench: ${err.message}`);
      process.exit(1);
    },
  );
}
