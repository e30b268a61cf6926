import { createHash } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import type { ScriptStep } from '../workflows/input';
import { recordEvent } from './audit';
import type { ActivityDeps } from './deps';
import {
  CATCH_UP_REF,
  catchUpBundle,
  commitsBetween,
  GitError,
  inspectBundle,
  mirrorOf,
  resolveCommit,
  updateMirror,
  workingTreeTar,
} from '../lib/git';
import { gitCredentials } from '../lib/github';
import { reportProgress } from './heartbeat';
import {
  EGRESS_PORT,
  egressDirOf,
  openEgressProxy,
  proxyEnv,
  SANDBOX_EGRESS_SOCKET,
  type EgressProxy,
  type EgressRule,
} from '../lib/egress';
import { LABELS, parseCounters, SandboxNotFound, sandboxFault, type SandboxFault } from '../lib/sandbox';
import { scrub } from '../lib/scrub';
import {
  changedInputs,
  SANDBOX_SNAPSHOT_LABEL,
  setupCommandOf,
  setupHash,
  setupInputs,
  type SetupEgressRule,
  type SnapshotBuildRow,
} from '../lib/snapshots';

/** Where the sandbox keeps per-step state (see sandbox-images/base/drydock-run). */
export const STATE_DIR = '/home/drydock/.drydock';
const TAIL_CHARS = 2_000;
/** How often a running step's output is copied out and heartbeated. */
const STREAM_INTERVAL_MS = 2_000;
const NO_COUNTS = { oomKills: 0, pidsMax: 0 };
/** /tmp's size when a session does not say (it counts against the memory limit). */
export const DEFAULT_TMP_BYTES = 512 * 1024 ** 2;

export interface ProvisionInput {
  sessionId: string;
  repo: { url: string; ref?: string };
  /** tmpBytes: the size of /tmp (default 512 MiB; absent in sessions started before it existed). */
  limits: { cpus: number; memoryBytes: number; pids: number; tmpBytes?: number };
  /** ISO time after which the reaper may remove the sandbox. */
  expiresAt: string;
  /**
   * 0 (or absent): the session's first sandbox. n > 0: the n-th replacement
   * of a lost one, which starts from the session's last checkpoint.
   */
  generation?: number;
}

export interface Sandbox {
  name: string;
  host: string;
  /** The task queue of the host that owns the sandbox: later sandbox activities go there. */
  hostQueue: string;
  image: string;
  baseCommit: string;
  /** The snapshot the sandbox started from; absent: the cold path (clone in the session). */
  snapshot?: SnapshotUse;
  /** Setup the session must run before the agent (cold path, or its inputs changed since the snapshot). */
  setup?: SetupPlan;
  /** How long the session waits for `hostQueue` before it counts the host as lost. */
  hostTimeoutMs: number;
  /** Which replacement this is (see ProvisionInput.generation) and the checkpoint it started from. */
  generation?: number;
  restored?: { step: string; bytes: number };
}

export interface SnapshotUse {
  image: string;
  commit: string;
  /** How old the snapshot was when the session started, in ms. */
  ageMs: number;
  /** Commits the session's ref had that the snapshot lacked (absent when unknown: history rewritten). */
  behind?: number;
}

export interface SetupPlan {
  command: string;
  timeoutMs: number;
  /** What setup may reach through the egress proxy (the repo's registries). */
  egress: SetupEgressRule[];
  /** Why it runs: no snapshot yet, or which setup inputs changed. */
  reason: string;
}

export interface StepInput {
  sandbox: string;
  sessionId: string;
  /** Unique per session and step ("step-1", "verify"): a retry finds the earlier run by it. */
  key: string;
  step: ScriptStep;
  timeoutMs: number;
  /**
   * Hosts (and methods) this step may reach through the egress proxy, which
   * is open for this step only. Absent or empty: the step has no way out.
   */
  egress?: EgressRule[];
  /** Plain (non-secret) environment of this step only. */
  env?: Record<string, string>;
  /**
   * Names of worker secrets granted to this step only: `DRYDOCK_SECRET_<NAME>`
   * on the worker becomes `<NAME>` in the step's environment. Values never
   * travel through Temporal, and are scrubbed from the output, the artifact
   * and the logs.
   */
  secrets?: string[];
  /** An agent step: when it ends, the working tree against this base commit is the session's new checkpoint. */
  checkpointBase?: string;
}

