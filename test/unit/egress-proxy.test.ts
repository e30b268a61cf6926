/**
 * The egress proxy's bounds, with real sockets: its unix socket as a sandbox's
 * forwarder reaches it, and a TCP server on loopback as the allowed upstream.
 * Every wait is a bounded loop.
 */
import { mkdtemp } from 'node:fs/promises';
import { request } from 'node:http';
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { openEgressProxy, type EgressProxy, type EgressProxyOptions } from '../../sandbox/egress';
import { createLogger } from '../../platform/log';
import { egressRefusals, workerMetrics } from '../../platform/metrics';

let socketPath: string;
let proxy: EgressProxy | undefined;
let upstream: Server | undefined;
const clients: Socket[] = [];

beforeEach(async () => {
  socketPath = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-egress-')), 'egress.sock');
});
afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  await proxy?.close();
  proxy = undefined;
  await new Promise((resolve) => (upstream ? upstream.close(resolve) : resolve(undefined)));
  upstream = undefined;
});

const open = (options: Partial<EgressProxyOptions>) =>
  openEgressProxy({ socketPath, sessionId: 'bounds', rules: [], log: createLogger('silent'), ...options });

/** Waits until `done()` holds, polling every 20 ms, at most `ms`. */
async function until(done: () => boolean, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; !done() && Date.now() < end;) await new Promise((r) => setTimeout(r, 20));
  return done();
}

/** A connection to the proxy that is open until the proxy closes it. */
function connection(): { socket: Socket; closed: () => boolean } {
  let closed = false;
  const socket = createConnection(socketPath);
  socket.on('error', () => undefined);
  socket.on('close', () => (closed = true));
  clients.push(socket);
  return { socket, closed: () => closed };
}

test('connections past maxConnections are closed: a slowloris holds at most the cap', async () => {
  proxy = await open({ maxConnections: 8 });
  const held = Array.from({ length: 60 }, connection);
  expect(await until(() => held.filter((c) => !c.closed()).length <= 8, 3_000)).toBe(true);
  // Whatever was held, once it lets go the proxy serves again.
  for (const c of held) c.socket.destroy();
  const answer = await new Promise<number | undefined>((resolve) =>
    request({ socketPath, path: 'http://example.com/', method: 'GET' }, (res) => {
      res.resume();
      resolve(res.statusCode);
    })
      .on('error', () => resolve(undefined))
      .end(),
  );
  expect(answer).toBe(403);
});

test('a tunnel with no bytes either way for idleTimeoutMs is cut; one in use is not', async () => {
  upstream = createServer((s) => s.on('data', (d) => s.write(d)).on('error', () => undefined));
  await new Promise<void>((resolve) => upstream!.listen(0, '127.0.0.1', resolve));
  const port = (upstream.address() as AddressInfo).port;
  proxy = await open({ rules: [{ host: '127.0.0.1', port }], idleTimeoutMs: 300 });

  const tunnel = async () => {
    const c = connection();
    c.socket.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
    const head = await new Promise<string>((resolve) => c.socket.once('data', (d) => resolve(d.toString())));
    expect(head).toMatch(/^HTTP\/1.1 200/);
    return c;
  };
  const busy = await tunnel();
  const idle = await tunnel();
  let echoed = '';
  busy.socket.on('data', (d) => (echoed += d.toString()));
  for (let i = 0; i < 8; i++) {
    busy.socket.write('.');
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(busy.closed()).toBe(false);
  expect(echoed).toBe('........');
  expect(await until(idle.closed, 3_000)).toBe(true);
  expect(await until(busy.closed, 3_000)).toBe(true);
});

test('the request log keeps maxRecords records and counts the rest', async () => {
  proxy = await open({ maxRecords: 10 });
  for (let i = 0; i < 120; i++) {
    await new Promise<void>((resolve, reject) =>
      request({ socketPath, path: `http://refused-${i}.example/`, method: 'GET' }, (res) => {
        res.resume();
        res.on('end', resolve);
      })
        .on('error', reject)
        .end(),
    );
  }
  expect(proxy.records).toHaveLength(10);
  expect(proxy.records[0].host).toBe('refused-0.example');
  expect(proxy.counts).toEqual({ allowed: 0, refused: 120, dropped: 110 });
});

test('each refusal counts in drydock_egress_refusals_total', async () => {
  const before = (await egressRefusals.get()).values[0]?.value ?? 0;
  proxy = await open({});
  const statuses = await Promise.all(
    [1, 2, 3].map(
      () =>
        new Promise<number | undefined>((resolve) =>
          request({ socketPath, path: 'http://example.com/', method: 'GET' }, (res) => {
            res.resume();
            resolve(res.statusCode);
          }).end(),
        ),
    ),
  );
  expect(statuses).toEqual([403, 403, 403]);
  expect((await egressRefusals.get()).values[0]?.value).toBe(before + 3);
  expect(await workerMetrics.getSingleMetricAsString('drydock_egress_refusals_total')).toContain(
    `drydock_egress_refusals_total ${before + 3}`,
  );
});
