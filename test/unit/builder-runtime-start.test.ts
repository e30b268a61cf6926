/**
 * runtimeStartInterrupted (sandbox/builder.ts): which failed builds the isolated builder runs once
 * more. Only a RUN step's container that runc could not start because gVisor failed its exec
 * FIFO's open with EINTR (the real output of a loaded run, 2026-12-07); a step whose own command
 * failed, or any other failure, is the build's answer.
 */
import { runtimeStartInterrupted } from '../../sandbox/builder';

const INTERRUPTED = `STEP 3/10: RUN ["/bin/sh","-c","apt-get update && apt-get install -y --no-install-recommends tree"]
open exec fifo /proc/self/fd/5: interrupted system call
time="2026-12-07T05:06:11Z" level=error msg="cannot start a container that has stopped"
error running container: from /usr/local/bin/drydock-runc starting container: exit status 1
Error: building at STEP "RUN /bin/sh -c apt-get update": while running runtime: exit status 1`;

test.each([
  ['runc could not open its exec FIFO (gVisor, EINTR)', INTERRUPTED, true],
  [
    "the step's own command failed",
    'STEP 3/4: RUN false\nError: building at STEP "RUN false": while running runtime: exit status 1',
    false,
  ],
  [
    'a package not found',
    'E: Unable to locate package nosuch\nError: building at STEP "RUN apt-get install nosuch": exit status 100',
    false,
  ],
  ['another interrupted call, not the FIFO', 'read /dev/stdin: interrupted system call\nexit status 1', false],
])('%s: tried again = %s', (_why, output, again) => {
  expect(runtimeStartInterrupted(output)).toBe(again);
});