export interface StepResult {
  exitCode: number;
  timedOut: boolean;
  outputTail: string;
  artifact?: string;
  /** The sandbox limit that stopped the step, when one did. */
  failure?: SandboxFault;
  /** What the step asked of the egress proxy (the whole log is in `artifact` of the same name + .egress.jsonl). */
  egress?: { allowed: number; refused: number; log: string };
}

export interface CommitResult {
  commit: string;
  changed: boolean;
  diffstat: string;
  /** sha256 of the target branch and the whole diff: what an approval binds to. */
  changeHash: string;
  /** Artifact reference of the whole diff, for the review console. */
  diff?: string;
}

/** A step as the audit trail shows it. */
function describeCommand(step: ScriptStep): string {
  if ('run' in step) return step.run;
  if ('write' in step) return `write ${step.write.path}`;
  return `apply a patch of ${step.patch.split('\n').length} lines`;
}

/** Container name from the session id (and replacement number): the idempotency key of provisioning. */
export function sandboxName(sessionId: string, generation = 0): string {
  const safe = sessionId.replace(/[^A-Za-z0-9_.-]/g, '-').slice(0, 100);
  const name =
    safe === sessionId
      ? `drydock-${safe}`
      : `drydock-${safe}-${createHash('sha256').update(sessionId).digest('hex').slice(0, 8)}`;
  return generation ? `${name}-r${generation}` : name;
}

/**
 * Saves the sandbox's working tree (untracked files too) as a binary diff
 * against the base commit: the session's checkpoint. A scratch index keeps
 * the agent's own staging untouched.
 */
export async function takeCheckpoint(
  deps: Pick<ActivityDeps, 'sandboxes' | 'checkpoints'>,
  at: { sandbox: string; sessionId: string; step: string; baseCommit: string },
): Promise<void> {
  const taken = await deps.sandboxes.exec(at.sandbox, [
    'sh',
    '-c',
    // Not in /tmp: a step that filled it must still be checkpointed.
    'set -e; i="$2/checkpoint.index"; cp .git/index "$i"; export GIT_INDEX_FILE="$i"; git add -A; git diff --cached --binary "$1"; rm -f "$i"',
    'checkpoint',
    at.baseCommit,
    STATE_DIR,
  ]);
  if (taken.exitCode !== 0) throw new Error(`checkpoint after ${at.step} failed: ${taken.stderr.toString().trim()}`);
  await deps.checkpoints.save({
    sessionId: at.sessionId,
    step: at.step,
    baseCommit: at.baseCommit,
    diff: taken.stdout,
  });
}

/** What an approval binds to: the target branch and the whole diff. */
function changeHash(branch: string, diff: string): string {
  return createHash('sha256').update(`${branch}\0`).update(diff).digest('hex');
}

/**
 * The sandbox's commits on `branch` since `base`, as a git bundle written to
 * stdout (the sandbox has no network); undefined when there are none.
 */
export async function exportBundle(
  sandboxes: ActivityDeps['sandboxes'],
  sandbox: string,
  base: string,
  branch: string,
): Promise<Buffer | undefined> {
  const result = await sandboxes.exec(sandbox, ['git', 'bundle', 'create', '-', `${base}..refs/heads/${branch}`]);
  if (result.exitCode === 0) return result.stdout;
  if (/empty bundle/i.test(result.stderr.toString())) return undefined;
  throw new Error(`git bundle failed: ${result.stderr.toString().trim()}`);
}

/** The step's egress log, to the artifact store; counts for the step's result. */
async function recordEgressTo(
  artifacts: ActivityDeps['artifacts'],
  input: StepInput,
  proxy: EgressProxy,
): Promise<StepResult['egress']> {
  const lines = proxy.records.map((r) => JSON.stringify(r)).join('\n');
  const log = await artifacts.put(input.sessionId, `${input.key}.egress.jsonl`, lines ? `${lines}\n` : '');
  const allowed = proxy.records.filter((r) => r.allowed).length;
  return { allowed, refused: proxy.records.length - allowed, log };
}

export function tail(text: string, chars = TAIL_CHARS): string {
  return text.length <= chars ? text : `…${text.slice(-chars)}`;
}

function permanent(err: unknown): never {
  if (err instanceof SandboxNotFound) {
    throw ApplicationFailure.nonRetryable(err.message, ErrorType.SandboxNotFound);
  }
  throw err;
}

