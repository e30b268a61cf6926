/**
 * bench/desktop: from opening a sandbox's desktop to its first frame (issue 48
 * item 3), median of RUNS runs, beside the floor, with no browser (the click
 * to the first frame in a real Chromium is printed by test/e2e/desktop.test.ts):
 *   floor      by hand in the same image: `docker run` a container in the
 *              sandbox's network namespace, `docker exec` Xvnc, then a VNC
 *              client through `docker exec -i socat` reads its first
 *              FramebufferUpdate
 *   drydock    startDesktop (sandbox/desktop.ts: the hardened companion, Xvnc
 *              and the person's Chromium) and the same client through
 *              DockerProvider.attach, as serve bridges it
 *   memory     the desktop companion's memory a few seconds after its first frame
 *
 *   npx tsx bench/desktop.ts          RUNS=3
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { desktopContainerName, startDesktop, VNC_BRIDGE, VNC_SOCKET } from '../sandbox/desktop';
import { DockerProvider } from '../sandbox/docker/provider';
import { LABELS } from '../sandbox/provider';
import { baseImageTag } from '../sandbox-images/base-image';
import { ensureDesktopImage } from '../sandbox-images/desktop-image';
import { benchMain } from './stack';
import { fmt, markdownTable, median, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(3);

/** Reads exactly `n` bytes from a stream. */
function reader(stream: Readable) {
  let buffered = Buffer.alloc(0);
  let wake: (() => void) | undefined;
  stream.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    wake?.();
  });
  return async (n: number): Promise<Buffer> => {
    while (buffered.length < n) await new Promise<void>((resolve) => (wake = resolve));
    const out = buffered.subarray(0, n);
    buffered = buffered.subarray(n);
    return out;
  };
}

/** A VNC client's way to its first frame (RFB 3.8, security None): answers when the first FramebufferUpdate begins. */
async function firstFrame(out: Readable, into: NodeJS.WritableStream): Promise<void> {
  const read = reader(out);
  await read(12);
  into.write('RFB 003.008\n');
  const types = await read((await read(1))[0]);
  if (!types.includes(1)) throw new Error('the VNC server offers no security type None');
  into.write(Buffer.from([1]));
  if ((await read(4)).readUInt32BE(0) !== 0) throw new Error('the VNC security handshake failed');
  into.write(Buffer.from([1])); // shared
  const init = await read(24);
  await read(init.readUInt32BE(20)); // the desktop's name
  const [w, h] = [init.readUInt16BE(0), init.readUInt16BE(2)];
  const setEncodings = Buffer.from([2, 0, 0, 1, 0, 0, 0, 0]); // Raw only
  const request = Buffer.alloc(10);
  request.writeUInt8(3, 0);
  request.writeUInt16BE(w, 6);
  request.writeUInt16BE(h, 8);
  into.write(Buffer.concat([setEncodings, request]));
  if ((await read(1))[0] !== 0) throw new Error('the first server message is not a FramebufferUpdate');
}

/** The floor, also bench/people's: a container in the sandbox's network namespace, Xvnc by hand, its first frame (ms). */
export async function desktopFloor(sandbox: string, image: string): Promise<number> {
  const name = `${sandbox}-floor`;
  const t = performance.now();
  await run('docker', [
    'run',
    '-d',
    '--name',
    name,
    '--network',
    `container:${sandbox}`,
    '--user',
    '1000:1000',
    image,
    'sleep',
    'infinity',
  ]);
  await run('docker', [
    'exec',
    name,
    'sh',
    '-c',
    `nohup Xvnc :0 -geometry 1280x960 -rfbunixpath ${VNC_SOCKET} -rfbport -1 -SecurityTypes None >/tmp/x.log 2>&1 & ` +
      `for i in $(seq 100); do [ -S ${VNC_SOCKET} ] && exit 0; sleep 0.1; done; exit 1`,
  ]);
  const client = spawn('docker', ['exec', '-i', name, ...VNC_BRIDGE], { stdio: ['pipe', 'pipe', 'ignore'] });
  await firstFrame(client.stdout, client.stdin);
  const ms = performance.now() - t;
  client.kill();
  await run('docker', ['rm', '-f', name]);
  return ms;
}

async function drydock(provider: DockerProvider, sandbox: string, image: string, egressDir: string) {
  const t = performance.now();
  const name = await startDesktop(provider, sandbox, { image, egressDir });
  const vnc = await provider.attach(name, VNC_BRIDGE);
  await firstFrame(vnc.stdout, vnc.stdin);
  const ms = performance.now() - t;
  await new Promise((r) => setTimeout(r, 5_000));
  const { stdout } = await run('docker', ['stats', '--no-stream', '--format', '{{.MemUsage}}', name]);
  vnc.close();
  await provider.destroy(name);
  return { ms, memory: stdout.trim().split(' / ')[0] };
}

async function main(): Promise<string> {
  const base = process.env.DRYDOCK_BASE_IMAGE ?? (await baseImageTag());
  const image = await ensureDesktopImage(base);
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-bench-desktop-'));
  const provider = new DockerProvider(undefined, path.join(dir, 'storage'));
  const sandbox = `drydock-bench-desktop-${process.pid}`;
  await run('docker', [
    'run',
    '-d',
    '--name',
    sandbox,
    '--network',
    'none',
    '--label',
    `${LABELS.session}=${sandbox}`,
    base,
    'sleep',
    'infinity',
  ]);
  const rows: Record<'floor' | 'drydock', Row> = {
    floor: { name: 'floor: docker run + Xvnc by hand + first frame', ms: [] },
    drydock: { name: 'drydock: startDesktop + attach + first frame', ms: [] },
  };
  const memory: string[] = [];
  try {
    for (let r = 0; r < RUNS; r++) {
      rows.floor.ms.push(await desktopFloor(sandbox, image));
      const d = await drydock(provider, sandbox, image, dir);
      rows.drydock.ms.push(d.ms);
      memory.push(d.memory);
      say(`run ${r + 1}/${RUNS}: floor ${fmt(rows.floor.ms[r])}, drydock ${fmt(d.ms)}, memory ${d.memory}`);
    }
  } finally {
    await run('docker', ['rm', '-f', sandbox, desktopContainerName(sandbox), `${sandbox}-floor`]).catch(
      () => undefined,
    );
  }
  const ratio = median(rows.drydock.ms) / median(rows.floor.ms);
  return [
    timingTable([rows.floor, rows.drydock]),
    '',
    markdownTable(['ratio', 'value'], [['drydock / floor (to the first frame)', `${ratio.toFixed(2)} ×`]], [1]),
    '',
    `The desktop's memory (Xvnc and the person's Chromium), 5 s after its first frame: ${memory.join(', ')}.`,
  ].join('\n');
}

// Run, not imported (bench/people takes its floor).
if (require.main === module) benchMain('bench/desktop', main);
