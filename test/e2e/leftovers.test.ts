/**
 * A test run killed with its servers running: the next run's reaper stops
 * its processes, removes its sandboxes and its temp folders, and leaves alone
 * what belongs to a run whose owner still lives (this one). And a machine that
 * went down with a test Docker host running leaves pid files the next start
 * must see through.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { LABELS } from '../../sandbox/provider';
import { own, reapLeftovers, reserveRunId } from '../support/leftovers';
import { docker, projectRoot } from '../support/helpers';

/** Like a killed run: a process that marks `dir`, starts a server (sleep) that outlives it, and is gone. */
async function killedRun(dir: string, run: string): Promise<number> {
  const script =
    `require('tsx/cjs'); const l = require(${JSON.stringify(path.join(__dirname, '..', 'support', 'leftovers.ts'))});` +
    `const s = require('node:child_process').spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });` +
    `s.unref(); l.own(process.env.DRYDOCK_TEST_DIR); l.ownProcess(s.pid); console.log(s.pid);`;
  const env: NodeJS.ProcessEnv = { ...process.env, DRYDOCK_TEST_DIR: dir, DRYDOCK_TEST_RUN: run };
  delete env.DRYDOCK_TEST_OWNER;
  const out = execFileSync(process.execPath, ['-e', script], { env, cwd: projectRoot, encoding: 'utf8' });
  return Number(out.trim());
}

const running = (pid: number) => {
  try {
    process.kill(pid, 0);
    return (
      existsSync(`/proc/${pid}`) && !/\) Z /.test(execFileSync('cat', [`/proc/${pid}/stat`], { encoding: 'utf8' }))
    );
  } catch {
    return false;
  }
};

test("a killed run's servers, sandboxes and folders are removed; a live run's are kept", async () => {
  const run = `leftover-${Date.now().toString(36)}`;
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-leftover-'));
  const server = await killedRun(dir, run);
  const sandbox = await docker.createContainer({
    Image: process.env.DRYDOCK_BASE_IMAGE!,
    Cmd: ['sleep', 'infinity'],
    Labels: { [LABELS.session]: `${run}-session` },
    HostConfig: { NetworkMode: 'none' },
  });
  const mine = await mkdtemp(path.join(tmpdir(), 'drydock-leftover-live-'));
  own(mine);
  expect(running(server)).toBe(true);

  const reaped = await reapLeftovers();

  expect(reaped).toEqual(expect.arrayContaining([`process ${server}`, dir]));
  // A killed process is gone once the kernel has reaped it: a moment, longer on a busy machine.
  for (let i = 0; i < 50 && running(server); i++) await new Promise((r) => setTimeout(r, 200));
  expect(running(server)).toBe(false);
  expect(existsSync(dir)).toBe(false);
  expect(await docker.listContainers({ all: true, filters: { id: [sandbox.id] } })).toEqual([]);
  expect(existsSync(mine)).toBe(true);
  spawn('rm', ['-rf', mine]);
});

test("lanes that reap at once (npm test's global setups) all end, and the killed run's sandbox, mount and folder go", async () => {
  const run = `leftover-${Date.now().toString(36)}`;
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-leftover-'));
  await killedRun(dir, run);
  // As a sandbox's storage is: mounted in the run's folder (sandbox/docker/storage.ts).
  mkdirSync(path.join(dir, 'fs'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', path.join(dir, 'fs')]);
  const sandbox = await docker.createContainer({
    Image: process.env.DRYDOCK_BASE_IMAGE!,
    Cmd: ['sleep', 'infinity'],
    Labels: { [LABELS.session]: `${run}-session` },
    HostConfig: { NetworkMode: 'none' },
  });
  await sandbox.start();

  // Each finds the same orphan; the first to remove the sandbox wins, the others found it gone or going.
  const reaped = await Promise.all([reapLeftovers(), reapLeftovers(), reapLeftovers()]);

  expect(reaped.flat().filter((r) => r.startsWith('sandbox '))).toHaveLength(1);
  expect(existsSync(dir)).toBe(false);
  expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(dir);
  expect(await docker.listContainers({ all: true, filters: { id: [sandbox.id] } })).toEqual([]);
});

test('a Docker host whose machine went down with it running starts again, though its pid files name other processes now', async () => {
  // /run outlives a machine here: the pid files of the engine and its containerd stay, and their
  // pids are taken by then (here, by this test's own process). dockerd refused to start beside
  // the one ("pid file found") and waited in vain for the other (CI: "did not start within 60 s").
  const name = 'stale-pids';
  const dir = `/var/lib/drydock-hosts/${name}`;
  const script = path.join(projectRoot, 'infra', 'docker-host.sh');
  await stopEngine(dir);
  mkdirSync(`/run/drydock-${name}/containerd`, { recursive: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/dockerd.pid`, String(process.pid));
  writeFileSync(`/run/drydock-${name}/containerd/containerd.pid`, String(process.pid));

  const socket = execFileSync('bash', [script, name], { encoding: 'utf8' }).trim();

  expect(socket).toBe(`unix:///run/drydock-${name}.sock`);
  const engine = new Docker({ socketPath: `/run/drydock-${name}.sock` });
  expect((await engine.info()).DockerRootDir).toBe(`${dir}/root`);
  await stopEngine(dir);
});

/** Stops the engine of `dir` (infra/docker-host.sh), if it runs, and its containerd with it. */
async function stopEngine(dir: string): Promise<void> {
  const pid = Number(existsSync(`${dir}/dockerd.pid`) ? readFileSync(`${dir}/dockerd.pid`, 'utf8') : 0);
  if (!pid || !running(pid) || !readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dir)) return;
  process.kill(pid, 'SIGTERM');
  while (running(pid)) await new Promise((r) => setTimeout(r, 200));
}

test("two runs started in the same millisecond get different ids (a teardown removes its id's sandboxes)", () => {
  const at = Date.now() - 1_000_000_000; // a millisecond no real run took
  const [first, second] = [reserveRunId(at), reserveRunId(at)];
  expect(first).toBe(`test-${at.toString(36)}`);
  expect(second).toBe(`test-${(at + 1).toString(36)}`);
});
