/**
 * The worker's fetch of dev container features (sandbox/feature-registry.ts,
 * proxiedFetch) goes through the worker's proxy with the extra CAs: Node's own
 * fetch ignores HTTPS_PROXY, so a worker that reaches registries only through
 * a proxy (here: an intercepting one, whose CA is given as
 * DRYDOCK_EXTRA_CA_CERTS) could not fetch a feature. A real CONNECT proxy and a
 * real TLS server with a CA made here, on loopback.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer as createHttpServer, request as httpRequest, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { bypassesProxy, proxiedFetch } from '../../sandbox/feature-registry';

let dir: string;
let registry: Server;
let plain: Server;
let proxy: Server;
/** What the proxy was asked: "CONNECT host:port" (or "GET <absolute URI>"). */
const seen: string[] = [];
const port = (s: Server) => (s.address() as AddressInfo).port;
const listening = (s: Server) => new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));

/** A CA and a certificate for 127.0.0.1 signed by it (openssl, as an intercepting proxy's would be). */
function makeCertificates(at: string) {
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: at, stdio: 'pipe' });
  run(
    ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=test proxy CA'],
    ...['-keyout', 'ca.key', '-out', 'ca.pem'],
  );
  run('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1', '-keyout', 'server.key', '-out', 'server.csr');
  run(
    ...['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2'],
    ...['-out', 'server.pem', '-extfile', 'ext.cnf'],
  );
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-proxy-'));
  execFileSync('sh', ['-c', 'printf "subjectAltName=IP:127.0.0.1\\n" > ext.cnf'], { cwd: dir });
  makeCertificates(dir);
  const tls = { key: await readFile(path.join(dir, 'server.key')), cert: await readFile(path.join(dir, 'server.pem')) };
  registry = createHttpsServer(tls, (req, res) => res.end(`registry: ${req.url}`));
  plain = createHttpServer((req, res) => res.end(`plain: ${req.url}`));
  proxy = createHttpServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const target = new URL(req.url!);
    const out = httpRequest(target, { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode!, up.headers);
      up.pipe(res);
    });
    req.pipe(out);
  });
  proxy.on('connect', (req, socket, head) => {
    seen.push(`CONNECT ${req.url}`);
    const [host, p] = req.url!.split(':');
    const upstream = connect(Number(p), host, () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
  });
  await Promise.all([listening(registry), listening(plain), listening(proxy)]);
});

afterAll(async () => {
  for (const s of [registry, plain, proxy]) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
  await rm(dir, { recursive: true, force: true });
});

beforeEach(() => seen.splice(0));

test('https to a registry goes through HTTPS_PROXY (CONNECT), trusting the extra CA', async () => {
  const fetch = proxiedFetch({
    env: { HTTPS_PROXY: `http://127.0.0.1:${port(proxy)}` },
    extraCaFile: path.join(dir, 'ca.pem'),
  });
  const res = await fetch(`https://127.0.0.1:${port(registry)}/v2/f/manifests/1`);
  expect(await res.text()).toBe('registry: /v2/f/manifests/1');
  expect(seen).toEqual([`CONNECT 127.0.0.1:${port(registry)}`]);
});

test('without the extra CA the intercepted certificate is refused', async () => {
  const fetch = proxiedFetch({ env: { HTTPS_PROXY: `http://127.0.0.1:${port(proxy)}` } });
  await expect(fetch(`https://127.0.0.1:${port(registry)}/v2/`)).rejects.toThrow();
  expect(seen).toEqual([`CONNECT 127.0.0.1:${port(registry)}`]);
});

test('plain http goes through HTTP_PROXY; NO_PROXY names what goes direct', async () => {
  const url = `http://127.0.0.1:${port(plain)}/v2/x`;
  const viaProxy = proxiedFetch({ env: { http_proxy: `http://127.0.0.1:${port(proxy)}` } });
  expect(await (await viaProxy(url)).text()).toBe('plain: /v2/x');
  expect(seen).toEqual([`CONNECT 127.0.0.1:${port(plain)}`]); // undici tunnels plain http too
  seen.splice(0);
  const direct = proxiedFetch({
    env: { http_proxy: `http://127.0.0.1:${port(proxy)}`, NO_PROXY: 'localhost,127.0.0.1' },
  });
  expect(await (await direct(url)).text()).toBe('plain: /v2/x');
  expect(seen).toEqual([]);
});

test('NO_PROXY entries: *, a host, a domain with or without its dot, a port', () => {
  const by = (url: string, entries: string) => bypassesProxy(new URL(url), entries.split(','));
  expect(by('https://ghcr.io/v2/', '*')).toBe(true);
  expect(by('https://ghcr.io/v2/', 'ghcr.io')).toBe(true);
  expect(by('https://pkg.ghcr.io/v2/', '.ghcr.io')).toBe(true);
  expect(by('https://pkg.ghcr.io/v2/', 'ghcr.io')).toBe(true);
  expect(by('https://notghcr.io/v2/', 'ghcr.io')).toBe(false);
  expect(by('https://ghcr.io/v2/', 'ghcr.io:443')).toBe(true);
  expect(by('https://ghcr.io/v2/', 'ghcr.io:8443')).toBe(false);
  expect(by('http://[::1]:5000/v2/', '[::1]:5000')).toBe(true);
});
