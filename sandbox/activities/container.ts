/** What every drydock container shares: its name, where drydock keeps state inside it, and how its loss fails. */
import { createHash } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../../workflows/api';
import { caEnv, installCaBundle } from '../ca';
import { egressDirOf } from '../egress';
import {
  imageStoreOf,
  LABELS,
  SandboxDidNotStart,
  SandboxError,
  SandboxNotFound,
  type SandboxProvider,
  type ExecResult,
  type SandboxSpec,
  type ServiceContainerSpec,
} from '../provider';
import { sandboxOf, type SandboxHandle, type ShellScript } from '../handle';
import { OutputOverCap } from '../../platform/output-cap';
import type { SandboxDeps } from './deps';
import type { ProvisionInput } from '../contract';
import { EDITOR_MOUNT } from '../editor';

/** What creating a drydock container needs. */
export type ContainerDeps = Pick<
  SandboxDeps,
  'sandboxes' | 'egressRoot' | 'extraCaCerts' | 'runtime' | 'readonlyRoot' | 'hostId' | 'agentClis' | 'editorDir'
>;

/** Where the sandbox keeps per-step state (see sandbox-images/base/drydock-run). */
export const STATE_DIR = '/home/drydock/.drydock';

/** Container name from the session id (and replacement number): the idempotency key of provisioning. */
export function sandboxName(sessionId: string, generation = 0): string {
  const safe = sessionId.replace(/[^A-Za-z0-9_.-]/g, '-').slice(0, 100);
  const name =
    safe === sessionId
      ? `drydock-${safe}`
      : `drydock-${safe}-${createHash('sha256').update(sessionId).digest('hex').slice(0, 8)}`;
  return generation ? `${name}-r${generation}` : name;
}

/** The drydock-owned container that runs a sandbox's browser check in the sandbox's network namespace. */
export function browserContainerName(sandbox: string): string {
  return `${sandbox}-browser`;
}

export interface OwnedContainer {
  name: string;
  image: string;
  /** The session (or snapshot build) it belongs to: teardown and the reaper find it by this label. */
  owner: string;
  repo: string;
  /** After this the reaper may remove it (ISO time). */
  expiresAt: string;
  limits: ProvisionInput['limits'];
  labels?: Record<string, string>;
  /** Host folders mounted read-only and environment variables (sandbox/activities/environment.ts). */
  mounts?: SandboxSpec['mounts'];
  env?: string[];
  /** The sandbox this container is a companion of, in its network namespace (the browser of a check). */
  companionOf?: string;
  /** With companionOf: runs this on the sandbox's own files (SandboxSpec.sharingFiles: the app for the agent). */
  sharingFiles?: SandboxSpec['sharingFiles'];
  /** Its services' containers (SandboxSpec.services: a pod is made with them). */
  services?: ServiceContainerSpec[];
  /** Names of its own that resolve to 127.0.0.1 (SandboxSpec.hostNames). */
  hostNames?: string[];
  /** A command its first process runs before it keeps the sandbox up (SandboxSpec.first; the provider's firstCommand). */
  first?: SandboxSpec['first'];
}

/** What names an owned container's owner, repo, host and expiry: teardown and the reaper find it (and its services) by these. */
export function ownedLabels(hostId: string, spec: Pick<OwnedContainer, 'owner' | 'repo' | 'expiresAt'>) {
  return {
    [LABELS.session]: spec.owner,
    [LABELS.repo]: spec.repo,
    [LABELS.host]: hostId,
    [LABELS.expires]: spec.expiresAt,
  };
}

/**
 * Creates a sandbox or build container (an existing one is reused; true if
 * created): its egress folder, mounted read-only at /run/drydock where a
 * step's egress proxy puts its socket; labels naming owner, repo, host and
 * expiry; and the extra CA bundle when one is configured. `first`: what
 * its first process's command did, when it ran one now.
 */
