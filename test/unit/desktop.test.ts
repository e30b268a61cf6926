/**
 * The desktop's parts that need no Docker (sandbox/desktop.ts,
 * workers/routes/desktop.ts): the companion's spec (the sandbox's owner
 * labels, its namespace, its limits), what its display listens on, which
 * noVNC files serve hands out, the idle stop of a desktop nobody watches, and
 * the bridge over a real WebSocket on loopback to a real program (`cat` on
 * pipes standing in for the VNC socket): bytes both ways, text refused,
 * the input rate and the idle time closing it with their reasons.
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import WebSocket, { WebSocketServer } from 'ws';
import {
  bridgeDesktop,
  DESKTOP_LIMITS,
  desktopSpec,
  DesktopRefused,
  SessionDesktops,
  startDesktop,
  START_DESKTOP,
  VNC_BRIDGE,
  VNC_SOCKET,
  xauthority,
  type DesktopEnd,
  type DesktopUse,
} from '../../sandbox/desktop';
import type { AttachedProcess, SandboxProvider } from '../../sandbox/provider';
import { CLOSE, TERMINAL_LIMITS } from '../../sandbox/web-terminal';
import { isNovncFile } from '../../workers/routes/desktop';

test("the companion carries the sandbox's owner labels and the desktop's limits, in its namespace", () => {
  const spec = desktopSpec(
    {
      id: 'c1',
      name: 'drydock-s1',
      createdMs: 0,
      labels: {
        'drydock.session': 's1',
        'drydock.repo': 'acme/x',
        'drydock.host': 'h1',
        'drydock.expires': '2026-12-06T00:00:00Z',
        'drydock.other': 'not copied',
      },
    },
    'drydock-desktop:abc',
    '/data/desktop-no-egress',
  );
  expect(spec).toEqual({
    name: 'drydock-s1-desktop',
    image: 'drydock-desktop:abc',
    labels: {
      'drydock.session': 's1',
      'drydock.repo': 'acme/x',
      'drydock.host': 'h1',
      'drydock.expires': '2026-12-06T00:00:00Z',
      'drydock.desktop': 'true',
    },
    companionOf: 'drydock-s1',
    egressDir: '/data/desktop-no-egress',
    readonlyRoot: true,
    ...DESKTOP_LIMITS,
  });
});

test('the display listens on no TCP port and shares no clipboard; the bridge reaches its Unix socket', () => {
  expect(START_DESKTOP).toMatch(/-rfbport -1 /);
  expect(START_DESKTOP).toMatch(/-nolisten tcp /);
  expect(START_DESKTOP).toMatch(/-rfbunixmode 0600 /);
  for (const off of ['AcceptCutText', 'SendCutText', 'SetPrimary', 'SendPrimary']) {
    expect(START_DESKTOP).toContain(`-${off}=0`);
  }
  expect(VNC_BRIDGE).toEqual(['socat', 'STDIO', `UNIX-CONNECT:${VNC_SOCKET}`]);
});

test('a provider that cannot add a companion to a running sandbox refuses the desktop, saying why', async () => {
  const kubernetes = { name: 'kubernetes', capabilities: { lateCompanions: false } } as SandboxProvider;
  const opening = startDesktop(kubernetes, 'drydock-s1', { image: 'drydock-desktop:abc', egressDir: '/x' });
  await expect(opening).rejects.toThrow(DesktopRefused);
  await expect(opening).rejects.toThrow(/kubernetes provider cannot add the desktop to a running sandbox/);
});

test("serve hands out noVNC's modules only", () => {
  expect(isNovncFile('core/rfb.js')).toBe(true);
  expect(isNovncFile('core/util/events.js')).toBe(true);
  expect(isNovncFile('vendor/pako/lib/zlib/inflate.js')).toBe(true);
  for (const bad of [
    '../package.json',
    'core/../../x.js',
    'core/.hidden.js',
    'docs/API.md',
    'core/rfb.js.map',
    'app/ui.js',
  ]) {
    expect(isNovncFile(bad)).toBe(false);
  }
});

describe('a desktop nobody watches', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  test('stops after the idle time, unless someone came back or a browser check draws on it', async () => {
    const stopped: string[] = [];
    let checking = true;
    const desktops = new SessionDesktops(
      async (s) => void stopped.push(s),
      async () => checking,
      1_000,
    );
    desktops.join('a');
    desktops.join('a');
    desktops.leave('a');
    expect(desktops.count('a')).toBe(1);
    desktops.leave('a');
    await jest.advanceTimersByTimeAsync(500);
    desktops.join('a'); // back within the idle time: kept
    desktops.leave('a');
    await jest.advanceTimersByTimeAsync(1_000);
    expect(stopped).toEqual([]); // a check runs: asked again later
    checking = false;
    await jest.advanceTimersByTimeAsync(1_000);
    expect(stopped).toEqual(['a']);
    desktops.close();
  });
});

/** `cat` on pipes as the VNC connection: what the browser sends comes back. */
function catVnc(): AttachedProcess {
  const child = spawn('cat', [], { stdio: ['pipe', 'pipe', 'ignore'] });
  return {
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: new PassThrough(),
    close: () => child.kill(),
    busy: () => undefined,
  };
}

