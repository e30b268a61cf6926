/**
 * Dead-sandbox detection, written once for every provider: whether what a
 * container runtime answered to an exec means "this container is not
 * running any more" (killed, stopped, removed, its pod gone). The providers
 * (sandbox/docker/, sandbox/kubernetes/) report such an exec as
 * SandboxNotFound, which the session answers by replacing the sandbox and
 * provisioning by provisioning it again.
 *
 * The runtime's word is taken as it is, without asking the engine whether
 * the container still runs: a container being killed still counts as running
 * for a moment after its init has gone, and an exec in that moment fails to
 * join its namespaces (runc's setns failure, exit 126). Asking would read
 * "running" and leave a CommandExitError that no retry can mend.
 */

/**
 * The runtimes' own words for a container that is not running any more, as
 * Docker (runc, containerd, gVisor's runsc) and Kubernetes (the API server,
 * the kubelet, containerd's CRI) say them. Not "executable file not found" nor
 * "permission denied": those are the command's, in a container that runs.
 */
const GONE_PATTERNS: readonly RegExp[] = [
  // runc could not join the namespaces of an init that is exiting (its /proc/<pid>/ns gone).
  /executing setns process/i,
  /nsenter: failed to open \/proc\/\d+\/ns\//i,
  // runc and containerd's shim on a stopped container.
  /cannot exec in a stopped (container|state)/i,
  /cannot exec a container that has run and stopped/i,
  // gVisor's runsc: "cannot execute in container "<id>" in state Stopped".
  /cannot \w+ (in )?container \\?"[^"\\]*\\?" in state Stopped/i,
  // Docker's daemon: 409 "Container <id> is not running", 404 "No such container: <name>".
  /\bcontainer \S+ is not running\b/i,
  /\bno such container\b/i,
  // containerd's CRI under the kubelet.
  /\bcontainer is in CONTAINER_EXITED state\b/i,
  /\bno running task found\b/i,
  // The kubelet and the API server refusing the exec's upgrade: the container or the pod is gone
  // (quotes escaped when the message is inside a Status's JSON).
  /\bcontainer not found \(\\?"[^"\\]*\\?"\)/i,
  /\bpods? \\?"[^"\\]+\\?" not found\b/i,
];

/** Whether a runtime's message (an engine's error, an exec's refusal) says the container is not running any more. */
export function saysContainerGone(message: string): boolean {
  return GONE_PATTERNS.some((pattern) => pattern.test(message));
}

/** An exec's end as a provider sees it: its exit code and what it wrote. */
export interface ExecEnd {
  exitCode: number;
  stdout: Buffer | string;
  stderr: Buffer | string;
}

/**
 * Whether an exec that ended did not run its command because the container
 * is not running any more: exit 126 or 127 (what Docker and the Kubernetes
 * exec give a command the runtime could not start) with the runtime's reason
 * as its only output, one line (Docker writes it on stdout, Kubernetes'
 * status on stderr). A command's own 126 or 127 (not executable, not found)
 * is not it, nor a command that ran and printed more.
 */
export function execFoundContainerGone(end: ExecEnd): boolean {
  if (end.exitCode !== 126 && end.exitCode !== 127) return false;
  if (end.stdout.length + end.stderr.length > 4_000) return false;
  const said = `${end.stdout.toString()}${end.stderr.toString()}`.trim();
  return !said.includes('\n') && saysContainerGone(said);
}

/** The message of an error thrown by an engine's client (dockerode's carries the daemon's JSON), for saysContainerGone. */
export function messageOf(err: unknown): string {
  if (typeof err !== 'object' || err === null) return String(err);
  const { message, json } = err as { message?: unknown; json?: { message?: unknown } };
  return [message, json?.message].filter((m) => typeof m === 'string').join('\n');
}