export function createSandboxActivities(deps: ActivityDeps) {
  const {
    sandboxes,
    artifacts,
    mirrorsDir,
    hostId,
    hostQueue,
    baseImage,
    runtime,
    readonlyRoot,
    egressRoot,
    secrets,
    github,
    audit,
    log,
  } = deps;
  /**
   * While `running` goes on, copies what the command has written so far to
   * the artifact `name` and heartbeats with its tail, so a long step (an agent
   * CLI) can be followed live; returns `running`'s result.
   */
  async function streamOutput<T>(
    sessionId: string,
    sandbox: string,
    file: string,
    name: string,
    running: Promise<T>,
    hidden: string[],
  ): Promise<T> {
    let copied = 0;
    let last = '';
    let done = false;
    const finished = running.finally(() => (done = true));
    await artifacts.put(sessionId, name, '');
    while (!done) {
      await Promise.race([finished.catch(() => undefined), new Promise((r) => setTimeout(r, STREAM_INTERVAL_MS))]);
      if (done) break;
      const chunk = await sandboxes
        .exec(sandbox, [
          'sh',
          '-c',
          'tail -c +"$1" "$2" 2>/dev/null | head -c 1048576',
          'tail',
          String(copied + 1),
          file,
        ])
        .catch(() => undefined);
      if (!chunk?.stdout.length) continue;
      copied += chunk.stdout.length;
      const text = scrub(chunk.stdout.toString(), hidden);
      await artifacts.append(sessionId, name, text);
      last = tail(last + text, TAIL_CHARS);
      reportProgress({ outputTail: last, bytes: copied });
    }
    return finished;
  }

  const egressDir = (sandbox: string) => egressDirOf(egressRoot, sandbox);
  /** Values never to show: the secrets a step may hold, and the worker's own token. */
  const secretValues = (granted: string[]) => [...granted, ...(github.token ? [github.token] : [])];

  /** Runs one script step (see runStep). */
  async function runStepOnce(input: StepInput): Promise<StepResult> {
    const { sandbox, step } = input;
    const missing = (input.secrets ?? []).filter((n) => !(n in secrets));
    if (missing.length) {
      throw ApplicationFailure.nonRetryable(
        `secrets not configured on the worker: ${missing.map((n) => `DRYDOCK_SECRET_${n}`).join(', ')}`,
        ErrorType.InvalidSessionInput,
      );
    }
    const granted = Object.fromEntries((input.secrets ?? []).map((n) => [n, secrets[n]]));
    const hidden = secretValues(Object.values(granted));
    let proxy: EgressProxy | undefined;
    try {
      if ('write' in step) {
        const result = await sandboxes.exec(
          sandbox,
          ['sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', 'write', step.write.path],
          { stdin: step.write.content },
        );
        return { exitCode: result.exitCode, timedOut: false, outputTail: tail(scrub(result.stderr.toString())) };
      }
      if ('patch' in step) {
        // Already applied (a retry after a crash) counts as applied.
        const result = await sandboxes.exec(
          sandbox,
          [
            'sh',
            '-c',
            'f=$(mktemp) && cat > "$f" && { git apply -R --check "$f" 2>/dev/null && echo "patch already applied" || git apply --whitespace=nowarn "$f"; }',
          ],
          { stdin: step.patch },
        );
        const output = `${result.stdout.toString()}${result.stderr.toString()}`;
        return { exitCode: result.exitCode, timedOut: false, outputTail: tail(scrub(output, hidden)) };
      }
      const dir = `${STATE_DIR}/steps/${input.key}`;
      const seconds = String(Math.max(1, Math.ceil(input.timeoutMs / 1000)));
      let argv = ['drydock-run', dir, seconds, step.run];
      const env: Record<string, string> = { ...input.env, ...granted };
      if (input.egress?.length) {
        proxy = await openEgressProxy({
          socketPath: `${egressDir(sandbox)}/${SANDBOX_EGRESS_SOCKET.split('/').pop()}`,
          sessionId: input.sessionId,
          step: input.key,
          rules: input.egress,
          log,
        });
        argv = ['drydock-egress', SANDBOX_EGRESS_SOCKET, String(EGRESS_PORT), '--', ...argv];
        Object.assign(env, proxyEnv());
      }
      const running = sandboxes.exec(sandbox, argv, {
        signal: Context.current().cancellationSignal,
        env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      });
      const run = await streamOutput(input.sessionId, sandbox, `${dir}/output`, `${input.key}.log`, running, hidden);
      const egress = proxy && (await recordEgressTo(artifacts, input, proxy));
      const recorded = run.stdout.toString().trim().split('\n').pop() ?? '';
      if (run.exitCode !== 0 || !/^\d+$/.test(recorded)) {
        // The runner itself failed (missing from the image, killed, no room for its state):
        // the step did not run to an exit code, so it cannot count as passed.
        const why = tail(`${run.stderr.toString()}${run.stdout.toString()}`.trim() || `exit ${run.exitCode}`, 500);
        // A step's leftovers holding every process slot is the one limit that stops the runner itself.
        const failure = sandboxFault({ exitCode: -1, output: why, before: NO_COUNTS, after: NO_COUNTS });
        return {
          exitCode: -1,
          timedOut: false,
          outputTail: scrub(`drydock-run failed: ${why}`, hidden),
          ...(failure === 'pids' ? { failure } : {}),
          egress,
        };
      }
      const exitCode = Number(recorded);
      const output = scrub((await sandboxes.exec(sandbox, ['cat', `${dir}/output`])).stdout.toString(), hidden);
      const counters = (
        await sandboxes.exec(sandbox, [
          'sh',
          '-c',
          'cat "$1/cgroup.before"; echo ---; cat "$1/cgroup.after"',
          'counters',
          dir,
        ])
      ).stdout
        .toString()
        .split('---');
      const failure = sandboxFault({
        exitCode,
        output,
        before: parseCounters(counters[0] ?? ''),
        after: parseCounters(counters[1] ?? ''),
      });
      const artifact = await artifacts.put(input.sessionId, `${input.key}.log`, output);
      if (failure)
        log.warn(
          { sessionId: input.sessionId, sandboxId: sandbox, step: input.key, failure },
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
    } catch (err) {
      return permanent(err);
    } finally {
      await proxy?.close();
    }
  }

  return {
    /** Creates the session's sandbox (or finds it after a retry) with the repo at the requested ref. */
    async provisionSandbox(input: ProvisionInput): Promise<Sandbox> {
      const name = sandboxName(input.sessionId, input.generation);
      const mirror = await syncMirror(deps, input.repo.url);
      let baseCommit: string;
      try {
        baseCommit = await resolveCommit(mirror, input.repo.ref);
      } catch (err) {
        throw ApplicationFailure.nonRetryable((err as Error).message, ErrorType.RepoUnavailable);
      }
      const snapshot = await newestSnapshot(deps, input.repo.url);
      const image = snapshot?.image ?? baseImage;
      // Mounted read-only at /run/drydock: a step's egress proxy puts its socket here.
      await mkdir(egressDir(name), { recursive: true, mode: 0o755 });
      const { created } = await sandboxes.create({
        name,
        image,
        runtime,
        readonlyRoot,
        egressDir: egressDir(name),
        tmpBytes: input.limits.tmpBytes ?? DEFAULT_TMP_BYTES,
        labels: {
          [LABELS.session]: input.sessionId,
          [LABELS.repo]: input.repo.url,
          [LABELS.host]: hostId,
          [LABELS.expires]: input.expiresAt,
          ...(snapshot ? { [SANDBOX_SNAPSHOT_LABEL]: snapshot.image! } : {}),
        },
        ...input.limits,
      });
      // A replacement starts from where the lost sandbox's last step left the tree.
      const checkpoint = input.generation ? await deps.checkpoints.latest(input.sessionId) : undefined;
      const ready = await sandboxes.exec(name, ['test', '-f', `${STATE_DIR}/provisioned`]);
      if (ready.exitCode !== 0) {
        if (snapshot) await catchUp(deps, name, mirror, snapshot.commit!, baseCommit);
        else await copyWorkingTree(deps, name, mirror, baseCommit);
        if (checkpoint?.diff.length) {
          await sandboxes.run(
            name,
            ['sh', '-c', 'f=$(mktemp) && cat > "$f" && git apply --binary --whitespace=nowarn "$f" && rm -f "$f"'],
            { stdin: checkpoint.diff },
          );
        }
        await sandboxes.run(name, [
          'sh',
          '-c',
          `git config --global user.name drydock && git config --global user.email drydock@localhost && ` +
            `git config --global --add safe.directory /workspace && mkdir -p ${STATE_DIR} && touch ${STATE_DIR}/provisioned`,
        ]);
      }
      const use: SnapshotUse | undefined = snapshot && {
        image: snapshot.image!,
        commit: snapshot.commit!,
        ageMs: Date.now() - Date.parse(snapshot.finishedAt!),
        behind: await commitsBetween(mirror, snapshot.commit!, baseCommit),
      };
      const setup = await setupPlan(deps, input.repo.url, mirror, baseCommit, snapshot);
      const restored = checkpoint && { step: checkpoint.step, bytes: checkpoint.diff.length };
      log.info(
        {
          sessionId: input.sessionId,
          sandboxId: name,
          host: hostId,
          created,
          snapshot: use,
          setup: setup?.reason,
          generation: input.generation,
          restored,
        },
        'sandbox ready',
      );
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: input.generation ? `provision-r${input.generation}` : 'provision',
        kind: 'sandbox.provisioned',
        actor: 'drydock',
        data: {
          sandbox: name,
          image,
          repo: input.repo.url,
          commit: baseCommit,
          limits: input.limits,
          snapshot: use,
          ...(input.generation ? { generation: input.generation, restored } : {}),
        },
      });
      return {
        name,
        host: hostId,
        hostQueue,
        image,
        baseCommit,
        hostTimeoutMs: deps.hostTimeoutMs,
        ...(use ? { snapshot: use } : {}),
        ...(setup ? { setup } : {}),
        ...(input.generation ? { generation: input.generation, ...(restored ? { restored } : {}) } : {}),
      };
    },

    /**
     * Runs one script step; a retry waits for (or reads) the run already made,
     * never runs it twice. Recorded in the audit trail once.
     */
    async runStep(input: StepInput): Promise<StepResult> {
      const started = Date.now();
      const result = await runStepOnce(input);
      // A step stopped by the sandbox's memory, process or disk limit ends the session (and
      // may leave no room to take a checkpoint); any other end, a time-out too, is kept.
      const exhausted = result.failure !== undefined && result.failure !== 'timeout';
      if (input.checkpointBase && !exhausted) {
        await takeCheckpoint(deps, {
          sandbox: input.sandbox,
          sessionId: input.sessionId,
          step: input.key,
          baseCommit: input.checkpointBase,
        }).catch(permanent);
      }
      await recordEvent(audit, {
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
        },
      });
      return result;
    },

    /**
     * Commits whatever the agent changed on the session branch (idempotent),
     * then describes the change from a bundle, with the worker's git.
     */
    async commitChanges(input: {
      sandbox: string;
      /** Absent in sessions started before the diff was kept. */
      sessionId?: string;
      repoUrl: string;
      branch: string;
      message: string;
      baseCommit: string;
      /** The commit's date: the same tree committed again (in a replacement sandbox) is the same commit. */
      date?: string;
    }): Promise<CommitResult> {
      try {
        await sandboxes.run(
          input.sandbox,
          [
            'sh',
            '-c',
            'set -e; git checkout -q -B "$1"; git add -A; git diff --cached --quiet || git commit -q -m "$2"',
            'commit',
            input.branch,
            input.message,
          ],
          input.date ? { env: [`GIT_AUTHOR_DATE=${input.date}`, `GIT_COMMITTER_DATE=${input.date}`] } : {},
        );
        const bundle = await exportBundle(sandboxes, input.sandbox, input.baseCommit, input.branch);
        if (!bundle) {
          return { commit: input.baseCommit, changed: false, diffstat: '', changeHash: changeHash(input.branch, '') };
        }
        const change = await inspectBundle({
          mirror: mirrorOf(mirrorsDir, input.repoUrl),
          bundle,
          branch: input.branch,
          base: input.baseCommit,
        });
        const diff = input.sessionId ? await artifacts.put(input.sessionId, 'change.diff', change.diff) : undefined;
        return {
          commit: change.commit,
          changed: true,
          diffstat: change.diffstat,
          changeHash: changeHash(input.branch, change.diff),
          ...(diff ? { diff } : {}),
        };
      } catch (err) {
        permanent(err);
      }
    },

    /**
     * Removes one of the session's sandboxes; already gone counts as done.
     * The session's own teardown also drops its checkpoint; a lost sandbox
     * being replaced (`replaced`) keeps it for the replacement.
     */
    async destroySandbox(input: {
      sessionId: string;
      generation?: number;
      replaced?: boolean;
    }): Promise<{ removed: boolean }> {
      const name = sandboxName(input.sessionId, input.generation);
      const removed = await sandboxes.destroy(name);
      await rm(egressDir(name), { recursive: true, force: true });
      if (!input.replaced) await deps.checkpoints.remove(input.sessionId);
      log.info({ sessionId: input.sessionId, sandboxId: name, host: hostId, removed }, 'sandbox destroyed');
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: input.replaced ? `teardown/${name}` : 'teardown',
        kind: 'teardown',
        actor: 'drydock',
        data: { sandbox: name, removed, ...(input.replaced ? { replaced: true } : {}) },
      });
      return { removed };
    },
  };
}

