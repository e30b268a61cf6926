/**
 * The irreversible actions of any repository, done by the worker (which holds
 * the credentials) after approval: push drydock's commit of the approved
 * change, run the deploy command. Each is recorded in the audit trail before
 * and after it happens, and idempotent by session. The pull request is
 * GitHub's (github/pull-requests.ts).
 */
import { exec } from 'node:child_process';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import { recordAction, type AuditRow, type AuditTrail } from '../store/audit';
import type { ArtifactStore } from '../store/artifacts';
import type { Logger } from '../platform/log';
import {
  type SandboxProvider,
  commitMessage,
  commitSpec,
  exportArgv,
  secretsInCommit,
  withSandboxBundle,
  permanent,
  tail,
} from '../sandbox';
import type { ChangeSpec } from '../sandbox/contract';
import {
  defaultBranchOf,
  GitError,
  hasWholeCommit,
  mirrorOf,
  pushCommit,
  sealChange,
  updateMirror,
  type GitEnv,
  type GitIdentity,
} from '../repos/git';
import { gitCredentials, type GitCredentialDeps } from '../repos/credentials';
import { redactUrl } from '../workflows/rules/repo-url';
import { describeSecrets } from '../workflows/rules/change-secrets';
import { Redactor } from '../platform/scrub';

/** The approved change to push: drydock's commit, made again from its spec, must be `commit`. */
export interface PushInput extends ChangeSpec {
  sandbox: string;
  commit: string;
  /** The session's round (1, then each follow-up's): each round's push is audited on its own. */
  round?: number;
  author: GitIdentity;
}

/** Push failures a retry cannot change become non-retryable, with the remote's reason. */
function pushFailure(err: unknown, branch: string): never {
  if (err instanceof GitError && err.isAuthFailure) {
    throw ApplicationFailure.nonRetryable(
      `the remote refused the worker's credentials: ${err.message}`,
      ErrorType.PushRejected,
    );
  }
  if (err instanceof GitError && /non-fast-forward|fetch first/.test(err.stderr)) {
    throw ApplicationFailure.nonRetryable(
      `push of ${branch} was rejected: the remote branch has other commits (${err.message})`,
      ErrorType.PushRejected,
    );
  }
  if (err instanceof GitError && /\[remote rejected\]|rejected/.test(err.stderr)) {
    // Protected branch, a hook, missing permissions...: the remote said why.
    throw ApplicationFailure.nonRetryable(
      `the remote refused the push of ${branch}: ${err.message}`,
      ErrorType.PushRejected,
    );
  }
  throw err;
}

/** A push to the repository's default branch, refused (approved or not) unless the operator allows it. */
async function refuseDefaultBranch(mirror: string, branch: string, allowed: boolean): Promise<void> {
  if (allowed || branch !== (await defaultBranchOf(mirror))) return;
  throw ApplicationFailure.nonRetryable(
    `${branch} is the repository's default branch: drydock pushes there only with DRYDOCK_ALLOW_DEFAULT_BRANCH_PUSH=true`,
    ErrorType.PushRejected,
  );
}

/** What any command expects of its environment; nothing here carries a credential. */
const BASIC_ENV = /^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_[A-Z]+|TZ|TMPDIR)$/;

/**
 * The deploy command's environment: an allowlist (the basic variables and
 * the operator's DRYDOCK_DEPLOY_ENV names) of the worker's, plus what drydock
 * tells it. A denylist let DATABASE_URL and model endpoints with keys through.
 */
export function deployEnv(
  worker: NodeJS.ProcessEnv,
  declared: readonly string[],
  target: Record<string, string>,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(worker)) {
    if (value !== undefined && (BASIC_ENV.test(name) || declared.includes(name))) env[name] = value;
  }
  return { ...env, ...target };
}

/**
 * What the deploy command printed, as it may be kept and shown (deploy.json,
 * the session's error, the audit trail): scrubbed of the worker's secrets
 * and of the values of the variables it was given (DRYDOCK_DEPLOY_ENV: a
 * deploy credential echoed by the command was readable by any token holder).
 */
export function deployOutput(
  output: string,
  redactor: Redactor,
  env: Record<string, string>,
  declared: readonly string[],
) {
  return new Redactor(Object.fromEntries(declared.map((name) => [name, env[name]]))).text(redactor.text(output));
}