async function bridged(limits = TERMINAL_LIMITS) {
  const http = createServer();
  const wss = new WebSocketServer({ server: http });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const end = new Promise<{ end: DesktopEnd; use: DesktopUse }>((resolve) =>
    wss.once('connection', (socket) => resolve(bridgeDesktop(socket, catVnc(), { limits }))),
  );
  const client = new WebSocket(`ws://127.0.0.1:${(http.address() as AddressInfo).port}/`);
  await new Promise((resolve, reject) => client.once('open', resolve).once('error', reject));
  const received: Buffer[] = [];
  client.on('message', (data: Buffer) => received.push(data));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    client.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  const stop = async () => {
    client.terminate();
    wss.close();
    await new Promise((resolve) => http.close(resolve));
  };
  return { client, end, closed, received: () => Buffer.concat(received), stop };
}

const until = async (check: () => boolean) => {
  while (!check()) await new Promise((resolve) => setTimeout(resolve, 10));
};

describe('the bridge', () => {
  test('bytes go both ways unchanged and are counted; the socket closing ends it', async () => {
    const t = await bridged();
    try {
      const bytes = Buffer.from([0, 1, 2, 0x1b, 255, 254, 10]);
      t.client.send(bytes);
      t.client.send(Buffer.from('RFB 003.008\n'));
      await until(() => t.received().length >= bytes.length + 12);
      expect(t.received()).toEqual(Buffer.concat([bytes, Buffer.from('RFB 003.008\n')]));
      t.client.close();
      expect(await t.end).toEqual({
        end: 'socket-closed',
        use: { inputBytes: 19, inputMessages: 2, outputBytes: 19 },
      });
    } finally {
      await t.stop();
    }
  });

  test('a text message is refused: the socket carries RFB only', async () => {
    const t = await bridged();
    try {
      t.client.send('{"type":"detach"}');
      expect(await t.closed).toEqual({
        code: CLOSE.policy,
        reason: 'the desktop socket carries binary RFB messages only',
      });
    } finally {
      await t.stop();
    }
  });

  test('input over the rate, and no input for the idle time, close it saying so', async () => {
    const fast = await bridged({ ...TERMINAL_LIMITS, inputBurstBytes: 100, inputBytesPerSecond: 10 });
    try {
      fast.client.send(Buffer.alloc(200));
      expect(await fast.closed).toEqual({ code: CLOSE.policy, reason: 'input over 10 bytes/s' });
    } finally {
      await fast.stop();
    }
    const idle = await bridged({ ...TERMINAL_LIMITS, idleMs: 200 });
    try {
      expect(await idle.closed).toEqual({ code: CLOSE.idle, reason: 'no input for 0 s: closed' });
    } finally {
      await idle.stop();
    }
  });
});

test("the display's X authority: one MIT-MAGIC-COOKIE-1 for display 0 on any host, in Xau's format", () => {
  const cookie = Buffer.alloc(16, 0xab);
  expect(xauthority(cookie).toString('hex')).toBe(
    'ffff' +
      '0000' +
      '0001' +
      Buffer.from('0').toString('hex') +
      '0012' +
      Buffer.from('MIT-MAGIC-COOKIE-1').toString('hex') +
      '0010' +
      'ab'.repeat(16),
  );
  expect(START_DESKTOP).toContain('-auth /tmp/drydock.xauth');
});
