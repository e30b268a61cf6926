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
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { Duplex, PassThrough, Readable, Writable } from 'node:stream';
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { OutputOverCap, type OutputCap } from '../../platform/output-cap';
import {
  ATTACH_PROMPT,
  ATTACH_SHELL,
  HOME,
  LABELS,
  SandboxDidNotStart,
  SandboxError,
  SandboxNotFound,
  STDERR_KEPT,
  STDOUT_CAP,
  WORKSPACE,
  type AttachedProcess,
  type ExecOptions,
  type ExecResult,
  type ImageInfo,
  type ImageSummary,
  type ProviderCapabilities,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxShell,
  type SandboxSpec,
  type TtySize,
} from '../provider';
import { ExecCutOff, ExecRefused, openExec, type ExecOutput, type OpenExec } from './exec';
import { execFoundContainerGone, saysContainerGone } from '../container-gone';
import { POD_ANNOTATIONS, POD_LABELS, podName, SANDBOX_CONTAINER, sandboxPod, SNAPSHOT_MOUNT } from './pod';
import { imageInfoOf } from './images';
import { withOneLineErrors } from './api-errors';
import { SnapshotStore } from './snapshot-store';
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
}

function isStatus(err: unknown, code: number): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: number }).code === code;
}

/** Whether the API refused an exec in words that say the pod or its container is not running any more. */
const refusedAsGone = (err: unknown) => err instanceof ExecRefused && saysContainerGone(err.message);

/** Pods as sandboxes: non-root, no capabilities, loopback only, bounded; see ./pod.ts. */
export class KubernetesProvider implements SandboxProvider {
  readonly name = 'kubernetes';
  readonly capabilities: ProviderCapabilities = {
    snapshots: true,
    buildsImages: false,
    lateCompanions: false,
    diskLimit: false,
    pidsLimit: false,
    services: true,
    serviceData: false,
  };
  /** Containers of the sandbox's pod, made with it (SandboxSpec.services): ./services.ts. */
  readonly services: KubernetesServices;
  readonly store: SnapshotStore;
  private readonly core: CoreV1Api;
  /** Whether a pod of this node was seen to have loopback alone (checked once). */
  private networkChecked = false;

