import { createHash } from 'node:crypto';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import type { ScriptStep } from '../workflows/input';
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
import { LABELS, SandboxNotFound } from '../lib/sandbox';
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

export interface ProvisionInput {
  sessionId: string;
  repo: { url: string; ref?: string };
  limits: { cpus: number; memoryBytes: number; pids: number };
  /** ISO time after which the reaper may remove the sandbox. */
  expiresAt: string;
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
}

export interface StepResult {
  exitCode: number;
  timedOut: boolean;
  outputTail: string;
  artifact?: string;
}

export interface CommitResult {
  commit: string;
  changed: boolean;
  diffstat: string;
  /** sha256 of the target branch and the whole diff: what an approval binds to. */
  changeHash: string;
}

/** Container name from the session id: the idempotency key of provisioning. */
export function sandboxName(sessionId: string): string {
  const safe = sessionId.replace(/[^A-Za-z0-9_.-]/g, '-').slice(0, 100);
  if (safe === sessionId) return `drydock-${safe}`;
  return `drydock-${safe}-${createHash('sha256').update(sessionId).digest('hex').slice(0, 8)}`;
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
  const { sandboxes, artifacts, mirrorsDir, hostId, hostQueue, baseImage, log } = deps;
  return {
    /** Creates the session's sandbox (or finds it after a retry) with the repo at the requested ref. */
    async provisionSandbox(input: ProvisionInput): Promise<Sandbox> {
      const name = sandboxName(input.sessionId);
      const mirror = await syncMirror(deps, input.repo.url);
      let baseCommit: string;
      try {
        baseCommit = await resolveCommit(mirror, input.repo.ref);
      } catch (err) {
        throw ApplicationFailure.nonRetryable((err as Error).message, ErrorType.RepoUnavailable);
      }
      const snapshot = await newestSnapshot(deps, input.repo.url);
      const image = snapshot?.image ?? baseImage;
      const { created } = await sandboxes.create({
        name,
        image,
        labels: {
          [LABELS.session]: input.sessionId,
          [LABELS.repo]: input.repo.url,
          [LABELS.host]: hostId,
          [LABELS.expires]: input.expiresAt,
          ...(snapshot ? { [SANDBOX_SNAPSHOT_LABEL]: snapshot.image! } : {}),
        },
        ...input.limits,
      });
      const ready = await sandboxes.exec(name, ['test', '-f', `${STATE_DIR}/provisioned`]);
      if (ready.exitCode !== 0) {
        if (snapshot) await catchUp(deps, name, mirror, snapshot.commit!, baseCommit);
        else await copyWorkingTree(deps, name, mirror, baseCommit);
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
      log.info(
        { sessionId: input.sessionId, sandboxId: name, host: hostId, created, snapshot: use, setup: setup?.reason },
        'sandbox ready',
      );
      return {
        name,
        host: hostId,
        hostQueue,
        image,
        baseCommit,
        ...(use ? { snapshot: use } : {}),
        ...(setup ? { setup } : {}),
      };
    },

    /** Runs one script step; a retry waits for (or reads) the run already made, never runs it twice. */
    async runStep(input: StepInput): Promise<StepResult> {
      const { sandbox, step } = input;
      try {
        if ('write' in step) {
          const result = await sandboxes.exec(
            sandbox,
            ['sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', 'write', step.write.path],
            { stdin: step.write.content },
          );
          return { exitCode: result.exitCode, timedOut: false, outputTail: tail(result.stderr.toString()) };
        }
        const dir = `${STATE_DIR}/steps/${input.key}`;
        const seconds = String(Math.max(1, Math.ceil(input.timeoutMs / 1000)));
        const run = await sandboxes.exec(sandbox, ['drydock-run', dir, seconds, step.run], {
          signal: Context.current().cancellationSignal,
        });
        const recorded = run.stdout.toString().trim().split('\n').pop() ?? '';
        if (run.exitCode !== 0 || !/^\d+$/.test(recorded)) {
          // The runner itself failed (missing from the image, killed, no room for its state):
          // the step did not run to an exit code, so it cannot count as passed.
          const why = tail(`${run.stderr.toString()}${run.stdout.toString()}`.trim() || `exit ${run.exitCode}`, 500);
          return { exitCode: -1, timedOut: false, outputTail: `drydock-run failed: ${why}` };
        }
        const exitCode = Number(recorded);
        const output = (await sandboxes.exec(sandbox, ['cat', `${dir}/output`])).stdout;
        const artifact = await artifacts.put(input.sessionId, `${input.key}.log`, output);
        return { exitCode, timedOut: exitCode === 124, outputTail: tail(output.toString()), artifact };
      } catch (err) {
        permanent(err);
      }
    },

    /**
     * Commits whatever the agent changed on the session branch (idempotent),
     * then describes the change from a bundle, with the worker's git.
     */
    async commitChanges(input: {
      sandbox: string;
      repoUrl: string;
      branch: string;
      message: string;
      baseCommit: string;
    }): Promise<CommitResult> {
      try {
        await sandboxes.run(input.sandbox, [
          'sh',
          '-c',
          'set -e; git checkout -q -B "$1"; git add -A; git diff --cached --quiet || git commit -q -m "$2"',
          'commit',
          input.branch,
          input.message,
        ]);
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
        return {
          commit: change.commit,
          changed: true,
          diffstat: change.diffstat,
          changeHash: changeHash(input.branch, change.diff),
        };
      } catch (err) {
        permanent(err);
      }
    },

    /** Removes the session's sandbox; already gone counts as done. */
    async destroySandbox(input: { sessionId: string }): Promise<{ removed: boolean }> {
      const name = sandboxName(input.sessionId);
      const removed = await sandboxes.destroy(name);
      log.info({ sessionId: input.sessionId, sandboxId: name, host: hostId, removed }, 'sandbox destroyed');
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
