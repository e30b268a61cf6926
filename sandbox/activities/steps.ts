/**
 * The step runner: one script step in the sandbox (a command, a file write or
 * a patch) under drydock-run, at most once per nonce, with its output streamed
 * out and, after an agent step, the session's checkpoint: all in one exec.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../../workflows/api';
import type { ScriptStep } from '../../workflows/input';
import {
  EGRESS_PORT,
  egressDirOf,
  openEgressProxy,
  proxyEnv,
  SANDBOX_EGRESS_SOCKET,
  SANDBOX_GATEWAY_SOCKET,
  type EgressProxy,
} from '../egress';
import { sandboxFault } from '../faults';
import type { ExecResult } from '../provider';
import { sandboxOf, type SandboxHandle } from '../handle';
import { OutputOverCap } from '../../platform/output-cap';
import { cliProgress } from '../../models/agent-cli-events';
import { openModelGateway, type ModelGateway } from '../model-gateway';
import { HELPER } from '../toolchains';
import {
  GATEWAY_PORT,
  MCP_TOKEN_ENV,
  MCP_TOKEN_PLACEHOLDER,
  type AgentCliName,
} from '../../workflows/rules/agent-clis';
import { randomBytes } from 'node:crypto';
import { openGatewayMcp, type GatewayMcp } from '../../mcp/gateway';
import { recordEvent } from '../../store/audit';
import { endStrayProcesses, permanent, STATE_DIR } from './container';
import type { SandboxDeps } from './deps';
import { heartbeatProgress } from '../../platform/heartbeat';
import { checkServices, syncServiceLogs } from './services';
import { keepServiceData, type ServiceDataDeps } from './service-data';
import { OUTPUT_CAPS, tail } from './output';
import { parseRunOnce, runDir, runOnceCommand, type RunOnceResult } from './run-once';
import type { GatewayResult, StepInput, StepResult } from '../contract';
import type { Redactor } from '../../platform/scrub';
import { readJUnitResults, usualReports } from './verify';

/**
 * When a running step's output is next copied out and heartbeated: 2 s after
 * it starts, then 2 s later each time up to every 8 s. Each copy is an exec in
 * the sandbox (a process, the engine's API calls), so at 64 sessions at once,
 * when steps run long because the cores are shared, a fixed 2 s was most of
 * the engine's work per step (bench/RESULTS.md, "CPU seconds at 64 sessions").
 */
export function streamDelayMs(copies: number): number {
  return Math.min(2_000 * (copies + 1), 8_000);
}
/** The most of a step's output copied to its artifact in one read. */
const STREAM_CHUNK_BYTES = 1024 ** 2;
const NO_COUNTS = { oomKills: 0, pidsMax: 0 };
/** The end of a step's output that comes back from the sandbox and goes to the artifact store (bytes). */
export const STEP_OUTPUT_LIMIT = 8 * 1024 ** 2;

/** A step as the audit trail shows it. */
function describeCommand(step: ScriptStep): string {
  if ('run' in step) return step.run;
  if ('write' in step) return `write ${step.write.path}`;
  return `apply a patch of ${step.patch.split('\n').length} lines`;
}

/**
 * Saves the sandbox's working tree (untracked files too) as a binary diff
 * against the base commit: the session's checkpoint. A scratch index keeps
 * the agent's own staging untouched.
 */
export async function takeCheckpoint(deps: ServiceDataDeps, sandbox: SandboxHandle, at: CheckpointAt): Promise<void> {
  // The scratch index is not in /tmp: a step that filled it must still be checkpointed.
  const taken = await sandbox.git.diffFrom(at.baseCommit, STATE_DIR, OUTPUT_CAPS.checkpoint);
  const ok = taken.exitCode === 0;
  await keepCheckpoint(deps, at, { ok, data: ok ? taken.stdout : taken.stderr });
}

interface CheckpointAt {
  sandbox: string;
  sessionId: string;
  step: string;
  baseCommit: string;
}

/** Saves a checkpoint taken in the sandbox (by takeCheckpoint, or by drydock-run after its step). */
async function keepCheckpoint(
  deps: ServiceDataDeps,
  at: CheckpointAt,
  taken: { ok: boolean; data: Buffer },
): Promise<void> {
  if (!taken.ok) throw new Error(`checkpoint after ${at.step} failed: ${taken.data.toString().trim()}`);
  if (taken.data.length > OUTPUT_CAPS.checkpoint.bytes) throw new OutputOverCap(OUTPUT_CAPS.checkpoint);
  await deps.checkpoints.save({ sessionId: at.sessionId, step: at.step, baseCommit: at.baseCommit, diff: taken.data });
  // The services' data goes with the tree it was written beside.
  await keepServiceData(deps, at);
}