export async function createOwnedContainer(
  { sandboxes, egressRoot, extraCaCerts, runtime, readonlyRoot, hostId, agentClis, editorDir }: ContainerDeps,
  spec: OwnedContainer,
): Promise<{ created: boolean; first?: ExecResult }> {
  if (!sandboxes.capabilities.hostFolders) {
    throw ApplicationFailure.nonRetryable(
      `${sandboxes.name}: mounts none of the worker's folders, and a session's sandbox needs them (the egress proxy's socket, the agent CLIs, drydock's helpers)`,
      ErrorType.SandboxUnsupported,
    );
  }
  const egressDir = egressDirOf(egressRoot, spec.name);
  await mkdir(egressDir, { recursive: true, mode: 0o755 });
  if (agentClis) await mkdir(agentClis.dir, { recursive: true });
  const { created, first } = await createOrExplain(sandboxes, spec.image, {
    name: spec.name,
    image: spec.image,
    runtime,
    readonlyRoot,
    egressDir,
    agentsDir: agentClis?.dir,
    env: [...(extraCaCerts ? caEnv() : []), ...(spec.env ?? [])],
    ...(spec.mounts || editorDir
      ? { mounts: [...(spec.mounts ?? []), ...(editorDir ? [{ source: editorDir, target: EDITOR_MOUNT }] : [])] }
      : {}),
    ...(spec.companionOf ? { companionOf: spec.companionOf } : {}),
    ...(spec.sharingFiles ? { sharingFiles: spec.sharingFiles } : {}),
    ...(spec.services?.length ? { services: spec.services } : {}),
    ...(spec.hostNames?.length ? { hostNames: spec.hostNames } : {}),
    ...(spec.first && sandboxes.capabilities.firstCommand ? { first: spec.first } : {}),
    labels: { ...ownedLabels(hostId, spec), ...spec.labels },
    ...spec.limits,
  });
  // What an image holds never changes: its id is checked once per worker (an exec saved on every start).
  const imageId = created || extraCaCerts ? (await imageStoreOf(sandboxes).image(spec.image))?.id : undefined;
  const sandbox = sandboxOf(sandboxes, spec.name);
  if (created && !(imageId && IMAGES_WITH_SHELL.has(imageId))) {
    await requireShell(sandbox, spec.image);
    if (imageId) IMAGES_WITH_SHELL.add(imageId);
  }
  if (extraCaCerts) await installCaBundle(sandbox, egressDir, extraCaCerts, imageId);
  return { created, ...(first ? { first } : {}) };
}

/** Image ids whose sandbox had sh (see requireShell). */
const IMAGES_WITH_SHELL = new Set<string>();

/**
 * Creates the container; an image that cannot even keep it running (no sleep,
 * so no sh either) says so, and so does a provider that cannot make it, or
 * whose sandbox never starts (a retry would wait as long again).
 */
async function createOrExplain(sandboxes: SandboxProvider, image: string, spec: SandboxSpec) {
  try {
    return await sandboxes.create(spec);
  } catch (err) {
    if (err instanceof SandboxDidNotStart) {
      throw ApplicationFailure.nonRetryable(`${sandboxes.name}: ${err.message}`, ErrorType.SandboxDidNotStart);
    }
    if (err instanceof SandboxError && err.kind === 'permanent' && !(err instanceof SandboxNotFound)) {
      throw ApplicationFailure.nonRetryable(`${sandboxes.name}: ${err.message}`, ErrorType.SandboxUnsupported);
    }
    if (!isMissingExecutable(err)) throw err;
    await sandboxes.destroy(spec.name);
    throw ApplicationFailure.nonRetryable(
      `the sandbox image ${image} has no sh (nor sleep): drydock needs sh in the sandbox image (it brings its own git)`,
      ErrorType.EnvironmentUnusable,
    );
  }
}

/**
 * The runtime's answer to a command the image does not have (Docker's and
 * Kubernetes' exec alike): not any "no such file" of the runtime's own (a
 * runc whose temp folder was removed says that of its process file).
 */
const isMissingExecutable = (err: unknown) =>
  /executable file not found|exec: "[^"]*": stat [^:]*: no such file or directory/i.test(
    String((err as Error)?.message ?? err),
  );

/**
 * drydock's helpers need sh in the image (git they bring: last on PATH);
 * without it provisioning fails, saying so. Any other failure of the probe (a
 * busy or lost engine) is not the image's: it is thrown as it is, for a retry.
 */