/** The worker's deploy command, with the target in its environment and none of the worker's credentials. */
function runDeployCommand(command: string, env: Record<string, string>): Promise<{ exitCode: number; output: string }> {
  return new Promise((resolve) =>
    exec(command, { env, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) =>
      resolve({ exitCode: err ? ((err.code as number) ?? 1) : 0, output: stdout + stderr }),
    ),
  );
}

/**
 * The result an earlier attempt of this session's deploy recorded. Without
 * one, that attempt may have run the command (fully or partly): deploy is at
 * most once, so this fails rather than run it again.
 */
async function earlierDeploy(
  audit: AuditTrail,
  sessionId: string,
  intent: AuditRow,
  commit: string,
): Promise<{ exitCode: number; outputTail: string }> {
  const done = (await audit.events(sessionId)).find((row) => row.key === `${sessionId}/deploy/done`);
  if (done) return { exitCode: done.data.exitCode as number, outputTail: (done.data.outputTail as string) ?? '' };
  throw ApplicationFailure.nonRetryable(
    `the deploy may have run: an earlier attempt started the deploy command at ${intent.at} on ${intent.host} ` +
      `and recorded no result (the worker stopped while it ran). drydock deploys at most once, so it does not ` +
      `run it again: check the deployment target for commit ${commit} (and that worker's log), then finish ` +
      `the deploy by hand if it is incomplete.`,
    ErrorType.DeployFailed,
  );
}

/** Makes drydock's commit again from the sandbox's snapshot bundle and pushes it, if it is the approved one. */
/** The sandbox has no snapshot of the change (CHANGE_REF) to make the approved commit from again. */
const noSnapshot = (stderr: string) =>
  ApplicationFailure.nonRetryable(
    `the sandbox has no snapshot of the change to export: ${stderr}`,
    ErrorType.PushRejected,
  );

async function remakeAndPush(
  mirrorsDir: string,
  /** A git bundle file on the worker's disk. */
  bundle: string,
  input: PushInput,
  env: GitEnv,
  push: () => Promise<{ alreadyPushed: boolean }>,
): Promise<{ alreadyPushed: boolean }> {
  // The mirror may lack the parent (a follow-up's, pushed from another host).
  const mirror = await updateMirror(mirrorsDir, input.repoUrl, env);
  return sealChange(mirror, bundle, commitSpec(input, input.author), ({ commit }) => {
    if (commit !== input.commit) {
      throw ApplicationFailure.nonRetryable(
        `the change in the sandbox is not the approved one (commit ${commit}, approved ${input.commit}): nothing pushed`,
        ErrorType.PushRejected,
      );
    }
    return push();
  });
}

/** What publishing needs: the sandbox's change, the mirror and git credentials, the deploy command, the audit trail. */
export interface PublishDeps extends GitCredentialDeps {
  /** The sandbox the approved change is exported from (when this host's mirror lacks it). */
  sandboxes: SandboxProvider;
  /** Where the deploy's output is kept. */
  artifacts: ArtifactStore;
  /** Host-side bare mirrors of repos. */
  mirrorsDir: string;
  /** Worker-side command for the `deploy` action. */
  deployCommand?: string;
  /** Worker variables the deploy command gets besides the basic ones (DRYDOCK_DEPLOY_ENV). @default [] */
  deployEnvNames?: string[];
  /** Whether a push may go to the repository's default branch (DRYDOCK_ALLOW_DEFAULT_BRANCH_PUSH). @default false */
  allowDefaultBranchPush?: boolean;
  audit: AuditTrail;
  redactor: Redactor;
  log: Logger;
}

