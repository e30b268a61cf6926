/**
 * Kubernetes as drydock's sandbox provider: a sandbox is a pod (./pod.ts)
 * on the worker's node, driven through the API server alone (no Docker
 * socket, nothing of the node's runtime): pods created, read, listed and
 * deleted, commands run through the exec subresource (./exec.ts), files
 * copied in as a tar stream to the pod's own tar. Snapshots are archives of
 * /workspace on the node (./snapshot-store.ts). A session's services are
 * containers of its pod (./services.ts). What differs from the
 * Docker provider, and why, is in docs/kubernetes.md.
 */
import path from 'node:path';
import type { Readable } from 'node:stream';
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import type { OutputCap } from '../../platform/output-cap';
import {
  ATTACH_PROMPT,
  ATTACH_SHELL,
  HOME,
  LABELS,
  SandboxDidNotStart,
  SandboxError,
  SandboxNotFound,
  WORKSPACE,
  type CommandOutput,
  type ImageInfo,
  type ImageStore,
  type EnvironmentBuilds,
  type ImageSummary,
  type ProviderCapabilities,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxSpec,
  type StartedCommand,
  type StartOptions,
} from '../provider';
import { ExecCutOff, ExecRefused, openExec, type OpenExec } from './exec';
import { ExecOverStream } from '../commands';
import { saysContainerGone } from '../container-gone';
import { POD_ANNOTATIONS, POD_LABELS, podName, SANDBOX_CONTAINER, sandboxPod, SNAPSHOT_MOUNT } from './pod';
import { imageInfoOf } from './images';
import { withOneLineErrors } from './api-errors';
import { SnapshotStore } from './snapshot-store';
import type { RegistryBuilds } from './builds';
import { KubernetesServices } from './services';
import { notStartedMessage, runningState, warningsOf } from './pod-state';

const GiB = 1024 ** 3;
/** A snapshot's archive on the worker's disk: the most a build's /workspace may hold. */
const SNAPSHOT_CAP: OutputCap = { bytes: 64 * GiB, what: "a snapshot of the build's /workspace" };
/** Written in home once a pod's snapshot is unpacked: a retried create does not unpack it again. */
const RESTORED = `${HOME}/.drydock/snapshot-restored`;
/**
 * GNU tar's options to unpack as the sandbox user into an emptyDir's root
 * (owned by root, mode 0777): the archive's own root entry is skipped, since
 * setting its mode or times would fail (without --no-recursion the exclusion
 * would take everything under it too).
 */
const UNPACK = ['--no-same-owner', '--no-overwrite-dir', '--no-recursion', '--anchored', '--exclude=.'];
/** Names only snapshots have (sandbox/snapshots.ts snapshotImageTag): never an image the cluster could pull. */
const SNAPSHOT_PREFIX = 'drydock-snapshot-';

export interface KubernetesSettings {
  kubeconfig: KubeConfig;
  /** The namespace of the sandboxes' pods. */
  namespace: string;
  /** The node the worker runs on: its sandboxes' host folders (egress socket, helpers, snapshots) are there. */
  node: string;
  /** @default 'IfNotPresent' */
  imagePullPolicy?: 'Always' | 'IfNotPresent' | 'Never';
  /** Folder on the node (the same path here) holding the snapshots. */
  snapshotRoot: string;
  /** How long a pod may take to run, its scheduling and image pull included; then it is deleted. @default 300_000 */
  startTimeoutMs?: number;
  /** Repos' environments built on the worker's Docker engine and pushed where the nodes pull (./builds.ts); none: refused. */
  builds?: RegistryBuilds;
}

function isStatus(err: unknown, code: number): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: number }).code === code;
}

/** Whether the API refused an exec in words that say the pod or its container is not running any more. */
const refusedAsGone = (err: unknown) => err instanceof ExecRefused && saysContainerGone(err.message);