async function requireShell(sandbox: SandboxHandle, image: string): Promise<void> {
  const lacks = (answer?: string) =>
    ApplicationFailure.nonRetryable(
      `the sandbox image ${image} has no sh; drydock needs sh in the sandbox image` +
        (answer ? ` (the runtime answered: ${answer.slice(0, 300)})` : ''),
      ErrorType.EnvironmentUnusable,
    );
  let found;
  try {
    found = await sandbox.commands.script(HAS_GIT);
  } catch (err) {
    if (err instanceof SandboxNotFound || !isMissingExecutable(err)) throw err;
    throw lacks((err as Error).message);
  }
  if (found.exitCode === 127 || found.exitCode === 126) {
    // sh itself never exits so here (the script exits 0 or 1): the runtime could not start it.
    const answer = `${found.stdout.toString()}${found.stderr.toString()}`.trim();
    if (!isMissingExecutable(answer)) throw new Error(`the sandbox's first command did not start: ${answer}`);
    throw lacks(answer);
  }
  if (found.exitCode !== 0) {
    throw ApplicationFailure.nonRetryable(
      `the sandbox image ${image} finds no git on its PATH, not even drydock's own`,
      ErrorType.EnvironmentUnusable,
    );
  }
}

// dash's command -v exits 127 for a missing command: 127 must mean no sh.
const HAS_GIT: ShellScript = { name: 'sh', text: 'command -v git >/dev/null || exit 1' };

/** A sandbox that is gone stays gone: no retry, the workflow replaces it. Other errors pass as they are. */
export function permanent(err: unknown): never {
  if (err instanceof SandboxNotFound) {
    throw ApplicationFailure.nonRetryable(err.message, ErrorType.SandboxNotFound);
  }
  // A retry would meet the same data.
  if (err instanceof OutputOverCap) throw ApplicationFailure.nonRetryable(err.message, ErrorType.OutputTooLarge);
  throw err;
}

/** The activities of a group that work in a session's sandbox, failing permanently (see permanent) when it is gone. */
export function inSandbox<T extends Record<string, (...args: any[]) => Promise<unknown>>>(group: T): T {
  return Object.fromEntries(
    Object.entries(group).map(([name, fn]) => [name, (...args: unknown[]) => fn(...args).catch(permanent)]),
  ) as T;
}

/**
 * Kills every process of the sandbox user but the container's init (pid 1),
 * the `sleep infinity` that keeps the container up (pid 1's child that
 * started first) and itself, until none is left. `kill -1` would take the
 * keeper too, and root in the sandbox has no CAP_KILL, so the sandbox user
 * does it. Builtins only (read, kill): it works when no fork is possible.
 */
const END_STRAY_PROCESSES: ShellScript = {
  name: 'sh',
  text: `
keep= first=
for d in /proc/[0-9]*; do
  read -r s < "$d/stat" 2>/dev/null || continue
  set -- \${s##*) }
  [ "$2" = 1 ] || continue
  if [ -z "$first" ] || [ "\${20}" -lt "$first" ]; then first=\${20} keep=\${d#/proc/}; fi
done
round=0
while [ $round -lt 200 ]; do
  # A killed process with much memory takes a while to go: later rounds wait a little (when a fork is possible).
  [ $round -lt 20 ] || sleep 0.1 2>/dev/null
  left=0
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    case $p in 1|$$|$keep) continue ;; esac
    read -r s < "$d/stat" 2>/dev/null || continue
    set -- \${s##*) }
    [ "$1" = Z ] && continue
    kill -KILL "$p" 2>/dev/null && left=1
  done
  [ $left = 0 ] && exit 0
  round=$((round + 1))
done
echo "processes of the sandbox user still running after 200 rounds of kill" >&2
exit 1`,
};

/**
 * Ends whatever a step left running (a setsid daemon, a background job), so
 * nothing of one step can act during the next or during verification, read
 * a later step's secrets from /proc, or hold the egress forwarder's port.
 */
export async function endStrayProcesses(sandbox: SandboxHandle): Promise<void> {
  const result = await sandbox.commands.script(END_STRAY_PROCESSES);
  if (result.exitCode !== 0) {
    throw new Error(`could not end the processes a step left in ${sandbox.name}: ${result.stderr.toString().trim()}`);
  }
}
