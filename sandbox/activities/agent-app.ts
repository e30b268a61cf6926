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
 */
import { rm } from 'node:fs/promises';
import type { AgentApp, ProvisionInput } from '../contract';
import { egressDirOf } from '../egress';
import { sandboxOf } from '../handle';
import { LABELS, SandboxNotFound } from '../provider';
import { HELPER } from '../toolchains';
import { AGENT_APP_LOG, agentAppContainerName } from '../service-logs';
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
      const info = await deps.sandboxes.info(input.sandbox);
      if (!info) throw new SandboxNotFound(input.sandbox);
      const name = agentAppContainerName(input.sandbox);
      // A running app is kept (a retry, the next attempt); one that exited starts again.
      if (!(await appAlive(deps, name))) await stopAgentApp(deps, input.sandbox);
      await createOwnedContainer(deps, {
        name,
        image: input.image,
        owner: info.labels[LABELS.session] ?? input.sandbox,
        repo: info.labels[LABELS.repo] ?? '',
        expiresAt: info.labels[LABELS.expires] ?? new Date(Date.now() + 60 * 60_000).toISOString(),
        limits: input.limits,
        companionOf: input.sandbox,
        sharingFiles: { command: appCommand(input.app.start) },
      });
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
    /** Stops (removes) the app kept for the agent beside `sandbox`; none there is no error. */
    async stopAgentApp(input: { sandbox: string }): Promise<void> {
      await stopAgentApp(deps, input.sandbox);
    },
  });
}

/** Stops the sandbox's app for the agent, if it runs (before verification, and the browser check's own app). */
export async function stopAgentApp(deps: Pick<ContainerDeps, 'sandboxes' | 'egressRoot'>, sandbox: string) {
  const name = agentAppContainerName(sandbox);
  await deps.sandboxes.destroy(name);
  await rm(egressDirOf(deps.egressRoot, name), { recursive: true, force: true });
}
