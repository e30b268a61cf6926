/**
 * bench/exec: what one command in a sandbox costs, per call (median of RUNS
 * runs of EXEC_N calls in a row, in one hardened sandbox):
 *   docker exec      `docker exec <c> true` with the docker CLI: the baseline
 *   lib/sandbox      DockerProvider.exec(['true']): drydock's primitive (dockerode)
 *   drydock-run      runStep's one docker exec (drydock-run: the command, its exit
 *                    code, output and cgroup counters in one answer), with
 *                    sandbox/docker/provider.ts, without Temporal
 *   drydock step     drydock's runStep activity through Temporal, as a session's
 *                    script step runs (bench workflow `execSteps` on the worker's
 *                    host queue)
 *   tool call        a built-in-loop tool call's command (drydock-run `true`)
 *                    through the sandbox's persistent executor, drydock-exec
 *                    (sandbox/activities/tool-exec.ts), as runTool sends it
 *   persistent shell one long-lived `docker exec -i <c> sh`, commands written to
 *                    its stdin, a marker line after each: the floor of any
 *                    persistent in-sandbox process.
 *
 *   npx tsx bench/exec.ts          RUNS=5, EXEC_N=20
 */
import { execFile, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import {
  parseRunOnce,
  runOnceCommand,
  toolExecutors,
  DockerProvider,
  LABELS,
  HELPERS_MOUNT,
  Toolchains,
} from '../sandbox';
import { historyProfile } from './session';
import { benchMain, startStack, tempDir } from './stack';
import { fmt, markdownTable, median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';
import type { BenchActivities, ExecStepsInput } from './workflows';

const run = promisify(execFile);
const RUNS = runsFromEnv(5);
const N = Number(process.env.EXEC_N ?? 20);
const nonce = () => randomBytes(16).toString('hex');

/** Per-call milliseconds of `n` calls in a row. */
async function perCall(n: number, call: (i: number) => Promise<unknown>): Promise<number> {
  const t = performance.now();
  for (let i = 0; i < n; i++) await call(i);
  return (performance.now() - t) / n;
}

/** A long-lived `sh` in the sandbox: each command, then a marker line with its exit code. */
class PersistentShell {
  private buffer = '';
  private waiting?: { marker: string; resolve: (code: number) => void };
  private count = 0;
  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.on('data', (chunk: Buffer) => {
      this.buffer += chunk.toString();
      const w = this.waiting;
      if (!w) return;
      const at = this.buffer.indexOf(`${w.marker} `);
      const end = at < 0 ? -1 : this.buffer.indexOf('\n', at);
      if (end < 0) return;
      const code = Number(this.buffer.slice(at + w.marker.length + 1, end));
      this.buffer = this.buffer.slice(end + 1);
      this.waiting = undefined;
      w.resolve(code);
    });
  }

  static open(container: string): PersistentShell {
    return new PersistentShell(spawn('docker', ['exec', '-i', container, 'sh']));
  }

  run(command: string): Promise<number> {
    const marker = `__drydock_done_${this.count++}_${randomBytes(4).toString('hex')}__`;
    return new Promise((resolve) => {
      this.waiting = { marker, resolve };
      this.child.stdin.write(`{ ${command}\n} </dev/null 2>&1; echo "${marker} $?"\n`);
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.child.once('exit', () => resolve());
      this.child.stdin.end();
    });
  }
}

/** A sandbox hardened like a session's (the input's default limits); removed by the stack's clean-up too. */
async function createBenchSandbox(
  sandboxes: DockerProvider,
  name: string,
  stack: Awaited<ReturnType<typeof startStack>>,
) {
  await sandboxes.create({
    name,
    image: stack.image,
    // No session label: the stack's reaper would remove a sandbox whose session is no running workflow.
    labels: { [LABELS.host]: stack.config.DRYDOCK_HOST_ID },
    cpus: 2,
    memoryBytes: 2 * 1024 ** 3,
    pids: 512,
    tmpBytes: 512 * 1024 ** 2,
    diskBytes: 10 * 1024 ** 3,
    egressDir: await tempDir('egress'),
    // drydock's helpers (drydock-run, drydock-exec), mounted from the host as in a session's sandbox.
    mounts: [{ source: await new Toolchains(await tempDir('tools')).helpers(), target: HELPERS_MOUNT }],
  });
}

/** The timing and ratio tables, and where one drydock step's time goes. */
function report(
  rows: Record<'dockerCli' | 'primitive' | 'oneExec' | 'step' | 'tool' | 'shell', Row>,
  profiles: Awaited<ReturnType<typeof historyProfile>>[],
): string {
  const { dockerCli, primitive, oneExec, step, tool, shell } = rows;
  const base = median(dockerCli.ms);
  const perStep = (xs: number[]) => fmt(median(xs));
  const activityRun = profiles.map((p) => (p.activities.runStep?.runMs ?? 0) / N);
  const dispatch = profiles.map((p) => (p.activityQueueMs + p.workflowTaskMs) / N);
  const breakdown = markdownTable(
    ['one drydock step (`true`), per call', 'median'],
    [
      ['runStep activity, start → completion (history)', perStep(activityRun)],
      ["of which runStep's one docker exec (drydock-run)", perStep(oneExec.ms)],
      [
        'of which the rest: artifact files, audit row, output streaming, heartbeats',
        fmt(median(activityRun) - median(oneExec.ms)),
      ],
      ['activity task queue wait + workflow task (history)', perStep(dispatch)],
      ['**drydock step, client-measured**', `**${fmt(median(step.ms))}**`],
    ],
    [1],
  );
  return [
    timingTable(
      [dockerCli, primitive, oneExec, step, tool, shell],
      `one command in the sandbox (per call, ${N} in a row)`,
    ),
    '',
    ratioTable([
      { name: 'drydock step / docker exec', value: median(step.ms) / base, goal: { max: 1.2 } },
      { name: 'sandbox/docker/provider.ts exec / docker exec', value: median(primitive.ms) / base },
      { name: "runStep's one exec (drydock-run) / docker exec", value: median(oneExec.ms) / base },
      { name: 'built-in-loop tool call / docker exec', value: median(tool.ms) / base, goal: { max: 0.3 } },
      { name: 'persistent shell (the floor) / docker exec', value: median(shell.ms) / base },
    ]),
    '',
    breakdown,
  ].join('\n');
}

async function main(): Promise<string> {
  const activities: BenchActivities = { noop: async () => undefined };
  const stack = await startStack({ benchActivities: { ...activities } });
  const sandboxes = new DockerProvider();
  const name = `drydock-bench-exec-${randomBytes(3).toString('hex')}`;
  const sessionId = `bench-exec-${randomBytes(3).toString('hex')}`;
  await createBenchSandbox(sandboxes, name, stack);
  try {
    const dockerCli: Row = { name: '`docker exec <c> true` (docker CLI)', ms: [] };
    const primitive: Row = { name: 'sandbox/docker/provider.ts exec `true` (dockerode)', ms: [] };
    const oneExec: Row = {
      name: "runStep's one docker exec: drydock-run `true` with sandbox/docker/provider.ts (no Temporal)",
      ms: [],
    };
    const tool: Row = { name: 'tool call: drydock-run `true` through drydock-exec (the persistent executor)', ms: [] };
    const step: Row = { name: 'drydock step: runStep activity through Temporal (`true`)', ms: [] };
    const shell: Row = { name: 'persistent shell: `true` written to a long-lived `docker exec -i <c> sh`', ms: [] };
    const profiles = [];

    const execSteps = (n: number, keyPrefix: string) =>
      stack.client.workflow.execute('execSteps', {
        workflowId: `bench-exec-${randomBytes(4).toString('hex')}`,
        taskQueue: stack.benchQueue!,
        args: [
          {
            sandbox: name,
            sessionId,
            hostQueue: stack.hostQueue,
            keyPrefix,
            command: 'true',
            n,
          } satisfies ExecStepsInput,
        ],
      });

    say('warm-up');
    await run('docker', ['exec', name, 'true']);
    await sandboxes.exec(name, ['true']);
    await execSteps(2, 'warmup');

    for (let r = 0; r < RUNS; r++) {
      dockerCli.ms.push(await perCall(N, () => run('docker', ['exec', name, 'true'])));
      primitive.ms.push(await perCall(N, () => sandboxes.exec(name, ['true'])));

      /** drydock-run `true` once, through `exec`; checks its answer. */
      const runTrue = async (
        exec: (argv: string[]) => Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }>,
      ) => {
        const n = nonce();
        const ran = await exec(runOnceCommand(n, 'true', { timeoutMs: 60_000, limit: 4096 }).argv);
        const answer = parseRunOnce(ran, n);
        if (answer?.exitCode !== 0) throw new Error(`drydock-run true failed: ${ran.stdout}${ran.stderr}`.trim());
      };
      oneExec.ms.push(await perCall(N, () => runTrue((argv) => sandboxes.exec(name, argv))));
      const executors = toolExecutors(sandboxes);
      await executors.exec(name, ['true']); // the executor's start is paid once per sandbox, not per call
      tool.ms.push(await perCall(N, () => runTrue((argv) => executors.exec(name, argv))));
      // The next runStep's drydock-run ends the executor (it is no ancestor of that step).

      let t = performance.now();
      await execSteps(0, `empty-${r}`);
      const empty = performance.now() - t;
      t = performance.now();
      const id = `bench-exec-${randomBytes(4).toString('hex')}`;
      const codes = await stack.client.workflow.execute('execSteps', {
        workflowId: id,
        taskQueue: stack.benchQueue!,
        args: [
          {
            sandbox: name,
            sessionId,
            hostQueue: stack.hostQueue,
            keyPrefix: `run-${r}`,
            command: 'true',
            n: N,
          } satisfies ExecStepsInput,
        ],
      });
      if ((codes as number[]).some((c) => c !== 0)) throw new Error(`a step failed: ${JSON.stringify(codes)}`);
      step.ms.push((performance.now() - t - empty) / N);
      profiles.push(await historyProfile(stack.client, id));

      const sh = PersistentShell.open(name);
      await sh.run('true'); // the shell's own start is paid once per session, not per call
      shell.ms.push(
        await perCall(N, async () => {
          if ((await sh.run('true')) !== 0) throw new Error('persistent shell: true failed');
        }),
      );
      await sh.close();
      say(
        `run ${r + 1}/${RUNS}: docker exec ${fmt(dockerCli.ms[r])}, drydock step ${fmt(step.ms[r])}, tool call ${fmt(tool.ms[r])}, shell ${fmt(shell.ms[r])}`,
      );
    }

    return report({ dockerCli, primitive, oneExec, step, tool, shell }, profiles);
  } finally {
    toolExecutors(sandboxes).closeAll();
    await sandboxes.destroy(name);
  }
}

benchMain('bench/exec', main);