export function createPublishActivities({
  sandboxes,
  artifacts,
  mirrorsDir,
  deployCommand,
  deployEnvNames = [],
  allowDefaultBranchPush = false,
  audit,
  redactor,
  log,
  ...credentials // github and gitHosts: the worker's, for git
}: PublishDeps) {
  return {
    /**
     * Makes drydock's commit of the sandbox's snapshot again and pushes
     * exactly it from the worker, which holds any credentials; only if it is
     * the approved commit (same tree, parent, author, date, message). Pushing
     * a commit the remote already has is a no-op, so a retry never pushes twice.
     */
    async pushBranch(input: PushInput): Promise<{ commit: string; alreadyPushed: boolean }> {
      const target = { remote: redactUrl(input.repoUrl), branch: input.branch, commit: input.commit };
      const mirror = mirrorOf(mirrorsDir, input.repoUrl);
      // commitChanges made the approved commit in this host's mirror: pushed as it is, it is exactly what was
      // approved (its id names its tree, parent, author, date and message). Otherwise it is made again
      // from the sandbox's snapshot, and pushed only if it comes out the same.
      const made = await hasWholeCommit(mirror, input.commit);
      await recordAction(audit, input.sessionId, 'push', 'intent', target, input.round);
      const env = await gitCredentials(credentials, input.repoUrl);
      try {
        const push = async () => {
          const message = commitMessage(input);
          const secrets = await secretsInCommit(mirror, input.parent, input.commit, message, redactor).catch(permanent);
          if (secrets.length) throw ApplicationFailure.nonRetryable(describeSecrets(secrets), ErrorType.SecretInChange);
          await refuseDefaultBranch(mirror, input.branch, allowDefaultBranchPush);
          return pushCommit({ mirror, url: input.repoUrl, branch: input.branch, commit: input.commit, env });
        };
        const at = { sandbox: input.sandbox, argv: exportArgv(input.baseCommit), failed: noSnapshot };
        const { alreadyPushed } = made
          ? await push()
          : await withSandboxBundle({ sandboxes, mirrorsDir }, at, async (bundle) => {
              if (!bundle) throw noSnapshot('its output is not a git bundle');
              return remakeAndPush(mirrorsDir, bundle, input, env, push);
            });
        log.info({ sessionId: input.sessionId, branch: input.branch, commit: input.commit, alreadyPushed }, 'pushed');
        await recordAction(audit, input.sessionId, 'push', 'done', { ...target, alreadyPushed }, input.round);
        return { commit: input.commit, alreadyPushed };
      } catch (err) {
        pushFailure(err, input.branch);
      }
    },

    /**
     * Runs the worker's deploy command for the pushed commit, at most once per
     * session. The intent is recorded in the audit trail (Postgres, shared by
     * every worker) before the command starts and the result after it ends. A
     * retry that finds another attempt's intent returns that attempt's result
     * if it has one; without one the command may have run (the worker died
     * while it ran), so the retry fails non-retryably instead of deploying again.
     * Its environment is an allowlist (deployEnv): none of the worker's credentials.
     */
    async deploy(input: { sessionId: string; repoUrl: string; branch: string; commit: string }) {
      if (!deployCommand) {
        throw ApplicationFailure.nonRetryable(
          'no deploy command on the worker (DRYDOCK_DEPLOY_COMMAND)',
          ErrorType.DeployFailed,
        );
      }
      const target = {
        repo: redactUrl(input.repoUrl),
        branch: input.branch,
        commit: input.commit,
        command: deployCommand,
      };
      const intent = await recordAction(audit, input.sessionId, 'deploy', 'intent', target);
      const { activityId, attempt } = Context.current().info;
      const ours = intent.activityId === activityId && intent.attempt === attempt;
      let result: { exitCode: number; outputTail: string };
      if (ours) {
        const env = deployEnv(process.env, deployEnvNames, {
          DRYDOCK_REPO_URL: redactUrl(input.repoUrl),
          DRYDOCK_BRANCH: input.branch,
          DRYDOCK_COMMIT: input.commit,
        });
        const run = await runDeployCommand(deployCommand, env);
        const ran = { ...run, output: deployOutput(run.output, redactor, env, deployEnvNames) };
        await artifacts.put(input.sessionId, 'deploy.json', JSON.stringify(ran));
        result = { exitCode: ran.exitCode, outputTail: tail(ran.output) };
        await recordAction(audit, input.sessionId, 'deploy', 'done', { ...target, ...result });
      } else {
        result = await earlierDeploy(audit, input.sessionId, intent, input.commit);
      }
      log.info({ sessionId: input.sessionId, exitCode: result.exitCode, repeated: !ours }, 'deploy');
      if (result.exitCode !== 0) {
        throw ApplicationFailure.nonRetryable(
          `deploy command exited with ${result.exitCode}: ${tail(result.outputTail, 500)}`,
          ErrorType.DeployFailed,
        );
      }
      return result;
    },
  };
}
