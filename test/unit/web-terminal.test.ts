/**
 * The console terminal's protocol (sandbox/web-terminal.ts) and the route's
 * Origin check: controls, the input rate, the audit batches, the tickets,
 * and the bridge over a real WebSocket on loopback to a real program (`cat`
 * on pipes standing in for the sandbox's TTY): keys in, filtered output out,
 * and the limits closing the socket with their reasons; the sockets of one
 * session, of which only the last to leave (or an explicit Detach) detaches.
 */
import { spawn } from 'node:child_process';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Duplex } from 'node:stream';
import WebSocket, { WebSocketServer } from 'ws';
import type { SandboxShell, TtySize } from '../../sandbox/provider';
import {
  bridgeWebTerminal,
  CLOSE,
  InputBatcher,
  InputRate,
  parseControl,
  SessionTerminals,
  TERMINAL_LIMITS,
  TerminalTickets,
  type BridgeEnd,
  type InputBatch,
} from '../../sandbox/web-terminal';
import { originRefusal } from '../../workers/routes/terminal';

describe('controls', () => {
  test('resize is bounded, detach is itself, anything else names what to send', () => {
    expect(parseControl('{"type":"resize","cols":120,"rows":40}')).toEqual({
      type: 'resize',
      size: { cols: 120, rows: 40 },
    });
    expect(parseControl('{"type":"resize","cols":100000,"rows":-1}')).toEqual({
      type: 'resize',
      size: { cols: 80, rows: 80 },
    });
    expect(parseControl('{"type":"detach"}')).toEqual({ type: 'detach' });
    expect(parseControl('{"type":"exec"}')).toBe('unknown control type "exec": send "resize" or "detach"');
    expect(parseControl('ls\r')).toMatch(/^a text message must be JSON/);
  });
});

describe('the input rate', () => {
  const limits = { inputBytesPerSecond: 1000, inputBurstBytes: 4000, messageCostBytes: 10 };

  test('a burst passes up to its size, then the sustained rate refills it', () => {
    const rate = new InputRate(0, limits);
    expect(rate.take(4000, 0)).toBe(true);
    expect(rate.take(1, 0)).toBe(false);
    expect(rate.take(500, 500)).toBe(true); // half a second: 500 bytes back
    expect(rate.take(600, 500)).toBe(false);
    expect(rate.take(4000, 100_000)).toBe(true); // never more than the burst
    expect(rate.take(1, 100_000)).toBe(false);
  });

  test('tiny messages cost the least a message costs', () => {
    const rate = new InputRate(0, limits);
    let sent = 0;
    while (rate.take(1, 0)) sent++;
    expect(sent).toBe(400);
  });
});

describe('audit batches', () => {
  const limits = { auditBatchMs: 1000, auditBatchBytes: 8 };

  test('a batch closes when full, when its first key is old, or at the flush; every byte in one', () => {
    const batcher = new InputBatcher(limits);
    expect(batcher.push(Buffer.from('ls'), 0)).toBeUndefined();
    expect(batcher.due(999)).toBeUndefined();
    expect(batcher.due(1000)).toMatchObject({ seq: 1, input: 'ls', bytes: 2 });
    expect(batcher.push(Buffer.from('echo '), 2000)).toBeUndefined();
    expect(batcher.push(Buffer.from('hi\r'), 2100)).toMatchObject({
      seq: 2,
      input: 'echo hi\r',
      firstAt: new Date(2000).toISOString(),
      lastAt: new Date(2100).toISOString(),
    });
    expect(batcher.flush()).toBeUndefined();
    batcher.push(Buffer.from('\u0003'), 3000);
    expect(batcher.flush()).toMatchObject({ seq: 3, input: '\u0003', bytes: 1 });
  });
});

describe('tickets', () => {
  test('open only their session, for their person, until they run out', () => {
    const tickets = new TerminalTickets(Buffer.alloc(32, 1), 60_000);
    const ticket = tickets.issue('s-1', 'rita', 1_000);
    expect(tickets.refusal(ticket, 's-1', 'rita', 61_000)).toBeUndefined();
    expect(tickets.refusal(ticket, 's-2', 'rita', 1_000)).toMatch(/not for this session and person/);
    expect(tickets.refusal(ticket, 's-1', 'mallory', 1_000)).toMatch(/not for this session and person/);
    expect(tickets.refusal(ticket, 's-1', 'rita', 61_001)).toBe(
      'the terminal ticket ran out: reload the terminal page',
    );
    expect(tickets.refusal(null, 's-1', 'rita', 1_000)).toMatch(/missing/);
    // Another serve process (another key) does not take it.
    expect(new TerminalTickets().refusal(ticket, 's-1', 'rita', 1_000)).toMatch(/not for this session/);
  });
});