/** What a step needs: the sandbox, the egress proxy and model gateway, the stores its results go to. */
export type StepDeps = Pick<
  SandboxDeps,
  | 'sandboxes'
  | 'artifacts'
  | 'audit'
  | 'checkpoints'
  | 'secrets'
  | 'egressRoot'
  | 'agentClis'
  | 'redactor'
  | 'log'
  | 'startChildSession'
>;

export function createStepActivities(deps: StepDeps) {
  return {
    /**
     * Runs one script step; a retry waits for (or reads) the run already made,
     * never runs it twice. Recorded in the audit trail once. A test command's
     * step returns the JUnit report it wrote with its result (one round trip).
     */
    async runStep(input: StepInput): Promise<StepResult> {
      const started = Date.now();
      // drydock-run ended whatever the step left running, then took the checkpoint in the same exec.
      const { result, checkpoint, reports } = await runStepOnce(deps, input);
      // A service that died or turned unhealthy meanwhile fails the step, named, and the session
      // replaces the sandbox and runs the step again: so its checkpoint is not kept (the replacement
      // starts from the one before, with the data from before the step, not after a half-trusted run).
      await checkServices(deps.sandboxes, input.sandbox);
      await keepStepCheckpoint(deps, input, result, checkpoint);
      const setupFiles = await keepSetupBaseline(deps, input, result);
      await recordEvent(deps.audit, {
        sessionId: input.sessionId,
        key: `${input.key}/command`,
        kind: 'command',
        actor: input.key === 'verify' ? 'drydock' : 'agent',
        data: {
          step: input.key,
          command: describeCommand(input.step),
          exitCode: result.exitCode,
          timedOut: result.timedOut,
          durationMs: Date.now() - started,
          artifact: result.artifact,
          // What the reviewer's summary lists as what ran (names only: values never leave the worker).
          ...(input.secrets?.length ? { secrets: input.secrets } : {}),
          ...(result.egress ? { egress: { allowed: result.egress.allowed, refused: result.egress.refused } } : {}),
          ...(input.egress?.length ? { hosts: input.egress.map((r) => r.host) } : {}),
          ...(setupFiles?.count ? { setupFiles } : {}),
        },
      });
      if (!input.testReport) return result;
      const at = { sandbox: input.sandbox, sessionId: input.sessionId };
      const files = input.testReport.files ?? usualReports(reports ?? []);
      const report = await readJUnitResults(deps, { ...at, files }).catch(permanent);
      return report ? { ...result, report } : result;
    },
  };
}

/**
 * The checkpoint after a step. A step stopped by the sandbox's memory, process or disk limit
 * ends the session (and may leave no room to take one); any other end, a time-out too, is kept.
 */
async function keepStepCheckpoint(
  deps: StepDeps,
  input: StepInput,
  result: StepResult,
  checkpoint: StepRun['checkpoint'],
): Promise<void> {
  const exhausted = result.failure !== undefined && result.failure !== 'timeout';
  if (!input.checkpointBase || exhausted) return;
  const at = { sandbox: input.sandbox, sessionId: input.sessionId, step: input.key, baseCommit: input.checkpointBase };
  // Taken here only when drydock-run did not get to report (it failed, or was killed).
  await (
    checkpoint ? keepCheckpoint(deps, at, checkpoint) : takeCheckpoint(deps, sandboxOf(deps.sandboxes, at.sandbox), at)
  ).catch(permanent);
}

/** How many of the files setup wrote the audit trail and the logs name. */
const SETUP_FILES_LISTED = 20;

/**
 * After a setup step that succeeded: the files it wrote become the workspace's setup baseline,
 * left out of the agent's change (commit.ts). Returns how many there were, and the first of them.
 */
async function keepSetupBaseline(
  deps: StepDeps,
  input: StepInput,
  result: StepResult,
): Promise<{ count: number; paths: string[] } | undefined> {
  if (!input.recordsSetup || result.exitCode !== 0 || result.failure) return undefined;
  const written = await sandboxOf(deps.sandboxes, input.sandbox)
    .git.keepSetupBaseline(STATE_DIR, SETUP_FILES_LISTED)
    .catch(permanent);
  if (written.count) {
    const { sessionId, sandbox } = input;
    deps.log.info({ sessionId, sandboxId: sandbox, setupFiles: written }, 'setup wrote files: kept out of the change');
  }
  return written;
}

