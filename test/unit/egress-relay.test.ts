/**
 * The tunnels of the egress path under a real client's load, with real
 * sockets: the proxy (sandbox/egress.ts) on its unix socket, the sandbox's
 * forwarder (sandbox-images/base/drydock-egress) run by node on the host, and
 * TCP servers on loopback as upstreams. Every wait is bounded.
 */
import { spawn } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { createConnection, createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { cachedLookup, openEgressProxy, type EgressProxy } from '../../sandbox/egress';
import { createLogger } from '../../platform/log';

const FORWARDER = path.join(__dirname, '../../sandbox-images/base/drydock-egress');
let socketPath: string;
let proxy: EgressProxy | undefined;
let upstream: Server | undefined;

beforeEach(async () => {
  socketPath = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-relay-')), 'egress.sock');
});
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  await new Promise((resolve) => (upstream ? upstream.close(resolve) : resolve(undefined)));
  upstream = undefined;
});

/** An upstream on loopback and a proxy that allows it; its port. */
async function serve(handler: Parameters<typeof createServer>[1]): Promise<number> {
  upstream = createServer(handler);
  await new Promise<void>((resolve) => upstream!.listen(0, '127.0.0.1', resolve));
  const port = (upstream.address() as AddressInfo).port;
  proxy = await openEgressProxy({
    socketPath,
    sessionId: 'relay',
    rules: [{ host: '127.0.0.1', port }],
    log: createLogger('silent'),
  });
  return port;
}

test('a tunnel delivers every byte its upstream sent before it closed, to a slow reader', async () => {
  const size = 4 * 1024 * 1024;
  // Like a registry answering with Connection: close: the whole body, then FIN at once.
  const port = await serve((s) => s.on('error', () => undefined).end(Buffer.alloc(size, 'x')));
  const client = createConnection(socketPath);
  client.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
  const received = await new Promise<number>((resolve) => {
    let bytes = 0;
    client.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      // A sandbox slower than the registry: the proxy's write buffer toward it fills.
      client.pause();
      setTimeout(() => client.resume(), 2);
    });
    client.on('error', () => resolve(bytes));
    client.on('close', () => resolve(bytes));
    setTimeout(() => resolve(bytes), 20_000).unref();
  });
  expect(received - 'HTTP/1.1 200 Connection Established\r\n\r\n'.length).toBe(size);
}, 30_000);

test('the forwarder relays a burst of 100 tunnels at once, past the proxy cap, each one answered', async () => {
  // Each upstream connection answers after a while, so the tunnels overlap.
  const port = await serve((s) => s.on('error', () => undefined).once('data', (d) => setTimeout(() => s.end(d), 300)));
  const listen = createServer();
  await new Promise<void>((resolve) => listen.listen(0, '127.0.0.1', resolve));
  const forwarderPort = (listen.address() as AddressInfo).port;
  await new Promise((resolve) => listen.close(resolve));
  // npm 9 opens a tunnel per request, all at once: the same, through the forwarder.
  const burst = `
const net = require('node:net');
const one = (i) => new Promise((resolve) => {
  const s = net.connect(${forwarderPort}, '127.0.0.1');
  let got = '';
  s.on('connect', () => s.write('CONNECT 127.0.0.1:${port} HTTP/1.1\\r\\n\\r\\nping' + i));
  s.on('data', (d) => (got += d));
  s.on('error', () => undefined);
  s.on('close', () => resolve(got.endsWith('ping' + i)));
});
Promise.all(Array.from({ length: 100 }, (_, i) => one(i))).then((ok) => console.log('answered', ok.filter(Boolean).length));
`;
  const child = spawn(process.execPath, [
    FORWARDER,
    socketPath,
    String(forwarderPort),
    '--',
    process.execPath,
    '-e',
    burst,
  ]);
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  expect(output.trim()).toBe('answered 100');
  expect(code).toBe(0);
}, 30_000);

test('lookups of one name are shared while one runs and kept for a while; failures are not kept', async () => {
  let calls = 0;
  let fail = true;
  const lookup = cachedLookup(async () => {
    calls++;
    await new Promise((r) => setTimeout(r, 50));
    if (fail) throw new Error('SERVFAIL');
    return ['192.0.2.1'];
  });
  await expect(lookup('registry.example')).rejects.toThrow('SERVFAIL');
  fail = false;
  const answers = await Promise.all(Array.from({ length: 40 }, () => lookup('registry.example')));
  expect(answers.every((a) => a[0] === '192.0.2.1')).toBe(true);
  expect(await lookup('registry.example')).toEqual(['192.0.2.1']);
  expect(calls).toBe(2);
});