/** Fetches the repo into the worker's mirror; a refused credential is permanent, the rest retry. */
export async function syncMirror(deps: Pick<ActivityDeps, 'mirrorsDir' | 'github'>, url: string): Promise<string> {
  try {
    return await updateMirror(deps.mirrorsDir, url, await gitCredentials(deps.github, url));
  } catch (err) {
    if (err instanceof GitError && err.isAuthFailure) {
      throw ApplicationFailure.nonRetryable(
        `the remote refused the worker's credentials: ${err.message}`,
        ErrorType.RepoUnavailable,
      );
    }
    if (err instanceof GitError) throw ApplicationFailure.retryable(err.message, ErrorType.RepoUnavailable);
    throw err;
  }
}

/** The cold path: the repo at `commit`, with history, copied into /workspace. */
export async function copyWorkingTree(
  deps: Pick<ActivityDeps, 'sandboxes'>,
  sandbox: string,
  mirror: string,
  commit: string,
): Promise<void> {
  const { tar, cleanup } = await workingTreeTar(mirror, commit, 1000);
  try {
    await deps.sandboxes.copyIn(sandbox, tar, '/workspace');
  } finally {
    await cleanup();
  }
}

/** The newest ready snapshot of a repo on this host whose image is still here. */
async function newestSnapshot(
  deps: Pick<ActivityDeps, 'snapshots' | 'sandboxes' | 'hostId' | 'log'>,
  repo: string,
): Promise<SnapshotBuildRow | undefined> {
  for (const row of await deps.snapshots.ready(repo, deps.hostId)) {
    if (await deps.sandboxes.image(row.image!)) return row;
    deps.log.warn({ image: row.image, repo }, 'snapshot image missing from this host; marking it removed');
    await deps.snapshots.markRemoved(row.id);
  }
  return undefined;
}