/** Pods as sandboxes: non-root, no capabilities, loopback only, bounded; see ./pod.ts. */
export class KubernetesProvider extends ExecOverStream implements SandboxProvider, ImageStore {
  readonly name = 'kubernetes';
  readonly capabilities: ProviderCapabilities = {
    hostFolders: true,
    buildsImages: false,
    lateCompanions: false,
  };
  /** The node's images: snapshots in its snapshot store, the rest as the node's runtime has them (./images.ts). */
  readonly imageStore: ImageStore = this;
  /** Containers of the sandbox's pod, made with it (SandboxSpec.services): ./services.ts. */
  readonly services: KubernetesServices;
  readonly store: SnapshotStore;
  readonly environmentBuilds?: EnvironmentBuilds;
  private readonly core: CoreV1Api;
  /** Whether a pod of this node was seen to have loopback alone (checked once). */
  private networkChecked = false;

  constructor(readonly settings: KubernetesSettings) {
    super();
    // One-line errors (./api-errors.ts): the client's own are a dump of the body and every header.
    this.core = withOneLineErrors(settings.kubeconfig.makeApiClient(CoreV1Api));
    this.store = new SnapshotStore(settings.snapshotRoot);
    if (settings.builds) this.environmentBuilds = settings.builds;
    this.services = new KubernetesServices({
      core: this.core,
      kubeconfig: settings.kubeconfig,
      namespace: settings.namespace,
      podOf: (sandbox) => this.podOf(sandbox),
    });
  }

  private get namespace(): string {
    return this.settings.namespace;
  }

  /**
   * Creates the sandbox's pod, with its services as containers of it
   * (spec.services: a pod's containers are fixed when it is created, so they
   * cannot join it later as Docker's join a sandbox), and waits until it
   * runs, or finds the pod of that name (a retry). A pod from a snapshot has
   * the snapshot unpacked into its /workspace before this returns.
   */
  async create(spec: SandboxSpec): Promise<{ id: string; created: boolean }> {
    if (spec.companionOf) {
      throw new SandboxError(
        `cannot add ${spec.name} to ${spec.companionOf}: a pod's containers are fixed when it is created`,
        'permanent',
      );
    }
    const snapshot = await this.store.find(spec.image);
    const image = snapshot?.baseImage ?? spec.image;
    const imagePullPolicy = this.settings.imagePullPolicy ?? 'IfNotPresent';
    // A built environment is in the registry alone, pinned by digest: the node pulls it even where tags are never pulled.
    const built = this.settings.builds?.owns(image) && imagePullPolicy === 'Never';
    const body = sandboxPod(
      { ...spec, image },
      {
        namespace: this.namespace,
        node: this.settings.node,
        imagePullPolicy,
        ...(built ? { sandboxPullPolicy: 'IfNotPresent' as const } : {}),
        ...(snapshot ? { snapshot: { id: path.basename(snapshot.dir), dir: snapshot.dir } } : {}),
      },
    );
    const pod = body.metadata!.name!;
    let created = true;
    try {
      await this.core.createNamespacedPod({ namespace: this.namespace, body });
    } catch (err) {
      if (!isStatus(err, 409)) throw err;
      created = false; // the same name: a retry of this provisioning
    }
    await this.untilRunning(spec.name, pod);
    await this.readyInside(spec.name, snapshot !== undefined);
    return { id: pod, created };
  }