/** What a step's run gives back: its result, the checkpoint drydock-run took after it, the XML files it wrote. */
interface StepRun {
  result: StepResult;
  checkpoint?: RunOnceResult['checkpoint'];
  reports?: string[];
}

/** Runs one script step (see runStep). */
async function runStepOnce(deps: StepDeps, input: StepInput): Promise<StepRun> {
  const { secrets } = deps;
  const missing = (input.secrets ?? []).filter((n) => !(n in secrets));
  if (missing.length) {
    throw ApplicationFailure.nonRetryable(
      `secrets not configured on the worker: ${missing.map((n) => `DRYDOCK_SECRET_${n}`).join(', ')}`,
      ErrorType.InvalidSessionInput,
    );
  }
  const granted = Object.fromEntries((input.secrets ?? []).map((n) => [n, secrets[n]]));
  try {
    return await runCommand(deps, input, stepCommand(input.step), granted);
  } catch (err) {
    return permanent(err);
  }
}

/** What drydock-run runs for a script step: the shell command, its own environment, and its input. */
interface StepCommand {
  command: string;
  env: Record<string, string>;
  /** Saved by the first run as $DRYDOCK_INPUT: a retry neither writes nor applies it again. */
  stdin?: string;
}

/** A script step as a command: a write's path and content, a patch's diff never pass through the shell's parsing. */
function stepCommand(step: ScriptStep): StepCommand {
  if ('run' in step) return { command: step.run, env: {} };
  if ('write' in step) {
    return {
      // The path (relative, no "..": workflows/input.ts) is a variable's value, so it is taken literally.
      command:
        'case $DRYDOCK_WRITE_TO in */*) mkdir -p -- "${DRYDOCK_WRITE_TO%/*}" ;; esac && cat -- "$DRYDOCK_INPUT" > "$DRYDOCK_WRITE_TO"',
      env: { DRYDOCK_WRITE_TO: step.write.path },
      stdin: step.write.content,
    };
  }
  return {
    // Already applied counts as applied: the step again in a replacement sandbox restored from the checkpoint taken after it.
    command:
      'git apply -R --check "$DRYDOCK_INPUT" 2>/dev/null && echo "patch already applied" || git apply --whitespace=nowarn "$DRYDOCK_INPUT"',
    env: {},
    stdin: step.patch,
  };
}

/**
 * A script step under drydock-run, behind the step's egress proxy when it
 * has an allowlist, with `granted` secrets in its environment.
 */
