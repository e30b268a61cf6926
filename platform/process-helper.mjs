/**
 * The process starter of platform/processes.ts: a small Node process that
 * starts the worker's short commands (git, mkfs, mount, tar) for it, so that
 * each fork copies the page tables of this process (about 40 MB) instead of
 * the worker's (hundreds of MB), and off the worker's main thread. Requests
 * and answers travel over the IPC channel; it ends when its parent does.
 */
import { spawn } from 'node:child_process';

process.on('disconnect', () => process.exit(0));

process.on('message', (request) => {
  const { id, file, args, cwd, env, input, maxBuffer } = request;
  let settled = false;
  const answer = (message) => {
    if (settled) return;
    settled = true;
    process.send({ id, ...message });
  };
  let child;
  try {
    child = spawn(file, args, { cwd, env, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  } catch (err) {
    answer({ error: err.message, errno: err.code });
    return;
  }
  const streams = { stdout: [], stderr: [] };
  let size = 0;
  let overflow;
  for (const name of ['stdout', 'stderr']) {
    child[name].on('data', (chunk) => {
      size += chunk.length;
      if (size > maxBuffer) {
        overflow ??= name;
        child.kill('SIGKILL');
        return;
      }
      streams[name].push(chunk);
    });
  }
  child.on('error', (err) => answer({ error: err.message, errno: err.code }));
  child.on('close', (code, signal) =>
    answer({
      code,
      signal,
      overflow,
      stdout: Buffer.concat(streams.stdout),
      stderr: Buffer.concat(streams.stderr),
    }),
  );
  if (input !== undefined) {
    child.stdin.on('error', () => undefined); // a command that exits without reading its input
    child.stdin.end(Buffer.from(input));
  }
});