  constructor(readonly settings: KubernetesSettings) {
    // One-line errors (./api-errors.ts): the client's own are a dump of the body and every header.
    this.core = withOneLineErrors(settings.kubeconfig.makeApiClient(CoreV1Api));
    this.store = new SnapshotStore(settings.snapshotRoot);
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
    const body = sandboxPod(
      { ...spec, image },
      {
        namespace: this.namespace,
        node: this.settings.node,
        imagePullPolicy: this.settings.imagePullPolicy ?? 'IfNotPresent',
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
  private async isRunning(name: string, settleMs = 0): Promise<boolean> {
    const deadline = Date.now() + settleMs;
    for (;;) {
      if (runningState(await this.podOf(name)).phase !== 'running') return false;
      if (Date.now() >= deadline) return true;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /**
   * Runs argv as the sandbox user in /workspace. The exec subresource takes
   * no environment and its argv is part of the request's URL (which API
   * servers log): extra variables go through stdin to a shell that exports
   * them, never through argv. Throws SandboxNotFound when the pod is gone or
   * stopped, whenever that is noticed.
   */
  async exec(name: string, argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    return this.checked(name, () => this.execOnce(name, argv, opts), opts.signal);
  }

  async execToFile(
    name: string,
    argv: string[],
    file: string,
    cap: OutputCap,
  ): Promise<{ exitCode: number; bytes: number; stderr: Buffer }> {
    const out = createWriteStream(file);
    const closed = () => new Promise((resolve) => out.end(resolve));
    let result: ExecResult;
    try {
      result = await this.checked(name, () => this.execOnce(name, argv, { stdoutCap: cap }, out));
    } catch (err) {
      await closed();
      await rm(file, { force: true });
      throw err;
    }
    await closed();
    return { exitCode: result.exitCode, bytes: out.bytesWritten, stderr: result.stderr };
  }

  /** One exec, with a pod that is gone or stopped reported as SandboxNotFound (see exec). */
  private async checked(name: string, once: () => Promise<ExecResult>, signal?: AbortSignal): Promise<ExecResult> {
    let result: ExecResult;
    try {
      result = await once();
    } catch (err) {
      if (err instanceof SandboxNotFound || err instanceof OutputOverCap || signal?.aborted) throw err;
      if (refusedAsGone(err)) throw new SandboxNotFound(name, 'stopped');
      // 404: no such pod; 400: its container is not running; cut off: the pod went mid-command.
      const refusedOrCut = err instanceof ExecCutOff || (err instanceof ExecRefused && [400, 404].includes(err.status));
      if (refusedOrCut && !(await this.isRunning(name))) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
    // The runtime could not start the command in a container going away (whatever the pod's status says yet).
    if (execFoundContainerGone(result)) throw new SandboxNotFound(name, 'stopped');
    // A command killed because its pod went (deleted, evicted, its node gone) ends a moment before the pod shows it.
    const killed = result.exitCode === 137;
    if (result.exitCode !== 0 && !(await this.isRunning(name, killed ? 2_000 : 0))) {
      throw new SandboxNotFound(name, 'stopped');
    }
    return result;
  }

  /** One exec: its exit code and output, stdout to `toFile` instead of memory when given, within its cap. */
  private async execOnce(name: string, argv: string[], opts: ExecOptions, toFile?: Writable): Promise<ExecResult> {
    const cap = opts.stdoutCap ?? STDOUT_CAP;
    const sinks = outputSinks(cap, toFile);
    const input = stdinOf(opts);
    const session = await openExec(this.settings.kubeconfig, this.target(name), input.argv(argv), sinks, {
      stdin: input.data !== undefined,
    });
    const onAbort = () => session.close();
    if (opts.signal?.aborted) onAbort();
    opts.signal?.addEventListener('abort', onAbort);
    try {
      if (input.data !== undefined) Readable.from(chunksOf(input.data)).pipe(session.stdin!);
      const exitCode = await Promise.race([session.exit, sinks.overCap]);
      // What arrived before the exit status may still wait for the file.
      await Promise.race([sinks.flushed(), sinks.overCap]);
      return { exitCode, stdout: sinks.stdoutBytes(), stderr: sinks.stderrBytes() };
    } catch (err) {
      session.close();
      if (opts.signal?.aborted) throw opts.signal.reason ?? new Error('aborted');
      throw err;
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }

  private target(name: string) {
    return { namespace: this.namespace, pod: podName(name), container: SANDBOX_CONTAINER };
  }

  /** Starts a long-lived helper with its stdin and stdout open (one exec); stdout and stderr end with it. */
  async attach(name: string, argv: string[]): Promise<AttachedProcess> {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const session = await this.opened(name, () =>
      openExec(this.settings.kubeconfig, this.target(name), argv, { stdout, stderr }, { stdin: true }),
    );
    const ended = () => {
      stdout.end();
      stderr.end();
    };
    session.exit.then(ended, ended);
    return { stdin: session.stdin!, stdout, stderr, close: () => session.close(), busy: (b) => session.ref(b) };
  }

  /**
   * An interactive shell on a TTY as the sandbox user in /workspace (drydock
   * attach); bash when there is one, neither reading a startup file the agent wrote.
   */
  async shell(name: string, tty: TtySize & { term?: string }): Promise<SandboxShell> {
    const output = new PassThrough();
    const argv = attachShellArgv(tty.term);
    const session = await this.opened(name, () =>
      openExec(this.settings.kubeconfig, this.target(name), argv, { stdout: output }, { stdin: true, tty: true }),
    );
    session.resize(tty);
    session.exit.then(
      () => output.end(),
      () => output.end(),
    );
    const stream = Duplex.from({ readable: output, writable: session.stdin! });
    return {
      stream,
      resize: async (size) => session.resize(size),
      exitCode: () => session.exit.catch(() => -1),
    };
  }

  /** An exec's start, with a pod that is gone or stopped as SandboxNotFound. */
  private async opened(name: string, open: () => Promise<OpenExec>): Promise<OpenExec> {
    try {
      return await open();
    } catch (err) {
      const refused = err instanceof ExecRefused && [400, 404].includes(err.status);
      if (refused || refusedAsGone(err)) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
  }

  /**
   * Extracts a tar stream into a folder of the sandbox with the image's own
   * tar (GNU tar: the sandbox user owns what it unpacks; the folder itself,
   * an emptyDir's root, keeps its owner and mode).
   */
  async copyIn(name: string, tar: Readable, dest: string): Promise<void> {
    // Read from now on: a child process's stdout left unread is discarded when the child exits.
    const source = tar.pipe(new PassThrough({ highWaterMark: 1 << 20 }));
    const stderr = new PassThrough();
    const chunks: Buffer[] = [];
    stderr.on('data', (c: Buffer) => chunks.push(c));
    const result = await this.checked(name, async () => {
      const session = await openExec(
        this.settings.kubeconfig,
        this.target(name),
        ['tar', '-x', '-f', '-', '-C', dest, ...UNPACK],
        { stdout: new PassThrough().resume(), stderr },
        { stdin: true },
      );
      source.pipe(session.stdin!);
      return { exitCode: await session.exit, stdout: Buffer.alloc(0), stderr: Buffer.concat(chunks) };
    });
    if (result.exitCode !== 0) {
      throw new Error(
        `unpacking into ${dest} of ${name} failed (${result.exitCode}): ${result.stderr.toString().trim()}`,
      );
    }
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
    return imageInfoOf(ref);
  }

  /**
   * Pods run DRYDOCK_BASE_IMAGE (or a snapshot of it), never an image built
   * here, and the node's images cannot be looked into from the API: the base
   * image is taken to be glibc's (a musl base image is not supported here).
   */
  async imageHasFile(): Promise<boolean> {
    return false;
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
      'the kubernetes provider builds no images: give the repo an environment the cluster can pull ' +
        '(DRYDOCK_BASE_IMAGE), not a dev container or Dockerfile to build',
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
 * The exec's stdin: the caller's, after the extra environment as lines
 * NAME=value (backslashes and newlines escaped for printf %b) ending in an
 * empty line. A shell reads them (a byte at a time: the rest stays the
 * command's stdin) and execs `env NAME=value... argv`: `env`, since names
 * such as npm_config_https-proxy are no shell variables. The values are in
 * that argv only inside the pod, where the command's environment shows them
 * to its user anyway; never in the API request.
 */
function stdinOf(opts: ExecOptions): { data?: Buffer; argv: (argv: string[]) => string[] } {
  const given = opts.stdin === undefined ? undefined : Buffer.from(opts.stdin);
  if (!opts.env?.length) return { data: given, argv: (argv) => argv };
  const escape = (v: string) => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
  const header = opts.env.map((e) => `${e.slice(0, e.indexOf('='))}=${escape(e.slice(e.indexOf('=') + 1))}\n`).join('');
  return {
    data: Buffer.concat([Buffer.from(`${header}\n`), given ?? Buffer.alloc(0)]),
    argv: (argv) => ['sh', '-c', WITH_ENV, 'sh', ...argv],
  };
}

/** Reads the environment lines of stdinOf into "$@" after argv, moves argv behind them, and execs env. */
const WITH_ENV = [
  'n=$#',
  'while IFS= read -r l && [ -n "$l" ]; do v=$(printf \'%bx\' "${l#*=}"); set -- "$@" "${l%%=*}=${v%x}"; done',
  'while [ "$n" -gt 0 ]; do set -- "$@" "$1"; shift; n=$((n - 1)); done',
  'exec env "$@"',
].join('\n');

/** A buffer in pieces of at most 1 MiB, so that a large stdin goes with back-pressure. */
function* chunksOf(data: Buffer): Generator<Buffer> {
  for (let i = 0; i < data.length; i += 1 << 20) yield data.subarray(i, i + (1 << 20));
}

/** Where an exec's output goes: stdout within its cap (to a file or memory), the first STDERR_KEPT of stderr. */
function outputSinks(cap: OutputCap, toFile?: Writable) {
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  let outBytes = 0;
  let errBytes = 0;
  let fail: (err: Error) => void = () => undefined;
  const overCap = new Promise<never>((_resolve, reject) => (fail = reject));
  overCap.catch(() => undefined);
  const sinks: ExecOutput & {
    overCap: Promise<never>;
    flushed(): Promise<unknown>;
    stdoutBytes(): Buffer;
    stderrBytes(): Buffer;
  } = {
    stdout: new Writable({
      write(chunk: Buffer, _encoding, done) {
        outBytes += chunk.length;
        if (outBytes > cap.bytes) {
          fail(new OutputOverCap(cap));
          return done();
        }
        if (!toFile) {
          stdout.push(chunk);
          return done();
        }
        // The disk is slower than the connection: hold the sandbox back rather than buffer here.
        if (toFile.write(chunk)) done();
        else toFile.once('drain', () => done());
      },
    }),
    stderr: new Writable({
      write(chunk: Buffer, _encoding, done) {
        if (errBytes < STDERR_KEPT) stderr.push(chunk.subarray(0, STDERR_KEPT - errBytes));
        errBytes += chunk.length;
        done();
      },
    }),
    overCap,
    flushed: () => new Promise((resolve) => sinks.stdout.end(resolve)),
    stdoutBytes: () => Buffer.concat(stdout),
    stderrBytes: () => {
      const more =
        errBytes > STDERR_KEPT ? [Buffer.from(`\n[${errBytes - STDERR_KEPT} more bytes of stderr not kept]`)] : [];
      return Buffer.concat([...stderr, ...more]);
    },
  };
  return sinks;
}

/** The attach shell's command in the pod: its own TERM, HOME and prompt, then the rc-less shell. */
export function attachShellArgv(term = 'xterm'): string[] {
  return ['env', `TERM=${term}`, `HOME=${HOME}`, `PS1=${ATTACH_PROMPT}`, 'sh', '-c', ATTACH_SHELL];
}