async function runCommand(
  deps: StepDeps,
  input: StepInput,
  { command, env: own, stdin }: StepCommand,
  granted: Record<string, string>,
): Promise<StepRun> {
  const { sandbox, nonce, checkpointBase } = input;
  const once = runOnceCommand(nonce, command, {
    timeoutMs: input.timeoutMs,
    limit: STEP_OUTPUT_LIMIT,
    fromEnd: true,
    checkpointBase,
    stdin,
    // A test step without named report files: drydock-run lists the XML files it wrote.
    listReports: input.testReport !== undefined && !input.testReport.files,
  });
  let argv = once.argv;
  const env: Record<string, string> = { ...input.env, ...granted, ...own };
  let proxy: EgressProxy | undefined;
  let gateway: ModelGateway | undefined;
  let mcp: GatewayMcp | undefined;
  // A retry may find its earlier attempt's forwarder still on the port; anything else there is fatal.
  const retry = Context.current().info.attempt > 1 ? ['--retry'] : [];
  const socketDir = egressDirOf(deps.egressRoot, sandbox);
  try {
    if (input.egress?.length) {
      proxy = await openEgressProxy({
        socketPath: `${socketDir}/${SANDBOX_EGRESS_SOCKET.split('/').pop()}`,
        sessionId: input.sessionId,
        step: input.key,
        rules: input.egress,
        log: deps.log,
      });
      argv = [HELPER.egress, SANDBOX_EGRESS_SOCKET, String(EGRESS_PORT), ...retry, '--', ...argv];
      Object.assign(env, proxyEnv());
    }
    if (input.gateway) {
      mcp = gatewayMcpFor(deps, input, env);
      gateway = await openGatewayFor(deps, input, `${socketDir}/${SANDBOX_GATEWAY_SOCKET.split('/').pop()}`, mcp);
      argv = [HELPER.egress, SANDBOX_GATEWAY_SOCKET, String(GATEWAY_PORT), ...retry, '--', ...argv];
    }
    // With a checkpoint the answer carries it: the output is cut to STEP_OUTPUT_LIMIT, so only the checkpoint can pass the cap.
    const cap = OUTPUT_CAPS.checkpoint;
    const output = { sessionId: input.sessionId, sandbox, file: `${runDir(nonce)}/output`, name: `${input.key}.log` };
    const call = () =>
      streamOutput(
        deps,
        output,
        sandboxOf(deps.sandboxes, sandbox).commands.exec(argv, {
          signal: Context.current().cancellationSignal,
          // The runner's own variables last: they win over any of the same name.
          env: [...Object.entries(env).map(([k, v]) => `${k}=${v}`), ...once.env],
          ...(once.stdin === undefined ? {} : { stdin: once.stdin }),
          ...(checkpointBase ? { stdoutCap: { bytes: cap.bytes + STEP_OUTPUT_LIMIT + 4096, what: cap.what } } : {}),
        }),
        input.gateway?.cli,
      ).catch((err: unknown) => {
        throw checkpointBase && err instanceof OutputOverCap ? new OutputOverCap(cap) : err;
      });
    const run = await callUntilAnswered(call, nonce, retry.length > 0 && (await startedEarlier(deps, input)));
    const egress = proxy && (await recordEgressTo(deps.artifacts, input, proxy));
    const models = gateway && { ...(await recordGatewayTo(deps, input, gateway)), ...mcpUsed(mcp) };
    const answer = parseRunOnce(run, nonce);
    if (!answer) {
      // drydock-run did not get to end what was running (the forwarder's port was taken, say): do it here.
      await endStrayProcesses(sandboxOf(deps.sandboxes, sandbox));
      return { result: runnerFailed(run, deps.redactor, egress) };
    }
    const result = await commandResult(deps, input, answer, egress);
    const { checkpoint, reports } = answer;
    const cli = input.gateway?.cli;
    if (!models || !cli) return { result, checkpoint, reports };
    const progress = cliProgress(
      cli,
      (await deps.artifacts.get(input.sessionId, `${input.key}.log`))?.toString() ?? '',
    );
    return {
      result: {
        ...result,
        outputTail: tail(progress.lines.join('\n')) || result.outputTail,
        gateway: { ...models, lastTool: progress.lastTool, final: progress.final && tail(progress.final, 1000) },
      },
      checkpoint,
    };
  } finally {
    await proxy?.close();
    await gateway?.close();
  }
}

/** How many times a retried attempt calls drydock-run again after its waiting call was killed. */
const WAITER_CALLS = 5;

/**
 * Whether an earlier attempt's drydock-run started this step (a retry after
 * a worker crash): then this attempt's call only waits for that run and reads
 * its result. A step that never started, or a sandbox that cannot say, is
 * run by this attempt as by the first.
 */
async function startedEarlier(deps: Pick<StepDeps, 'sandboxes'>, input: StepInput): Promise<boolean> {
  const sandbox = sandboxOf(deps.sandboxes, input.sandbox);
  return sandbox.files.exists(`${runDir(input.nonce)}/started`).catch(() => false);
}

/**
 * drydock-run's call, made again while it only waited for an earlier
 * attempt's run (`waiting`) and was killed: that run, once its step ends,
 * kills every other process of the sandbox user, this waiting call too. The
 * waiter's death is a worker crash's echo, never the step's exit; the next
 * call finds the run's recorded result. A call that ran the step itself is
 * never made again (the step may have killed it: then it has no answer).
 */
async function callUntilAnswered(call: () => Promise<ExecResult>, nonce: string, waiting: boolean) {
  let run = await call();
  for (let left = waiting ? WAITER_CALLS : 0; left > 0 && run.exitCode === 137 && !parseRunOnce(run, nonce); left--) {
    run = await call();
  }
  return run;
}

/**
 * The repo's MCP servers for an agent CLI's step, when it declares some, and
 * drydock's start_child when the session may start a child (for a CLI, or a
 * script step's drydock-child, which reads the token from its environment): a fresh token
 * for this step (in the step's environment and where the CLI's configuration
 * says MCP_TOKEN_PLACEHOLDER; never in history).
 */