describe('the Origin check', () => {
  const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;

  test("the console's URL or the request's own host; another site or none is refused", () => {
    const console = 'https://drydock.example';
    expect(originRefusal(req({ origin: 'https://drydock.example', host: 'internal:8080' }), console)).toBeUndefined();
    expect(originRefusal(req({ origin: 'http://127.0.0.1:8080', host: '127.0.0.1:8080' }), console)).toBeUndefined();
    expect(originRefusal(req({ origin: 'https://evil.example', host: '127.0.0.1:8080' }), console)).toBe(
      "the Origin https://evil.example is not this console's: open the terminal from the console's own page",
    );
    expect(originRefusal(req({ host: '127.0.0.1:8080' }), console)).toMatch(/needs an Origin header/);
  });
});

/** `cat` on pipes as the shell: what is typed comes back, as a TTY's echo would. */
function catShell(resized: TtySize[]): SandboxShell {
  const child = spawn('cat', [], { stdio: ['pipe', 'pipe', 'ignore'] });
  const stream = Duplex.from({ writable: child.stdin, readable: child.stdout });
  stream.on('close', () => child.kill());
  return {
    stream,
    resize: async (size) => void resized.push(size),
    exitCode: () => new Promise((resolve) => child.on('exit', (code) => resolve(code ?? -1))),
  };
}

/** A WebSocket server on loopback whose one connection is bridged to `cat`; a client connected to it. */
async function bridged(limits = TERMINAL_LIMITS) {
  const http = createServer();
  const wss = new WebSocketServer({ server: http, maxPayload: TERMINAL_LIMITS.maxMessageBytes });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const batches: InputBatch[] = [];
  const resized: TtySize[] = [];
  const end = new Promise<BridgeEnd>((resolve) =>
    wss.once('connection', (socket) =>
      resolve(bridgeWebTerminal(socket, catShell(resized), { audit: async (b) => void batches.push(b), limits })),
    ),
  );
  const client = new WebSocket(`ws://127.0.0.1:${(http.address() as AddressInfo).port}/`);
  await new Promise((resolve, reject) => client.once('open', resolve).once('error', reject));
  let output = '';
  client.on('message', (data: Buffer) => (output += data.toString('utf8')));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    client.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  const stop = async () => {
    client.terminate();
    wss.close();
    await new Promise((resolve) => http.close(resolve));
  };
  return { client, end, closed, batches, resized, output: () => output, stop };
}

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setTimeout(resolve, 10));
}

describe('the bridge', () => {
  test('keys reach the shell, its output comes back without an OSC 52, a detach audits the last batch', async () => {
    const t = await bridged();
    try {
      t.client.send(Buffer.from('echo hi\n'));
      t.client.send(Buffer.from('x\u001b]52;c;ZXZpbA==\u0007y\n'));
      t.client.send(JSON.stringify({ type: 'resize', cols: 100, rows: 30 }));
      await until(() => t.output().includes('y\n'));
      expect(t.output()).toBe('echo hi\nxy\n');
      t.client.send(JSON.stringify({ type: 'detach' }));
      expect(await t.end).toBe('detach');
      expect(t.resized).toEqual([{ cols: 100, rows: 30 }]);
      // Both key messages in one batch (within 2 s and 4 KiB), the escape as typed.
      expect(t.batches.map((b) => b.input)).toEqual(['echo hi\nx\u001b]52;c;ZXZpbA==\u0007y\n']);
    } finally {
      await t.stop();
    }
  });

  test('a socket that closed before the bridge began (while the shell was opened) ends it at once, not at the idle limit', async () => {
    const http = createServer();
    const wss = new WebSocketServer({ server: http });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    try {
      const server = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
      const client = new WebSocket(`ws://127.0.0.1:${(http.address() as AddressInfo).port}/`);
      const socket = await server;
      await new Promise((resolve, reject) => client.once('open', resolve).once('error', reject));
      // The page goes away while the route awaits the sandbox's shell: the close event has fired already.
      client.close();
      await new Promise((resolve) => socket.once('close', resolve));
      const end = bridgeWebTerminal(socket, catShell([]), { audit: async () => undefined });
      const hung = new Promise((resolve) => setTimeout(() => resolve('still bridging'), 2_000).unref());
      expect(await Promise.race([end, hung])).toBe('socket-closed');
    } finally {
      wss.close();
      await new Promise((resolve) => http.close(resolve));
    }
  });

  test('a message over the size limit closes the socket (1009)', async () => {
    const t = await bridged();
    try {
      t.client.send(Buffer.alloc(TERMINAL_LIMITS.maxMessageBytes + 1, 'a'));
      expect((await t.closed).code).toBe(CLOSE.tooBig);
      expect(await t.end).toBe('socket-closed');
    } finally {
      await t.stop();
    }
  });

  test('input over the rate closes the socket (1008) naming the rate; what was typed before is audited', async () => {
    const t = await bridged();
    try {
      for (let i = 0; i < 6; i++) t.client.send(Buffer.alloc(TERMINAL_LIMITS.maxMessageBytes, 'a'));
      expect(await t.closed).toEqual({ code: CLOSE.policy, reason: 'input over 32768 bytes/s' });
      expect(await t.end).toEqual({ closed: CLOSE.policy, reason: 'input over 32768 bytes/s' });
      const audited = t.batches.reduce((sum, b) => sum + b.bytes, 0);
      expect(audited).toBe(TERMINAL_LIMITS.inputBurstBytes); // the four that fitted, every byte of them
    } finally {
      await t.stop();
    }
  });

  test('a control that is not one closes the socket (1008) with what to send', async () => {
    const t = await bridged();
    try {
      t.client.send('rm -rf /');
      expect((await t.closed).reason).toMatch(/^a text message must be JSON/);
    } finally {
      await t.stop();
    }
  });

  test('no input for the idle time detaches (4408), the keys before it audited', async () => {
    const t = await bridged({ ...TERMINAL_LIMITS, idleMs: 1000, auditBatchMs: 100 });
    try {
      t.client.send(Buffer.from('true\n'));
      expect(await t.closed).toEqual({ code: CLOSE.idle, reason: 'no input for 1 s: detached' });
      expect(t.batches.map((b) => b.input)).toEqual(['true\n']);
    } finally {
      await t.stop();
    }
  });
});

