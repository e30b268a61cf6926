/**
 * The app kept running for the agent (docs/services.md, "The app for the
 * agent"): when the repo asks (`app.forAgent`), the session starts its app
 * before the agent's first step in a companion container of the sandbox
 * that shares its network namespace, /workspace and home, but not its
 * processes: every step's runner ends all of the sandbox's processes
 * before and after the step (nothing of one step acts in the next), and the
 * app lives in a process namespace of its own. It sees the sandbox's home
 * read-only and no egress socket (sandbox/docker/create-options.ts). Its
 * output goes to AGENT_APP_LOG in the companion, which `service_logs` reads
 * by the name "app". Verification stops it first (nothing the agent may
 * have changed in it runs while the evidence is made); teardown and the
 * reaper remove it by its companion label.
 *
 * The dev container's features' postStartCommands (sandbox/features.ts) run
 * the same way, in a companion of their own (`<sandbox>-start`), at each
 * start of a sandbox: after setup, before the first step and the app, as
 * the Dev Container CLI runs a feature's lifecycle hooks before the dev
 * container's own. Each in turn, in install order, in /workspace, as the
 * sandbox user; what a command leaves running in the background (a daemon)
 * keeps running there through the session's steps, reached on the shared
 * loopback and /workspace. Its output is kept in the companion's /tmp; the
 * end of a failed one's is reported, naming the feature.
 */
import { rm } from 'node:fs/promises';
import type { AgentApp, FeatureStart, ProvisionInput } from '../contract';
import { egressDirOf } from '../egress';
import { sandboxOf } from '../handle';
import { LABELS, SandboxNotFound } from '../provider';
import { HELPER } from '../toolchains';
import { AGENT_APP_LOG, agentAppContainerName, featureStartContainerName } from '../service-logs';
import { plainLogText } from '../../platform/scrub';
import { tail } from './output';
import { createOwnedContainer, inSandbox, type ContainerDeps } from './container';

/** Where the companion keeps its app's pid (its own /tmp): the readiness wait watches it. */
const APP_PID = '/tmp/drydock-app.pid';

/**
 * The companion's command: the app ($1) in /workspace, its output in the app
 * log ($2), its pid kept. The companion outlives an app that exits (its log
 * is in the companion's /tmp, which goes when the container stops), so the
 * agent can still read why.
 */
function appCommand(start: string): string[] {
  const script =
    `cd /workspace && { sh -c "$1" >>"$2" 2>&1 </dev/null & echo $! >${APP_PID}; wait $!; ` +
    `echo "drydock: the app exited with status $?" >>"$2"; exec sleep infinity; }`;
  return ['sh', '-c', script, 'drydock-app', start, AGENT_APP_LOG];
}

/** Whether the companion's app process still runs (a companion whose app exited is made anew). */
async function appAlive(deps: ContainerDeps, name: string): Promise<boolean> {
  if (!(await deps.sandboxes.exists(name))) return false;
  // A companion that stopped cannot even exec: made anew as well.
  const run = await deps.sandboxes
    .exec(name, ['sh', '-c', `kill -0 "$(cat ${APP_PID})" 2>/dev/null`])
    .catch(() => ({ exitCode: 1 }));
  return run.exitCode === 0;
}

/** Where the features' companion keeps each command's output (`<i>.log`), exit status (`<i>.exit`) and its end (`done`). */
const STARTS_DIR = '/tmp/drydock-start';
/** Characters of a failed command's output reported (its end). */
const FEATURE_OUTPUT_CHARS = 2_000;

/**
 * The features' companion's command: each postStartCommand ($1…) in turn in
 * /workspace, stopping at the first that fails, each one's output and status
 * kept; then it stays, so what they started in the background lives on.
 */
function startsCommand(starts: FeatureStart[]): string[] {
  const script =
    `mkdir -p ${STARTS_DIR} && cd /workspace || exit 1; i=0; for c in "$@"; do i=$((i+1)); ` +
    `sh -c "$c" >${STARTS_DIR}/$i.log 2>&1 </dev/null; s=$?; echo $s >${STARTS_DIR}/$i.exit; [ $s = 0 ] || break; done; ` +
    `: >${STARTS_DIR}/done; exec sleep infinity`;
  return ['sh', '-c', script, 'drydock-start', ...starts.map((s) => s.command)];
}

/**
 * Waits (at most `seconds`) for the companion's commands to end; prints
 * "<ran> <done> <status of the last>" and then the end of the last one's output.
 */
function startsWait(seconds: number): string {
  const d = STARTS_DIR;
  return (
    `i=0; while [ ! -e ${d}/done ] && [ $i -lt ${seconds * 5} ]; do sleep 0.2; i=$((i+1)); done; ` +
    `n=$(ls ${d} 2>/dev/null | grep -c '\.log$'); s=$(cat ${d}/$n.exit 2>/dev/null || echo -); ` +
    `[ -e ${d}/done ] && e=1 || e=0; echo "$n $e $s"; tail -c ${FEATURE_OUTPUT_CHARS * 2} ${d}/$n.log 2>/dev/null`
  );
}

/** What the features' start reports: all ran, or which one failed and how (the end of its output). */
export type FeatureStartResult = { ok: true } | { ok: false; feature: string; why: string; output: string };

/** What the app's start reports: ready, or why not (the session goes on; the agent can read the log). */
export type AgentAppStart = { ready: true } | { ready: false; why: string };

