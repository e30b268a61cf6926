/**
 * The CLI loads what its command needs: the worker's SDK half, the sandbox providers, the HTTP
 * server and the image builders are imported by the commands that use them (cli/main.ts,
 * cli/attach.ts), not at every start, which cost a third more CPU (docs/development.md). A
 * static import of one of them again fails here, naming the packages it brought.
 */
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { projectRoot } from '../../platform/config';

const run = promisify(execFile);
/** Packages only a worker, serve, attach or an image build loads. */
const HEAVY = ['@temporalio/worker', 'dockerode', '@kubernetes/client-node', '@modelcontextprotocol/sdk', 'undici'];

test('drydock --help loads none of the packages of the worker, the sandboxes or serve', async () => {
  // Printed by the CLI's process at its exit: every package it loaded.
  const report = path.join(tmpdir(), `drydock-cli-start-${process.pid}.js`);
  await writeFile(
    report,
    `process.on('exit', () => process.stderr.write('LOADED ' + JSON.stringify(Object.keys(require.cache)
      .map((f) => (f.match(/node_modules\\/((@[^/]+\\/)?[^/]+)/) ?? [])[1]).filter(Boolean)) + '\\n'));`,
  );
  const { stdout, stderr } = await run(path.join(projectRoot, 'bin', 'drydock'), ['--help'], {
    env: { ...process.env, NODE_OPTIONS: `--require ${report}` },
  });
  expect(stdout).toContain('Usage: drydock');
  const loaded = new Set<string>(JSON.parse(/^LOADED (.*)$/m.exec(stderr)![1]));
  expect(loaded.has('commander')).toBe(true);
  expect(HEAVY.filter((p) => loaded.has(p))).toEqual([]);
}, 60_000);
