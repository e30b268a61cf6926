import { createHash } from 'node:crypto';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import type { EgressRule, ScriptStep } from '../workflows/input';
import { recordEvent } from './audit';
import type { ActivityDeps } from './deps';
import { GitError, inspectBundle, mirrorOf, resolveCommit, updateMirror, workingTreeTar } from '../lib/git';
import { gitCredentials } from '../lib/github';
import { LABELS, SandboxNotFound } from '../lib/sandbox';
import { reportProgress } from './heartbeat';

/** Where the sandbox keeps per-step state (see sandbox-images/base/drydock-run). */
export const STATE_DIR = '/home/drydock/.drydock';
const TAIL_CHARS = 2_000;
/** How often a running step's output is copied out and heartbeated. */
const STREAM_INTERVAL_MS = 2_000;

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
}

export interface StepInput {
  sandbox: string;
  sessionId: string;
  /** Unique per session and step ("step-1", "verify"): a retry finds the earlier run by it. */
  key: string;
  step: ScriptStep;
  timeoutMs: number;
  /**
   * Hosts the step may reach through the egress proxy (an agent CLI's model
   * API). Default none: the sandbox has no network.
   */
  egress?: EgressRule[];
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
  /** Artifact reference of the whole diff, for the review console. */
  diff?: string;
}

/** A step as the audit trail shows it. */
function describeCommand(step: ScriptStep): string {
  if ('run' in step) return step.run;
  if ('write' in step) return `write ${step.write.path}`;
  return `apply a patch of ${step.patch.split('\n').length} lines`;
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

export function createSandboxActivities({
  sandboxes,
  artifacts,
  mirrorsDir,
  hostId,
  hostQueue,
  baseImage,
  github,
  audit,
  log,
}: ActivityDeps) {
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
      await artifacts.append(sessionId, name, chunk.stdout);
      last = tail(last + chunk.stdout.toString(), TAIL_CHARS);
      reportProgress({ outputTail: last, bytes: copied });
    }
    return finished;
  }

  /** Runs one script step (see runStep). */
  async function runStepOnce(input: StepInput): Promise<StepResult> {
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
        return { exitCode: result.exitCode, timedOut: false, outputTail: tail(output) };
      }
      const dir = `${STATE_DIR}/steps/${input.key}`;
      const seconds = String(Math.max(1, Math.ceil(input.timeoutMs / 1000)));
      const running = sandboxes.exec(sandbox, ['drydock-run', dir, seconds, step.run], {
        signal: Context.current().cancellationSignal,
      });
      const run = await streamOutput(input.sessionId, sandbox, `${dir}/output`, `${input.key}.log`, running);
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
  }

  return {
    /** Creates the session's sandbox (or finds it after a retry) with the repo at the requested ref. */
    async provisionSandbox(input: ProvisionInput): Promise<Sandbox> {
      const name = sandboxName(input.sessionId);
      let mirror: string;
      let baseCommit: string;
      try {
        mirror = await updateMirror(mirrorsDir, input.repo.url, await gitCredentials(github, input.repo.url));
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
      try {
        baseCommit = await resolveCommit(mirror, input.repo.ref);
      } catch (err) {
        throw ApplicationFailure.nonRetryable((err as Error).message, ErrorType.RepoUnavailable);
      }
      const { created } = await sandboxes.create({
        name,
        image: baseImage,
        labels: {
          [LABELS.session]: input.sessionId,
          [LABELS.repo]: input.repo.url,
          [LABELS.host]: hostId,
          [LABELS.expires]: input.expiresAt,
        },
        ...input.limits,
      });
      const ready = await sandboxes.exec(name, ['test', '-f', `${STATE_DIR}/provisioned`]);
      if (ready.exitCode !== 0) {
        const { tar, cleanup } = await workingTreeTar(mirror, baseCommit, 1000);
        try {
          await sandboxes.copyIn(name, tar, '/workspace');
        } finally {
          await cleanup();
        }
        await sandboxes.run(name, [
          'sh',
          '-c',
          `git config --global user.name drydock && git config --global user.email drydock@localhost && ` +
            `git config --global --add safe.directory /workspace && mkdir -p ${STATE_DIR} && touch ${STATE_DIR}/provisioned`,
        ]);
      }
      log.info({ sessionId: input.sessionId, sandboxId: name, host: hostId, created }, 'sandbox ready');
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: 'provision',
        kind: 'sandbox.provisioned',
        actor: 'drydock',
        data: { sandbox: name, image: baseImage, repo: input.repo.url, commit: baseCommit, limits: input.limits },
      });
      return { name, host: hostId, hostQueue, image: baseImage, baseCommit };
    },

    /**
     * Runs one script step; a retry waits for (or reads) the run already made,
     * never runs it twice. Recorded in the audit trail once.
     */
    async runStep(input: StepInput): Promise<StepResult> {
      const started = Date.now();
      const result = await runStepOnce(input);
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

    /** Removes the session's sandbox; already gone counts as done. */
    async destroySandbox(input: { sessionId: string }): Promise<{ removed: boolean }> {
      const name = sandboxName(input.sessionId);
      const removed = await sandboxes.destroy(name);
      log.info({ sessionId: input.sessionId, sandboxId: name, host: hostId, removed }, 'sandbox destroyed');
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: 'teardown',
        kind: 'teardown',
        actor: 'drydock',
        data: { sandbox: name, removed },
      });
      return { removed };
    },
  };
}