export function createAgentAppActivities(deps: ContainerDeps) {
  return inSandbox({
    /**
     * Starts the repo's app for the agent beside `sandbox` (a retry finds
     * the companion it made) and waits until `http://localhost:<port><readyPath>`
     * answers, within readyTimeoutMs.
     */
    async startAgentApp(input: {
      sandbox: string;
      image: string;
      app: AgentApp;
      limits: ProvisionInput['limits'];
    }): Promise<AgentAppStart> {
      const name = agentAppContainerName(input.sandbox);
      // A running app is kept (a retry, the next attempt); one that exited starts again.
      if (!(await appAlive(deps, name))) await stopAgentApp(deps, input.sandbox);
      await createCompanion(deps, input, name, appCommand(input.app.start));
      const url = `http://localhost:${input.app.port}${input.app.readyPath}`;
      const companion = sandboxOf(deps.sandboxes, name);
      // The pid file is the companion's first write: waited for a few seconds at most.
      const wait = `for i in $(seq 100); do [ -s ${APP_PID} ] && exec cat ${APP_PID}; sleep 0.1; done; exit 1`;
      const pid = Number((await companion.commands.exec(['sh', '-c', wait])).stdout.toString().trim());
      const ready = await companion.commands.exec(
        [HELPER.browser, JSON.stringify({ phase: 'ready', url, pid, readyTimeoutMs: input.app.readyTimeoutMs })],
        { env: ['NODE_PATH=', 'NODE_OPTIONS=', 'HOME=/tmp'] },
      );
      const line = ready.stdout.toString().trim().split('\n').pop() ?? '';
      try {
        const result = JSON.parse(line) as { outcome: string; message?: string };
        if (result.outcome === 'passed') return { ready: true };
        return { ready: false, why: result.message ?? result.outcome };
      } catch {
        return { ready: false, why: `the readiness wait failed (exit ${ready.exitCode}): ${ready.stderr.toString()}` };
      }
    },
    /**
     * Runs the features' postStartCommands in their companion beside
     * `sandbox` (a retry finds the one it made, and reads what it did) and
     * waits for them to end, within `timeoutMs` together.
     */
    async startFeatures(input: {
      sandbox: string;
      image: string;
      starts: FeatureStart[];
      timeoutMs: number;
      limits: ProvisionInput['limits'];
    }): Promise<FeatureStartResult> {
      const name = featureStartContainerName(input.sandbox);
      // One that stopped (its commands' outcome gone with its /tmp) is made anew.
      if (!(await companionRuns(deps, name))) await removeCompanion(deps, name);
      await createCompanion(deps, input, name, startsCommand(input.starts));
      const companion = sandboxOf(deps.sandboxes, name);
      const waited = await companion.commands.exec(['sh', '-c', startsWait(Math.ceil(input.timeoutMs / 1000))]);
      return featureStartResult(input.starts, waited.stdout.toString(), input.timeoutMs);
    },
    /** Stops (removes) the app kept for the agent beside `sandbox`; none there is no error. */
    async stopAgentApp(input: { sandbox: string }): Promise<void> {
      await stopAgentApp(deps, input.sandbox);
    },
  });
}

/** What the wait printed (startsWait) as the start's result, naming the feature that failed. */
export function featureStartResult(starts: FeatureStart[], printed: string, timeoutMs: number): FeatureStartResult {
  const [head = '', ...rest] = printed.split('\n');
  const [ran, done, status] = head.trim().split(' ');
  const n = Number(ran);
  if (done === '1' && status === '0' && n === starts.length) return { ok: true };
  const feature = starts[Math.max(0, Math.min(starts.length, n || 1) - 1)].feature;
  const output = tail(plainLogText(rest.join('\n')).trim(), FEATURE_OUTPUT_CHARS);
  const why =
    done !== '1'
      ? `did not end within ${Math.round(timeoutMs / 1000)} s (a daemon it starts goes in the background: \`cmd &\`)`
      : /^\d+$/.test(status ?? '')
        ? `exited with status ${status}`
        : 'did not run';
  return { ok: false, feature, why, output };
}

/**
 * Makes the companion `name` of `sandbox` running `command` (a retry finds the one it made),
 * with the sandbox's owner, repo and expiry: teardown and the reaper remove it with the sandbox.
 */
async function createCompanion(
  deps: ContainerDeps,
  of: { sandbox: string; image: string; limits: ProvisionInput['limits'] },
  name: string,
  command: string[],
): Promise<void> {
  const info = await deps.sandboxes.info(of.sandbox);
  if (!info) throw new SandboxNotFound(of.sandbox);
  await createOwnedContainer(deps, {
    name,
    image: of.image,
    owner: info.labels[LABELS.session] ?? of.sandbox,
    repo: info.labels[LABELS.repo] ?? '',
    expiresAt: info.labels[LABELS.expires] ?? new Date(Date.now() + 60 * 60_000).toISOString(),
    limits: of.limits,
    companionOf: of.sandbox,
    sharingFiles: { command },
  });
}

/** Whether a companion exists and runs (one that stopped cannot even exec). */
async function companionRuns(deps: ContainerDeps, name: string): Promise<boolean> {
  if (!(await deps.sandboxes.exists(name))) return false;
  const run = await deps.sandboxes.exec(name, ['true']).catch(() => ({ exitCode: 1 }));
  return run.exitCode === 0;
}

async function removeCompanion(deps: Pick<ContainerDeps, 'sandboxes' | 'egressRoot'>, name: string) {
  await deps.sandboxes.destroy(name);
  await rm(egressDirOf(deps.egressRoot, name), { recursive: true, force: true });
}

/** Stops the sandbox's app for the agent, if it runs (before verification, and the browser check's own app). */
export async function stopAgentApp(deps: Pick<ContainerDeps, 'sandboxes' | 'egressRoot'>, sandbox: string) {
  await removeCompanion(deps, agentAppContainerName(sandbox));
}