  /**
   * Polls the pod until it runs. A pod that cannot start, or that still does
   * not run when its start time is up (never scheduled, or stuck being
   * created), is deleted and why thrown: a pod never waits on for ever, and a
   * retry makes a new one.
   */
  private async untilRunning(name: string, pod: string): Promise<void> {
    const limitMs = this.settings.startTimeoutMs ?? 300_000;
    const deadline = Date.now() + limitMs;
    for (;;) {
      const found = await this.podOf(pod);
      const state = runningState(found);
      if (state.phase === 'running') return;
      if (state.phase === 'gone') throw new SandboxNotFound(name, 'was removed while it started');
      if (state.phase === 'failed') {
        await this.destroy(pod);
        throw new Error(`the pod of ${name} cannot run: ${state.why}`);
      }
      if (Date.now() > deadline) {
        const warnings = await this.warnings(pod);
        await this.destroy(pod);
        const at = { sandbox: name, namespace: this.namespace, node: this.settings.node, limitMs };
        throw new SandboxDidNotStart(notStartedMessage(found, warnings, at));
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The pod's warning events (the scheduler's, the kubelet's); none when events may not be read. */
  private async warnings(pod: string): Promise<string[]> {
    try {
      const events = await this.core.listNamespacedEvent({
        namespace: this.namespace,
        fieldSelector: `involvedObject.kind=Pod,involvedObject.name=${pod}`,
      });
      return warningsOf(events.items);
    } catch {
      return []; // the message says where to look instead
    }
  }

  /**
   * One exec, only when there is something to do: the first pod of this
   * provider shows that pods here have loopback alone (else nothing bounds
   * their network: refused), and a snapshot's archive is unpacked once.
   */
  private async readyInside(name: string, fromSnapshot: boolean): Promise<void> {
    if (this.networkChecked && !fromSnapshot) return;
    const script =
      'set -e\n' +
      'if [ "$1" = 1 ]; then for i in /sys/class/net/*; do [ "${i##*/}" = lo ] || { echo "${i##*/}"; exit 3; }; done; fi\n' +
      'if [ "$2" = 1 ] && [ ! -e "$3" ]; then\n' +
      `  tar -x -f ${SNAPSHOT_MOUNT}/workspace.tar -C ${WORKSPACE} ${UNPACK.join(' ')}\n` +
      '  mkdir -p "${3%/*}" && touch "$3"\nfi';
    const args = [this.networkChecked ? '0' : '1', fromSnapshot ? '1' : '0', RESTORED];
    const result = await this.exec(name, ['sh', '-c', script, 'ready', ...args]);
    if (result.exitCode === 3) {
      await this.destroy(name);
      throw new SandboxError(
        `pods on this cluster get a network interface (${result.stdout.toString().trim()}): drydock's sandboxes ` +
          'must have loopback alone, and it cannot check what a NetworkPolicy would let through (docs/kubernetes.md)',
        'permanent',
      );
    }
    if (result.exitCode !== 0) {
      throw new Error(`preparing the pod of ${name} failed (${result.exitCode}): ${result.stderr.toString().trim()}`);
    }
    this.networkChecked = true;
  }

  private async podOf(nameOrPod: string): Promise<V1Pod | undefined> {
    try {
      return await this.core.readNamespacedPod({ namespace: this.namespace, name: podName(nameOrPod) });
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  async exists(name: string): Promise<boolean> {
    return (await this.podOf(name)) !== undefined;
  }

  async info(name: string): Promise<SandboxInfo | undefined> {
    const pod = await this.podOf(name);
    return pod && infoOf(pod);
  }

  async list(hostId?: string): Promise<SandboxInfo[]> {
    const pods = await this.core.listNamespacedPod({ namespace: this.namespace, labelSelector: POD_LABELS.sandbox });
    const found = pods.items.filter((p) => !p.metadata?.deletionTimestamp).map(infoOf);
    return found.filter((s) => LABELS.session in s.labels && (!hostId || s.labels[LABELS.host] === hostId));
  }

  /** Deletes the pod at once (its processes are killed; nothing in it is kept); false when it was gone. */
  async destroy(nameOrId: string): Promise<boolean> {
    try {
      await this.core.deleteNamespacedPod({
        namespace: this.namespace,
        name: podName(nameOrId),
        gracePeriodSeconds: 0,
      });
      return true;
    } catch (err) {
      if (isStatus(err, 404)) return false;
      throw err;
    }
  }

  /** Whether the pod's sandbox container runs, and still does after `settleMs` (polled). */
  protected async isRunning(name: string, settleMs = 0): Promise<boolean> {
    const deadline = Date.now() + settleMs;
    for (;;) {
      if (runningState(await this.podOf(name)).phase !== 'running') return false;
      if (Date.now() >= deadline) return true;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /**
   * The streaming exec (sandbox/commands.ts writes exec, execToFile, attach
   * and shell over it): the exec subresource (./exec.ts). It takes no
   * environment and its argv is part of the request's URL (which API servers
   * log): extra variables go through stdin to a shell that exports them,
   * never through argv; a TTY's (the attach shell's TERM, HOME and PS1) go
   * in argv, its stdin being the person's.
   */
  async start(name: string, argv: string[], output: CommandOutput, opts: StartOptions = {}): Promise<StartedCommand> {
    const env = opts.env?.length ? opts.env : undefined;
    const throughStdin = env !== undefined && !opts.tty;
    const command = opts.tty && env ? ['env', ...env, ...argv] : throughStdin ? withEnv(argv) : argv;
    let session: OpenExec;
    try {
      session = await openExec(this.settings.kubeconfig, this.target(name), command, output, {
        stdin: opts.stdin === true || throughStdin,
        tty: opts.tty !== undefined,
      });
    } catch (err) {
      if (refusedAsGone(err)) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
    if (throughStdin) {
      session.stdin!.write(envLines(env));
      if (!opts.stdin) session.stdin!.end();
    }
    if (opts.tty) session.resize(opts.tty);
    return {
      stdin: opts.stdin ? session.stdin : undefined,
      exit: session.exit,
      resize: async (size) => session.resize(size),
      close: () => session.close(),
      ref: (busy) => session.ref(busy),
    };
  }

  /** 404: no such pod; 400: its container is not running; cut off: the pod went mid-command. Then the API is asked. */
  protected mayBeGone(err: unknown): boolean {
    return err instanceof ExecCutOff || (err instanceof ExecRefused && [400, 404].includes(err.status));
  }

  private target(name: string) {
    return { namespace: this.namespace, pod: podName(name), container: SANDBOX_CONTAINER };
  }

  /**
   * Extracts a tar stream into a folder of the sandbox with the image's own
   * tar (GNU tar: the sandbox user owns what it unpacks; the folder itself,
   * an emptyDir's root, keeps its owner and mode).
   */
  async copyIn(name: string, tar: Readable, dest: string): Promise<void> {
    await this.copyInByTar(name, tar, dest, UNPACK);
  }

  /**
   * A stored snapshot as an image, or another image as what the API can say
   * of it: nothing (the node's images are not listed through the API, and
   * whether the node has one shows when a pod is made of it). Only drydock's
   * own service images count as on the host; any other is a registry's
   * (`fromRegistry`), held to the allowed registries and a digest (./images.ts).
   */
  async image(ref: string): Promise<ImageInfo | undefined> {
    const stored = await this.store.find(ref);
    if (stored) return { id: stored.id, sizeBytes: stored.sizeBytes, labels: stored.labels, env: [] };
    if (ref.startsWith(SNAPSHOT_PREFIX)) return undefined;
    // An environment this worker built and pushed: its engine still has it, and says what is in it (its PATH, labels).
    const builds = this.settings.builds;
    const built = builds?.owns(ref) ? await builds.engine.image(ref) : undefined;
    return built ? { ...built, fromRegistry: true } : imageInfoOf(ref);
  }

  /**
   * The node's images cannot be looked into from the API: the base image is
   * taken to be glibc's (a musl base image is not supported here). An
   * environment this worker built (an engine's image id) is looked into on
   * its engine.
   */
  async imageHasFile(id: string, file: string): Promise<boolean> {
    const engine = this.settings.builds?.engine;
    if (!engine || !id.startsWith('sha256:')) return false;
    return engine.imageHasFile(id, file).catch(() => false);
  }

  /** The stored snapshots named by any of these references ("name" or "name:tag"). */
  async images(references: string[]): Promise<ImageSummary[]> {
    const matches = (tag: string) => references.some((r) => r === tag || (!r.includes(':') && tag.startsWith(`${r}:`)));
    return (await this.store.list())
      .filter((s) => matches(s.tag))
      .map((s) => ({ id: s.id, tags: [s.tag], createdMs: s.createdMs }));
  }

  async layerImage(): Promise<void> {
    throw new SandboxError(
      "the kubernetes provider builds no images on its nodes: a repo's environment is built on the " +
        "worker's Docker engine and pushed to DRYDOCK_K8S_BUILD_REGISTRY (docs/kubernetes.md)",
      'permanent',
    );
  }

  /** Stores `source`'s /workspace as the snapshot `tag` over `baseImage` (an existing one is returned: a retry). */
  async imageFromWorkspace(
    source: string,
    opts: { baseImage: string; tag: string; labels: Record<string, string> },
  ): Promise<{ id: string; sizeBytes: number }> {
    const stored = await this.store.save(opts, async (file) => {
      const made = await this.execToFile(source, ['tar', '-c', '-f', '-', '-C', WORKSPACE, '.'], file, SNAPSHOT_CAP);
      if (made.exitCode !== 0) {
        throw new Error(
          `archiving ${source}'s ${WORKSPACE} failed (${made.exitCode}): ${made.stderr.toString().trim()}`,
        );
      }
    });
    return { id: stored.id, sizeBytes: stored.sizeBytes };
  }

  /** Nothing to ready: a snapshot is unpacked by each pod made from it. */
  async prepareImage(): Promise<void> {}

  /** Removes a stored snapshot no pod was made from: 'in_use' while one is there. */
  async removeImage(ref: string): Promise<'removed' | 'in_use' | 'gone'> {
    const stored = await this.store.find(ref);
    if (!stored) return 'gone';
    const selector = `${POD_LABELS.snapshot}=${path.basename(stored.dir)}`;
    const users = await this.core.listNamespacedPod({ namespace: this.namespace, labelSelector: selector });
    if (users.items.length > 0) return 'in_use';
    return (await this.store.remove(ref)) ? 'removed' : 'gone';
  }

  /** What a crashed snapshot save or removal left on this node. */
  async reapStorage(graceMs = 10 * 60_000): Promise<string[]> {
    return this.store.reapPartial(graceMs);
  }
}

/** A sandbox pod as the provider lists it. */
function infoOf(pod: V1Pod): SandboxInfo {
  const annotations = pod.metadata?.annotations ?? {};
  const created = pod.metadata?.creationTimestamp;
  return {
    id: pod.metadata!.name!,
    name: annotations[POD_ANNOTATIONS.name] ?? pod.metadata!.name!,
    labels: JSON.parse(annotations[POD_ANNOTATIONS.labels] ?? '{}') as Record<string, string>,
    createdMs: created ? new Date(created).getTime() : 0,
  };
}

/**
 * The environment as lines NAME=value (backslashes and newlines escaped for
 * printf %b) ending in an empty line, sent first on the command's stdin. A
 * shell reads them (a byte at a time: the rest stays the command's stdin) and
 * execs `env NAME=value... argv`: `env`, since names such as
 * npm_config_https-proxy are no shell variables. The values are in that argv
 * only inside the pod, where the command's environment shows them to its
 * user anyway; never in the API request.
 */
function envLines(env: string[]): Buffer {
  const escape = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
  const header = env.map((e) => `${e.slice(0, e.indexOf('='))}=${escape(e.slice(e.indexOf('=') + 1))}\n`).join('');
  return Buffer.from(`${header}\n`);
}

/** argv behind the shell that reads envLines into "$@", moves argv behind them, and execs env. */
function withEnv(argv: string[]): string[] {
  return ['sh', '-c', WITH_ENV, 'sh', ...argv];
}

const WITH_ENV = [
  'n=$#',
  'while IFS= read -r l && [ -n "$l" ]; do v=$(printf \'%bx\' "${l#*=}"); set -- "$@" "${l%%=*}=${v%x}"; done',
  'while [ "$n" -gt 0 ]; do set -- "$@" "$1"; shift; n=$((n - 1)); done',
  'exec env "$@"',
].join('\n');

/** The attach shell's command in the pod: its own TERM, HOME and prompt, then the rc-less shell. */
export function attachShellArgv(term = 'xterm'): string[] {
  return ['env', `TERM=${term}`, `HOME=${HOME}`, `PS1=${ATTACH_PROMPT}`, 'sh', '-c', ATTACH_SHELL];
}