/**
 * Brings a sandbox started from a snapshot at `from` to `to`: the commits in
 * between arrive as a git bundle on stdin (the sandbox has no network), then
 * a checkout that keeps what setup left in ignored files (node_modules, builds).
 */
async function catchUp(
  deps: Pick<ActivityDeps, 'sandboxes'>,
  sandbox: string,
  mirror: string,
  from: string,
  to: string,
): Promise<void> {
  const has = await deps.sandboxes.exec(sandbox, ['git', 'cat-file', '-e', `${to}^{commit}`]);
  if (has.exitCode !== 0) {
    const bundle = await catchUpBundle(mirror, from, to);
    await deps.sandboxes.run(
      sandbox,
      [
        'sh',
        '-c',
        'set -e; f=.git/drydock-catch-up.bundle; cat > "$f"; git fetch --quiet "$f" "$1:$1"; rm -f "$f"; git update-ref -d "$1"',
        'catch-up',
        CATCH_UP_REF,
      ],
      { stdin: bundle },
    );
  }
  await deps.sandboxes.run(sandbox, ['git', 'checkout', '--quiet', '--force', '--detach', to]);
}

/**
 * Whether the session must run setup before the agent: the repo is
 * registered and there is no snapshot (cold path; a build is started for
 * next time), or its setup inputs changed since the snapshot.
 */
async function setupPlan(
  deps: Pick<ActivityDeps, 'snapshots' | 'requestSnapshotBuild' | 'log'>,
  repo: string,
  mirror: string,
  commit: string,
  snapshot: SnapshotBuildRow | undefined,
): Promise<SetupPlan | undefined> {
  const reg = await deps.snapshots.repo(repo);
  if (!reg) return undefined;
  const inputs = await setupInputs(mirror, commit);
  const command = setupCommandOf(reg, inputs);
  if (!command) return undefined;
  const plan = { command, timeoutMs: reg.setupTimeoutMs, egress: reg.egress };
  if (!snapshot) {
    const started = await deps.requestSnapshotBuild(repo);
    deps.log.info({ repo, started }, 'no snapshot yet: cold start, snapshot build requested');
    return { ...plan, reason: 'no snapshot yet' };
  }
  if (setupHash(command, inputs) === snapshot.setupHash) return undefined;
  const before = await setupInputs(mirror, snapshot.commit!).catch(() => ({}));
  const changed = changedInputs(before, inputs);
  return {
    ...plan,
    reason: `changed since the snapshot: ${changed.length ? changed.join(', ') : 'the setup command'}`,
  };
}