function gatewayMcpFor(deps: StepDeps, input: StepInput, env: Record<string, string>): GatewayMcp | undefined {
  const declared = input.gateway?.mcp ?? { servers: [], calls: {} };
  const { startChildSession } = deps;
  const children = input.gateway?.children && startChildSession;
  if (!declared.servers.length && !children) return undefined;
  const token = randomBytes(24).toString('hex');
  for (const [name, value] of Object.entries(env)) env[name] = value.replaceAll(MCP_TOKEN_PLACEHOLDER, token);
  env[MCP_TOKEN_ENV] = token;
  return openGatewayMcp({
    servers: declared.servers,
    used: declared.calls,
    token,
    sessionId: input.sessionId,
    step: input.key,
    deps,
    ...(children ? { startChild: (task: string) => children(input.sessionId, { task, step: input.key }) } : {}),
    activity: {
      signal: Context.current().cancellationSignal,
      activityId: Context.current().info.activityId,
      attempt: Context.current().info.attempt,
    },
  });
}

const mcpUsed = (mcp: GatewayMcp | undefined): Pick<GatewayResult, 'mcp'> =>
  mcp ? { mcp: { calls: mcp.calls, asked: mcp.asked, refused: mcp.refused.length } } : {};

/**
 * The model gateway of an agent CLI's step, to the worker's endpoint for its protocol, with the session's
 * budget left; a script step's has no model (only drydock-child's start_child).
 */
async function openGatewayFor(
  deps: Pick<StepDeps, 'agentClis' | 'log'>,
  input: StepInput,
  socketPath: string,
  mcp: GatewayMcp | undefined,
): Promise<ModelGateway> {
  const { protocol, maxCalls, maxTokens, maxCostUsd } = input.gateway!;
  const common = { socketPath, log: deps.log, sessionId: input.sessionId, ...(mcp ? { mcp } : {}) };
  if (!protocol) return openModelGateway({ ...common, budget: {}, prices: {} });
  const settings = deps.agentClis;
  if (!settings) {
    throw ApplicationFailure.nonRetryable(
      'this worker runs no agent CLIs (no agentClis settings)',
      ErrorType.ModelNotAllowed,
    );
  }
  return openModelGateway({
    ...common,
    protocol,
    upstream: protocol === 'anthropic' ? settings.upstreams.anthropic : settings.upstreams.openai,
    budget: { maxCalls, maxTokens, maxCostUsd },
    prices: settings.prices,
  });
}

/** The gateway's calls and refusals: to the artifact store and the audit trail (once per call, keyed by the step). */
async function recordGatewayTo(
  deps: StepDeps,
  input: StepInput,
  gateway: ModelGateway,
): Promise<Omit<GatewayResult, 'lastTool' | 'final'>> {
  const lines = [
    ...gateway.calls.map((c) => JSON.stringify({ type: 'call', ...c })),
    ...gateway.refusals.map((r) => JSON.stringify({ type: 'refused', ...r })),
  ].join('\n');
  const log = await deps.artifacts.put(input.sessionId, `${input.key}.models.jsonl`, lines ? `${lines}\n` : '');
  for (const [i, call] of gateway.calls.entries()) {
    await recordEvent(deps.audit, {
      sessionId: input.sessionId,
      key: `${input.key}/model-${i}`,
      kind: 'model_call',
      actor: 'agent',
      data: { step: input.key, via: 'gateway', ...call },
    });
  }
  const sum = (k: 'inputTokens' | 'outputTokens' | 'cachedTokens') => gateway.calls.reduce((n, c) => n + c[k], 0);
  return {
    calls: gateway.calls.length,
    inputTokens: sum('inputTokens'),
    outputTokens: sum('outputTokens'),
    cachedTokens: sum('cachedTokens'),
    costUsd: gateway.used.costUsd,
    refused: gateway.refusals.length,
    ...(gateway.stopped ? { stopped: gateway.stopped } : {}),
    log,
  };
}

/**
 * The runner itself failed (missing from the image, killed, no room for its
 * state): the step did not run to an exit code, so it cannot count as passed.
 */
function runnerFailed(run: ExecResult, redactor: Redactor, egress: StepResult['egress']): StepResult {
  const why = tail(`${run.stderr.toString()}${run.stdout.toString()}`.trim() || `exit ${run.exitCode}`, 500);
  // A step's leftovers holding every process slot is the one limit that stops the runner itself.
  const failure = sandboxFault({ exitCode: -1, output: why, before: NO_COUNTS, after: NO_COUNTS });
  return {
    exitCode: -1,
    timedOut: false,
    outputTail: redactor.text(`drydock-run failed: ${why}`),
    ...(failure === 'pids' ? { failure } : {}),
    egress,
  };
}

