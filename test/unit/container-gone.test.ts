/**
 * sandbox/container-gone.ts over the runtimes' real messages: what Docker
 * (runc, containerd, gVisor) and Kubernetes (the API server, the kubelet,
 * containerd's CRI) answer to an exec in a container that is not running any
 * more, and what they answer to a command that is merely missing or not
 * executable in a container that runs (which must not read as gone).
 */
import { execFoundContainerGone, messageOf, saysContainerGone } from '../../sandbox/container-gone';

/** Messages that mean the container is not running any more, as the runtimes wrote them. */
const GONE: [string, string][] = [
  [
    'runc 1.1+, an exec as the container is killed (issue 45)',
    'OCI runtime exec failed: exec failed: unable to start container process: error executing setns process: exit status 1: unknown',
  ],
  [
    'runc 1.0',
    'OCI runtime exec failed: exec failed: container_linux.go:380: starting container process caused: process_linux.go:130: executing setns process caused: exit status 1: unknown',
  ],
  [
    'runc 0.1 under Docker 19.03',
    'OCI runtime exec failed: exec failed: container_linux.go:346: starting container process caused "process_linux.go:101: executing setns process caused \\"exit status 1\\"": unknown',
  ],
  ['runc’s nsenter, its init gone', 'nsenter: failed to open /proc/48213/ns/ipc: No such file or directory'],
  ['runc on a stopped container', 'OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown'],
  ["containerd's shim on a stopped task", 'cannot exec in a stopped state: unknown'],
  ['runc of Docker 1.12', 'oci runtime error: exec failed: cannot exec a container that has run and stopped'],
  ["gVisor's runsc", 'OCI runtime exec failed: cannot execute in container "4f1c0d9e2b7a" in state Stopped: unknown'],
  [
    "Docker's 409 through dockerode",
    '(HTTP code 409) container stopped/paused - Container 3f2c7d1e9a0b is not running ',
  ],
  ["Docker's 404 through dockerode", '(HTTP code 404) no such container - No such container: drydock-s-1a2b '],
  ['the docker CLI', 'Error response from daemon: No such container: drydock-s-1a2b'],
  [
    "containerd's CRI, an exited container",
    'rpc error: code = Unknown desc = failed to exec in container: container is in CONTAINER_EXITED state',
  ],
  [
    "containerd's CRI, its task gone",
    'rpc error: code = NotFound desc = failed to exec in container: failed to load task: no running task found: task 9a1b not found: not found',
  ],
  [
    "containerd's CRI, the exec as the container is killed",
    'Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "e3b0c442": OCI runtime exec failed: exec failed: unable to start container process: error executing setns process: exit status 1: unknown',
  ],
  [
    "the kubelet's refused upgrade (HTTP 400 through ExecRefused)",
    'exec refused (HTTP 400): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unable to upgrade connection: container not found (\\"sandbox\\")","reason":"BadRequest","code":400}',
  ],
  [
    "the API server's 404 (through ExecRefused)",
    'exec refused (HTTP 404): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"drydock-s-1a2b\\" not found","reason":"NotFound","details":{"name":"drydock-s-1a2b","kind":"pods"},"code":404}',
  ],
];

/** Messages of a container that runs: the command's fault, or another trouble of the runtime. */
const NOT_GONE: [string, string][] = [
  [
    'a missing command (runc)',
    'OCI runtime exec failed: exec failed: unable to start container process: exec: "jq": executable file not found in $PATH: unknown',
  ],
  [
    'a missing file (runc)',
    'OCI runtime exec failed: exec failed: unable to start container process: exec: "/x/run": stat /x/run: no such file or directory: unknown',
  ],
  [
    'not executable (runc)',
    'OCI runtime exec failed: exec failed: unable to start container process: exec: "./build.sh": permission denied: unknown',
  ],
  [
    'a paused container',
    '(HTTP code 409) container stopped/paused - Container 3f2c7d1e9a0b is paused, unpause the container before exec ',
  ],
  ['a busy engine', '(HTTP code 500) server error - context deadline exceeded '],
  [
    'a pty trouble (runc 1.1.3)',
    'OCI runtime exec failed: exec failed: unable to start container process: open /dev/pts/0: operation not permitted: unknown',
  ],
  ['a shell', 'sh: 1: foo: not found'],
];

describe('saysContainerGone', () => {
  test.each(GONE)('%s: gone', (_, message) => {
    expect(saysContainerGone(message)).toBe(true);
  });
  test.each(NOT_GONE)('%s: not gone', (_, message) => {
    expect(saysContainerGone(message)).toBe(false);
  });
});

describe('execFoundContainerGone', () => {
  const setns = GONE[0][1];

  test("Docker's answer: exit 126 with the runtime's reason on stdout", () => {
    expect(execFoundContainerGone({ exitCode: 126, stdout: `${setns}\r\n`, stderr: '' })).toBe(true);
  });

  test("Kubernetes' answer: exit 126 or 127 with the status on stderr", () => {
    for (const [exitCode, stderr] of [
      [126, `${GONE[13][1]}\n`],
      [127, 'unable to upgrade connection: container not found ("sandbox")\n'],
    ] as const) {
      expect(execFoundContainerGone({ exitCode, stdout: Buffer.alloc(0), stderr: Buffer.from(stderr) })).toBe(true);
    }
  });

  test('a missing or non-executable command in a running container is the command’s', () => {
    for (const [, message] of NOT_GONE.slice(0, 3)) {
      expect(execFoundContainerGone({ exitCode: 127, stdout: `${message}\r\n`, stderr: '' })).toBe(false);
    }
  });

  test('any other exit code is the command’s, whatever it printed', () => {
    for (const exitCode of [0, 1, 2, 125, 128, 137]) {
      expect(execFoundContainerGone({ exitCode, stdout: setns, stderr: '' })).toBe(false);
    }
  });

  test('a command that ran and printed more than the one line is the command’s', () => {
    const printed = `building…\nNo such container: db\n`;
    expect(execFoundContainerGone({ exitCode: 127, stdout: '', stderr: printed })).toBe(false);
    expect(execFoundContainerGone({ exitCode: 126, stdout: 'x'.repeat(5_000), stderr: setns })).toBe(false);
  });
});

test("messageOf reads dockerode's error and the daemon's JSON message", () => {
  const err = Object.assign(new Error('(HTTP code 409) container stopped/paused - '), {
    statusCode: 409,
    json: { message: 'Container 3f2c7d1e9a0b is not running' },
  });
  expect(saysContainerGone(messageOf(err))).toBe(true);
  expect(messageOf('plain')).toBe('plain');
});
