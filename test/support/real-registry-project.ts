/**
 * The real-registry project: a generated app whose lockfile resolves today's
 * versions of express, vitest and typescript (well over 150 packages) from the
 * real npm registry. Its snapshot is built through drydock's egress proxy,
 * behind this machine's TLS-intercepting network, whose CA is in the host's
 * system bundle: DRYDOCK_EXTRA_CA_CERTS names that bundle (the
 * corporate-proxy case, for real). test/e2e/real-registry.test.ts and
 * bench/start.ts both use it.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

/** The host's system bundle: it holds the CA of the network that intercepts TLS. */
export const HOST_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
/** What the project's sandboxes may reach through the egress proxy. */
export const REAL_REGISTRY_ALLOW = ['registry.npmjs.org', 'pypi.org'];
/** Its setup: the lockfile's install from the real registry. */
export const REAL_REGISTRY_SETUP = 'npm ci --no-audit --no-fund --loglevel=error';
/** Its test command; one test passes. */
export const REAL_REGISTRY_TEST = 'npx vitest run';

const MANIFEST = {
  name: 'realreg',
  version: '1.0.0',
  private: true,
  type: 'module',
  dependencies: { express: '^4.21.0' },
  devDependencies: { vitest: '^2.1.0', typescript: '^5.6.0' },
};

/**
 * The project's files (package.json, package-lock.json, a vitest test). The
 * lockfile is resolved on the host with its own npm configuration, asking the
 * registry for metadata only (`--package-lock-only`).
 */
export async function realRegistryProject(): Promise<Record<string, string>> {
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-realreg-'));
  try {
    const manifest = JSON.stringify(MANIFEST, null, 2);
    await writeFile(path.join(dir, 'package.json'), manifest);
    await promisify(execFile)('npm', ['install', '--package-lock-only', '--no-audit', '--no-fund'], { cwd: dir });
    return {
      '.gitignore': 'node_modules/\n',
      'package.json': manifest,
      'package-lock.json': await readFile(path.join(dir, 'package-lock.json'), 'utf8'),
      'app.test.js': `import { expect, test } from 'vitest';
import express from 'express';
test('express builds an app', () => expect(typeof express()).toBe('function'));
`,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** How many packages a project's lockfile resolves (the root excluded). */
export function lockedPackages(files: Record<string, string>): number {
  const lock = JSON.parse(files['package-lock.json']) as { packages: Record<string, unknown> };
  return Object.keys(lock.packages).length - 1;
}
