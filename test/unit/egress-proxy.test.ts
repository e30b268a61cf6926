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
import { openEgressProxy, refusedTargets, type EgressProxy, type EgressProxyOptions } from '../../sandbox/egress';
import { IsolatedBuildFailed } from '../../sandbox/builder';
import { buildFailure } from '../../sandbox/repo-image';
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

test("a build's failure names what the proxy refused and the setting that allows it (brianc/node-postgres's apt 403)", async () => {
  proxy = await open({ rules: [{ host: 'deb.debian.org' }] });
  const get = (url: string) =>
    new Promise<number | undefined>((resolve) =>
      request({ socketPath, path: url, method: 'GET' }, (res) => {
        res.resume();
        resolve(res.statusCode);
      })
        .on('error', () => resolve(undefined))
        .end(),
    );
  // As apt in the builder asks: twice for the same host, then another one.
  for (const url of ['http://archive.debian.org/debian/dists/stretch/InRelease', 'http://archive.debian.org/x']) {
    expect(await get(url)).toBe(403);
  }
  expect(await get('http://dl.yarnpkg.com/debian/pubkey.gpg')).toBe(403);
  expect(refusedTargets(proxy.records)).toEqual(['archive.debian.org:80', 'dl.yarnpkg.com:80']);

  const failed = new IsolatedBuildFailed(
    'the build failed (exit code 100)',
    'E: … 403  Forbidden [IP: 127.0.0.1 3128]\n',
    false,
    refusedTargets(proxy.records),
  );
  expect(buildFailure('.devcontainer/devcontainer.json', failed)).toBe(
    '.devcontainer/devcontainer.json: the build failed (exit code 100); the egress proxy refused archive.debian.org:80, dl.yarnpkg.com:80 ' +
      "(a build reaches the package registries and the repo's --allow rules: 'drydock repo add <url> --allow <host>' adds one); " +
      'its output ends:\nE: … 403  Forbidden [IP: 127.0.0.1 3128]',
  );
  // Nothing refused: the message is the builder's alone.
  expect(buildFailure('Dockerfile', new IsolatedBuildFailed('the build failed (exit code 1)', 'boom'))).toBe(
    'Dockerfile: the build failed (exit code 1); its output ends:\nboom',
  );
});