describe("a session's terminal sockets (M2)", () => {
  /** The updates as the workflow would see them, in the order they went out. */
  function session() {
    const updates: string[] = [];
    const detach = async (by: string) => void updates.push(`detach ${by}`);
    const attach = (p: ReturnType<SessionTerminals['join']>, by: string) =>
      p.attach(by, async () => void updates.push(`attach ${by}`));
    return { updates, detach, attach };
  }

  test('two tabs: closing one keeps the attach; the last to leave detaches', async () => {
    const terminals = new SessionTerminals();
    const { updates, detach, attach } = session();
    const first = terminals.join('s-1', 'alice');
    await attach(first, 'alice');
    const second = terminals.join('s-1', 'alice');
    await attach(second, 'alice'); // a reconnect
    expect(await first.leave(false, detach)).toBe(false);
    expect(updates).toEqual(['attach alice', 'attach alice']);
    expect(terminals.count('s-1')).toBe(1);
    expect(await second.leave(false, detach)).toBe(true);
    expect(updates).toEqual(['attach alice', 'attach alice', 'detach alice']);
    expect(terminals.count('s-1')).toBe(0);
  });

  test("a reload whose old socket lingers: the old socket's close, after the new one joined, does not detach", async () => {
    const terminals = new SessionTerminals();
    const { updates, detach, attach } = session();
    const old = terminals.join('s-1', 'alice');
    await attach(old, 'alice');
    const fresh = terminals.join('s-1', 'alice'); // counted before its attach is asked for
    const attached = attach(fresh, 'alice');
    expect(await old.leave(false, detach)).toBe(false); // the pings noticed the dropped network
    await attached;
    expect(updates).toEqual(['attach alice', 'attach alice']);
  });

  test("a detach in flight is not overtaken by the next socket's attach", async () => {
    const terminals = new SessionTerminals();
    const updates: string[] = [];
    const first = terminals.join('s-1', 'alice');
    await first.attach('alice', async () => void updates.push('attach'));
    let release!: () => void;
    const slowDetach = () =>
      new Promise<void>((resolve) => (release = resolve)).then(() => void updates.push('detach'));
    const left = first.leave(false, slowDetach);
    await new Promise((resolve) => setImmediate(resolve));
    const next = terminals.join('s-1', 'alice');
    const attached = next.attach('alice', async () => void updates.push('attach'));
    release();
    await Promise.all([left, attached]);
    expect(updates).toEqual(['attach', 'detach', 'attach']);
    // The new attach is the session's now: its socket's leave detaches it.
    expect(await next.leave(false, async () => void updates.push('detach'))).toBe(true);
  });

  test('an explicit detach ends the other sockets and detaches at once; their leaving later sends nothing', async () => {
    const terminals = new SessionTerminals();
    const { updates, detach, attach } = session();
    const [a, b] = [terminals.join('s-1', 'alice'), terminals.join('s-1', 'alice')];
    await attach(a, 'alice');
    await attach(b, 'alice');
    expect(await a.leave(true, detach)).toBe(true);
    expect(b.signal.aborted).toBe(true);
    expect(b.signal.reason).toBe('detached from another terminal of this session');
    expect(await b.leave(false, detach)).toBe(false);
    expect(updates).toEqual(['attach alice', 'attach alice', 'detach alice']);
  });

  test('another person joins the attach under way: no second update; the last of them to leave detaches', async () => {
    const terminals = new SessionTerminals();
    const { updates, detach, attach } = session();
    const alice = terminals.join('s-1', 'alice');
    await attach(alice, 'alice');
    const bob = terminals.join('s-1', 'bob');
    expect(await bob.attach('bob', async () => Promise.reject(new Error('never sent')))).toBeUndefined();
    // Alice's Detach with Bob still in: she leaves, the session stays attached, Bob's socket goes on.
    expect(await alice.leave(true, detach)).toBe(false);
    expect(bob.signal.aborted).toBe(false);
    expect(await bob.leave(false, detach)).toBe(true);
    expect(updates).toEqual(['attach alice', 'detach alice']);
  });

  test('the person attached leaves while another stays: the attach is handed over, the last one detaches as themselves', async () => {
    const terminals = new SessionTerminals();
    const { updates, detach, attach } = session();
    const handOver = async (from: string, to: string) => (updates.push(`hand over ${from} to ${to}`), true);
    const alice = terminals.join('s-1', 'alice');
    await attach(alice, 'alice');
    const bob = terminals.join('s-1', 'bob');
    await attach(bob, 'bob');
    expect(await alice.leave(false, detach, handOver)).toBe(false);
    expect(await bob.leave(false, detach, handOver)).toBe(true);
    expect(updates).toEqual(['attach alice', 'hand over alice to bob', 'detach bob']);
    // A hand-over the workflow refused leaves the attach as it was: the last one detaches it under its name.
    const refused: string[] = [];
    const carol = terminals.join('s-2', 'carol');
    await carol.attach('carol', async () => void refused.push('attach carol'));
    const dan = terminals.join('s-2', 'dan');
    await dan.attach('dan', async () => Promise.reject(new Error('never sent')));
    expect(await carol.leave(false, detach, async () => false)).toBe(false);
    expect(await dan.leave(false, async (by) => void refused.push(`detach ${by}`))).toBe(true);
    expect(refused).toEqual(['attach carol', 'detach carol']);
  });

  test('a refused attach (someone else attached elsewhere) leaves nothing to detach', async () => {
    const terminals = new SessionTerminals();
    const { updates, detach } = session();
    const bob = terminals.join('s-1', 'bob');
    await expect(bob.attach('bob', async () => Promise.reject(new Error('alice is attached')))).rejects.toThrow();
    expect(await bob.leave(false, detach)).toBe(false);
    expect(updates).toEqual([]);
  });

  test('sessions are counted apart; a socket that never attached detaches nothing', async () => {
    const terminals = new SessionTerminals();
    const { updates, detach, attach } = session();
    const one = terminals.join('s-1', 'alice');
    await attach(one, 'alice');
    const other = terminals.join('s-2', 'alice');
    expect(await other.leave(false, detach)).toBe(false);
    expect(await one.leave(false, detach)).toBe(true);
    expect(updates).toEqual(['attach alice', 'detach alice']);
  });
});

describe('the bridge ended from elsewhere', () => {
  test('an abort (another terminal detached) ends the bridge and closes the socket with the reason', async () => {
    const http = createServer();
    const wss = new WebSocketServer({ server: http });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const ending = new AbortController();
    try {
      const end = new Promise<BridgeEnd>((resolve) =>
        wss.once('connection', (socket) =>
          resolve(bridgeWebTerminal(socket, catShell([]), { audit: async () => undefined, signal: ending.signal })),
        ),
      );
      const client = new WebSocket(`ws://127.0.0.1:${(http.address() as AddressInfo).port}/`);
      const closed = new Promise<{ code: number; reason: string }>((resolve) =>
        client.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
      );
      await new Promise((resolve, reject) => client.once('open', resolve).once('error', reject));
      ending.abort('detached from another terminal of this session');
      const reason = 'detached from another terminal of this session';
      expect(await end).toEqual({ closed: CLOSE.normal, reason });
      expect(await closed).toEqual({ code: CLOSE.normal, reason });
    } finally {
      wss.close();
      await new Promise((resolve) => http.close(resolve));
    }
  });
});