/** A command that ran to its exit code: its output (the end, bounded) to the artifact store, and the limit that stopped it, if any. */
async function commandResult(
  { artifacts, log, redactor }: Pick<StepDeps, 'artifacts' | 'log' | 'redactor'>,
  input: StepInput,
  answer: RunOnceResult,
  egress: StepResult['egress'],
): Promise<StepResult> {
  const { exitCode } = answer;
  const cut = answer.bytes - answer.output.length;
  const kept = await redactor.large(answer.output.toString());
  const output = cut > 0 ? `[the first ${cut} of ${answer.bytes} bytes of output are not kept]\n${kept}` : kept;
  const failure = sandboxFault({ exitCode, output, before: answer.before, after: answer.after });
  const artifact = await artifacts.put(input.sessionId, `${input.key}.log`, output);
  if (failure)
    log.warn(
      { sessionId: input.sessionId, sandboxId: input.sandbox, step: input.key, failure },
      'step stopped by a sandbox limit',
    );
  return {
    exitCode,
    timedOut: exitCode === 124,
    outputTail: tail(output),
    artifact,
    ...(failure ? { failure } : {}),
    ...(egress ? { egress } : {}),
  };
}

/**
 * While `running` goes on, copies what the command has written so far to
 * the artifact `name` and heartbeats with its tail, so a long step (an agent
 * CLI) can be followed live; returns `running`'s result.
 */
async function streamOutput<T>(
  deps: Pick<SandboxDeps, 'sandboxes' | 'artifacts' | 'redactor' | 'egressRoot'>,
  to: { sessionId: string; sandbox: string; file: string; name: string },
  running: Promise<T>,
  cli?: AgentCliName,
): Promise<T> {
  const { sandboxes, artifacts, redactor } = deps;
  const sandbox = sandboxOf(sandboxes, to.sandbox);
  // A secret cut in two by a chunk boundary is held until it can be recognised whole.
  const stream = redactor.stream();
  let copied = 0;
  let last = '';
  let done = false;
  let partial = '';
  let lines: string[] = [];
  let lastTool: string | undefined;
  const finished = running.finally(() => (done = true));
  // Handled at once: an exec on a dead sandbox rejects within milliseconds, while the
  // put below is still awaited; the caller still gets the rejection from the return.
  finished.catch(() => undefined);
  await artifacts.put(to.sessionId, to.name, '');
  // A sandbox's services are made with it, not during a step: one without any is not asked again.
  const services = await syncServiceLogs(deps, to.sandbox).catch(() => 1);
  for (let copies = 0; !done; copies++) {
    await Promise.race([finished.catch(() => undefined), new Promise((r) => setTimeout(r, streamDelayMs(copies)))]);
    if (done) break;
    if (services) await syncServiceLogs(deps, to.sandbox).catch(() => undefined);
    const chunk = await sandbox.files.readFrom(to.file, copied, STREAM_CHUNK_BYTES).catch(() => undefined);
    if (!chunk?.length) continue;
    copied += chunk.length;
    const text = stream.push(chunk.toString());
    await artifacts.append(to.sessionId, to.name, text);
    last = tail(last + text);
    if (!cli) {
      heartbeatProgress({ outputTail: last, bytes: copied });
      continue;
    }
    // An agent CLI's JSON events, as lines for people; a line cut by the chunk's end is read next time.
    partial += text;
    const complete = partial.lastIndexOf('\n') + 1;
    const progress = cliProgress(cli, partial.slice(0, complete));
    partial = partial.slice(complete);
    if (partial.length > 1 << 20) partial = ''; // one line over 1 MiB is not progress
    lines = [...lines, ...progress.lines].slice(-10);
    lastTool = progress.lastTool ?? lastTool;
    heartbeatProgress({ progress: lines, lastTool, bytes: copied });
  }
  return finished;
}

/** The step's egress log, to the artifact store; counts for the step's result. */
async function recordEgressTo(
  artifacts: SandboxDeps['artifacts'],
  input: StepInput,
  proxy: EgressProxy,
): Promise<StepResult['egress']> {
  const lines = proxy.records.map((r) => JSON.stringify(r)).join('\n');
  const log = await artifacts.put(input.sessionId, `${input.key}.egress.jsonl`, lines ? `${lines}\n` : '');
  // Counted by the proxy: its record list stops growing at its bound.
  return { allowed: proxy.counts.allowed, refused: proxy.counts.refused, log };
}
