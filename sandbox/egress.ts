/**
 * drydock's egress proxy: the only way out of a sandbox (which has no IP
 * network). Inside, `drydock-egress` (sandbox-images/base) listens on
 * 127.0.0.1:EGRESS_PORT and relays each connection over a unix socket,
 * mounted read-only from the host at /run/drydock, to this proxy in the
 * worker. The proxy speaks HTTP proxy semantics (absolute-URI requests for
 * plain http, CONNECT tunnels for https), allows only the step's rules,
 * refuses loopback, private and host addresses unless a rule names that
 * address itself, and logs every request with the session id. Bounded: a
 * cap on open connections, an idle timeout, a capped log (EGRESS_DEFAULTS).
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type Server,
  type ServerResponse,
} from 'node:http';
import { BlockList, connect, isIP, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { chmod, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { createHash } from 'node:crypto';
import type { Logger } from '../platform/log';
import type { EgressRule } from '../workflows/rules/egress';
import { egressRefusals } from '../platform/metrics';

export type { EgressRule } from '../workflows/rules/egress';

/** Where the host's proxy socket appears inside the sandbox. */
export const SANDBOX_EGRESS_DIR = '/run/drydock';
export const SANDBOX_EGRESS_SOCKET = `${SANDBOX_EGRESS_DIR}/egress.sock`;
/** The model gateway's socket (sandbox/model-gateway.ts), beside the egress proxy's. */
export const SANDBOX_GATEWAY_SOCKET = `${SANDBOX_EGRESS_DIR}/model.sock`;
/** The forwarder's port on the sandbox's loopback. */
export const EGRESS_PORT = 3128;

/** Environment of a step with an allowlist: every common client finds the proxy. */
export function proxyEnv(): Record<string, string> {
  const url = `http://127.0.0.1:${EGRESS_PORT}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    npm_config_proxy: url,
    'npm_config_https-proxy': url,
    // The sandbox's own servers (an app under test) stay direct.
    NO_PROXY: 'localhost,127.0.0.1,::1',
    no_proxy: 'localhost,127.0.0.1,::1',
  };
}

/**
 * The host folder mounted at /run/drydock in one sandbox. Short and hashed:
 * a unix socket path may not exceed 107 bytes.
 */
export function egressDirOf(root: string, sandbox: string): string {
  return path.join(root, createHash('sha256').update(sandbox).digest('hex').slice(0, 16));
}

export interface Verdict {
  allowed: boolean;
  reason: string;
  rule?: EgressRule;
}

const WEB_PORTS = [80, 443];

function normalizeHost(host: string): string {
  return host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '');
}

function hostMatches(ruleHost: string, host: string): boolean {
  const pattern = normalizeHost(ruleHost);
  if (pattern.startsWith('*.')) return host.endsWith(pattern.slice(1)) && host.length > pattern.length - 1;
  return pattern === host;
}

/** Which rule allows this request, judged on names alone (before any DNS). */
export function matchRule(rules: EgressRule[], host: string, port: number, method: string): Verdict {
  const target = normalizeHost(host);
  const verb = method.toUpperCase();
  let refusal: string | undefined;
  for (const rule of rules) {
    if (!hostMatches(rule.host, target)) continue;
    if (!(rule.port === undefined ? WEB_PORTS.includes(port) : rule.port === port)) {
      refusal ??= `port ${port} not allowed for ${target}`;
      continue;
    }
    if (rule.methods && !rule.methods.includes(verb as never)) {
      refusal =
        verb === 'CONNECT'
          ? `CONNECT (https) not allowed for ${target}: its rule restricts methods to ${rule.methods.join(', ')}, which a tunnel cannot enforce`
          : `method ${verb} not allowed for ${target} (allowed: ${rule.methods.join(', ')})`;
      continue;
    }
    return { allowed: true, reason: `rule ${rule.host}`, rule };
  }
  return { allowed: false, reason: refusal ?? `${target} is not on the allowlist` };
}

/** Address ranges never reached unless a rule names the address itself. */
const RESTRICTED = (
  [
    ['loopback', '127.0.0.0', 8, 'ipv4'],
    ['unspecified', '0.0.0.0', 8, 'ipv4'],
    ['private', '10.0.0.0', 8, 'ipv4'],
    ['private', '172.16.0.0', 12, 'ipv4'],
    ['private', '192.168.0.0', 16, 'ipv4'],
    ['shared (CGNAT)', '100.64.0.0', 10, 'ipv4'],
    ['link-local', '169.254.0.0', 16, 'ipv4'],
    ['reserved', '192.0.0.0', 24, 'ipv4'],
    ['benchmarking', '198.18.0.0', 15, 'ipv4'],
    ['multicast', '224.0.0.0', 4, 'ipv4'],
    ['reserved', '240.0.0.0', 4, 'ipv4'],
    ['loopback', '::1', 128, 'ipv6'],
    ['unspecified', '::', 128, 'ipv6'],
    ['private', 'fc00::', 7, 'ipv6'],
    ['link-local', 'fe80::', 10, 'ipv6'],
    ['site-local', 'fec0::', 10, 'ipv6'],
    ['multicast', 'ff00::', 8, 'ipv6'],
    ['NAT64 local-use', '64:ff9b:1::', 48, 'ipv6'],
  ] as const
).map(([name, net, prefix, type]) => {
  const list = new BlockList();
  list.addSubnet(net, prefix, type);
  return { name, list, type };
});

/**
 * An address in its one canonical text (WHATWG URL host parsing): IPv4 as a
 * dotted quad whatever the form ("127.1", "0x7f.0.0.1", "2130706433"), IPv6
 * compressed and lower-case with any dotted tail in hex. Undefined for a name.
 */
function canonicalIp(address: string): { ip: string; type: 'ipv4' | 'ipv6' } | undefined {
  // A zone id ("fe80::1%eth0") names an interface, not another address.
  const bare = normalizeHost(address).replace(/%.*$/, '');
  let host: string;
  try {
    host = new URL(`http://${bare.includes(':') ? `[${bare}]` : bare}/`).hostname;
  } catch {
    return undefined;
  }
  if (isIP(host) === 4) return { ip: host, type: 'ipv4' };
  if (host.startsWith('[')) return { ip: host.slice(1, -1), type: 'ipv6' };
  return undefined;
}

/** The eight 16-bit words of a canonical IPv6 address. */
function ipv6Words(ip: string): number[] {
  const [head, tail] = ip.split('::');
  const words = (part: string | undefined) => (part ? part.split(':').map((w) => parseInt(w, 16)) : []);
  const before = words(head);
  const after = words(tail);
  return [...before, ...Array<number>(8 - before.length - after.length).fill(0), ...after];
}

/**
 * The IPv4 address an IPv6 one carries to the IPv4 internet, judged as that:
 * IPv4-mapped (::ffff:0:0/96) and -compatible (::/96), NAT64 (64:ff9b::/96)
 * and 6to4 (2002::/16).
 */
function embeddedIpv4(ip: string): string | undefined {
  const w = ipv6Words(ip);
  const quad = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  const zeros = (from: number, to: number) => w.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && (w[5] === 0xffff || w[5] === 0)) return quad(w[6], w[7]);
  if (w[0] === 0x64 && w[1] === 0xff9b && zeros(2, 6)) return quad(w[6], w[7]);
  if (w[0] === 0x2002) return quad(w[1], w[2]);
  return undefined;
}

/** Why this address may not be reached without an explicit rule, or undefined when it may. */
export function restrictedAddress(address: string): string | undefined {
  const canonical = canonicalIp(address);
  if (!canonical) return isIP(normalizeHost(address)) ? 'an address drydock cannot parse' : undefined;
  const { ip, type } = canonical;
  const range = RESTRICTED.find((r) => r.type === type && r.list.check(ip, type));
  if (range) return range.name;
  const v4 = type === 'ipv6' ? embeddedIpv4(ip) : undefined;
  if (v4) {
    const inner = restrictedAddress(v4);
    if (inner) return inner;
  }
  const own = Object.values(networkInterfaces())
    .flat()
    .some((i) => i && canonicalIp(i.address)?.ip === ip);
  return own ? "this host's own address" : undefined;
}

export type Lookup = (host: string) => Promise<string[]>;
const systemLookup: Lookup = async (host) => (await dnsLookup(host, { all: true })).map((a) => a.address);

/** How long a proxy reuses an answer: a step's burst of tunnels to one registry asks once. */
const LOOKUP_TTL_MS = 30_000;

/**
 * One lookup per name at a time, its answer kept for a while. npm opens a
 * tunnel per request, dozens at once: a lookup each made bursts that this
 * host's resolver dropped, and each dropped query cost its 5 s retry (a
 * 200-package install spent most of its time there). Failures are not kept.
 * Only allowed names are looked up, so the cache is bounded by the allowlist.
 */
export function cachedLookup(lookup: Lookup, ttlMs = LOOKUP_TTL_MS): Lookup {
  const answers = new Map<string, { at: number; addresses: Promise<string[]> }>();
  return (host) => {
    const kept = answers.get(host);
    if (kept && Date.now() - kept.at < ttlMs) return kept.addresses;
    const entry = { at: Date.now(), addresses: lookup(host) };
    answers.set(host, entry);
    entry.addresses.catch(() => answers.get(host) === entry && answers.delete(host));
    return entry.addresses;
  };
}

/**
 * The address to connect to. Resolved once here and connected to by address,
 * so a name cannot resolve to an allowed address when checked and another
 * when used. Any restricted address refuses, unless the rule names it.
 */
export async function resolveTarget(
  host: string,
  rule: EgressRule,
  lookup: Lookup = systemLookup,
): Promise<{ address: string } | { refused: string }> {
  const name = normalizeHost(host);
  let addresses: string[];
  if (isIP(name)) {
    addresses = [name];
  } else {
    try {
      addresses = await lookup(name);
    } catch (err) {
      return { refused: `cannot resolve ${name}: ${(err as Error).message}` };
    }
  }
  if (addresses.length === 0) return { refused: `cannot resolve ${name}` };
  for (const address of addresses) {
    const why = restrictedAddress(address);
    if (why && normalizeHost(rule.host) !== normalizeHost(address)) {
      return { refused: `${name} is ${address}, a ${why} address, which no rule names` };
    }
  }
  return { address: addresses[0] };
}

export interface EgressRecord {
  sessionId: string;
  step?: string;
  method: string;
  host: string;
  port: number;
  allowed: boolean;
  reason: string;
  at: string;
}

export interface EgressProxyOptions {
  /** Host path of the unix socket (its folder is mounted at /run/drydock). */
  socketPath: string;
  sessionId: string;
  /** The step's key, for the log. */
  step?: string;
  rules: EgressRule[];
  log: Logger;
  lookup?: Lookup;
  /**
   * Connections open at once through this proxy (one sandbox step); more are
   * closed as they arrive. @default 64
   */
  maxConnections?: number;
  /**
   * Milliseconds without a byte either way after which a connection (a
   * tunnel, a request, one that never sends its headers) is cut. @default 300_000
   */
  idleTimeoutMs?: number;
  /** Requests kept in `records`; later ones are only counted. @default 1_000 */
  maxRecords?: number;
}

/** What a proxy refused, once each as `host:port`, in the order first refused (for a failure's message). */
export function refusedTargets(records: readonly EgressRecord[]): string[] {
  return [...new Set(records.filter((r) => !r.allowed).map((r) => `${r.host}:${r.port}`))];
}

export const EGRESS_DEFAULTS = { maxConnections: 64, idleTimeoutMs: 300_000, maxRecords: 1_000 } as const;

export interface EgressProxy {
  /** The first `maxRecords` requests, allowed or refused (no paths or headers: they may carry secrets). */
  records: EgressRecord[];
  /** Every request, kept or not. */
  counts: { allowed: number; refused: number; dropped: number };
  /** Stops listening, cuts open tunnels and removes the socket. */
  close(): Promise<void>;
}

/** Headers for the proxy alone, or for one hop only. */
const HOP_HEADERS = ['proxy-connection', 'proxy-authorization', 'connection', 'keep-alive', 'te', 'upgrade'];

function splitHostPort(authority: string): { host: string; port: number } | undefined {
  const m = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(authority);
  return m ? { host: m[1], port: Number(m[2]) } : undefined;
}

/**
 * Relays the bytes of a tunnel both ways, with backpressure (pipe). The end
 * of one side reaches the other as a half-close: `end()` sends what is still
 * buffered, then FIN. Destroying the client as soon as its upstream closed
 * dropped the tail of a response still in the client's write buffer (tens of
 * KB with a fast registry and a slower sandbox): npm saw "ECONNRESET ...
 * aborted". Only an error cuts both at once.
 */
function relay(client: Socket, upstream: Socket): void {
  const cut = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', cut);
  upstream.on('error', cut);
  upstream.pipe(client);
  client.pipe(upstream);
}

/**
 * Listens on a unix socket of a folder a sandbox sees read-only: a socket
 * left by an earlier attempt (a crashed worker) is replaced, and the sandbox
 * user (uid 1000) may connect.
 */
export async function listenForSandbox(server: Server, socketPath: string): Promise<void> {
  await mkdir(path.dirname(socketPath), { recursive: true });
  await rm(socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  await chmod(socketPath, 0o666);
}

/**
 * The proxy's verdicts and their log: decides each request by the step's
 * rules (resolving the host name only when a rule allows it) and keeps its
 * record while there is room; past it, counts only (a flood must not grow
 * the worker).
 */
function egressJudge(opts: EgressProxyOptions) {
  const records: EgressRecord[] = [];
  const counts = { allowed: 0, refused: 0, dropped: 0 };
  const lookup = cachedLookup(opts.lookup ?? systemLookup);
  const maxRecords = opts.maxRecords ?? EGRESS_DEFAULTS.maxRecords;

  function keep(record: EgressRecord): void {
    counts[record.allowed ? 'allowed' : 'refused']++;
    if (!record.allowed) egressRefusals.inc();
    if (records.length < maxRecords) {
      records.push(record);
      opts.log.info(record, record.allowed ? 'egress allowed' : 'egress refused');
      return;
    }
    if (counts.dropped++ === 0)
      opts.log.warn({ sessionId: opts.sessionId, step: opts.step, maxRecords }, 'egress log full');
  }

  /** Decides and logs one request; the address to connect to when allowed. */
  async function judge(method: string, host: string, port: number): Promise<{ address?: string; reason: string }> {
    const verdict = matchRule(opts.rules, host, port, method);
    let address: string | undefined;
    let reason = verdict.reason;
    if (verdict.allowed) {
      const target = await resolveTarget(host, verdict.rule!, lookup);
      if ('address' in target) address = target.address;
      else reason = target.refused;
    }
    keep({
      sessionId: opts.sessionId,
      step: opts.step,
      method,
      host: normalizeHost(host),
      port,
      allowed: address !== undefined,
      reason,
      at: new Date().toISOString(),
    });
    return { address, reason };
  }

  return { records, counts, judge };
}

type Judge = ReturnType<typeof egressJudge>['judge'];

/** A plain http:// request: judged, then forwarded to the allowed address without the hop-by-hop headers. */
function forwardRequest(judge: Judge, opts: EgressProxyOptions, req: IncomingMessage, res: ServerResponse): void {
  (async () => {
    let url: URL;
    try {
      url = new URL(req.url ?? '');
      if (url.protocol !== 'http:') throw new Error('not http');
    } catch {
      res
        .writeHead(400, { 'content-type': 'text/plain' })
        .end('drydock egress: send absolute http:// URLs, or CONNECT for https\n');
      return;
    }
    const port = url.port ? Number(url.port) : 80;
    const { address, reason } = await judge(req.method ?? 'GET', url.hostname, port);
    if (!address) {
      res.writeHead(403, { 'content-type': 'text/plain' }).end(`drydock egress refused: ${reason}\n`);
      req.resume();
      return;
    }
    const headers: OutgoingHttpHeaders = { ...req.headers, host: url.host };
    for (const h of HOP_HEADERS) delete headers[h];
    const upstream = httpRequest(
      { host: address, port, method: req.method, path: `${url.pathname}${url.search}`, headers, setHost: false },
      (answer: IncomingMessage) => {
        const back = { ...answer.headers };
        for (const h of HOP_HEADERS) delete back[h];
        res.writeHead(answer.statusCode ?? 502, back);
        answer.pipe(res);
      },
    );
    upstream.on('error', (err) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`drydock egress: ${err.message}\n`);
    });
    req.pipe(upstream);
  })().catch((err: unknown) => {
    // Never an unhandled rejection in the worker: the request fails, the proxy goes on.
    opts.log.error({ err, sessionId: opts.sessionId, step: opts.step }, 'egress request failed');
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
    res.end('drydock egress: internal error\n');
  });
}

/** A CONNECT tunnel (https): judged, then relayed byte for byte; every socket is tracked for close(). */
function openTunnel(
  judge: Judge,
  opts: EgressProxyOptions,
  conn: { sockets: Set<Socket>; idleTimeoutMs: number },
  req: IncomingMessage,
  client: Socket,
  head: Buffer,
): void {
  const { sockets, idleTimeoutMs } = conn;
  sockets.add(client);
  client.on('error', () => client.destroy());
  client.setTimeout(idleTimeoutMs, () => client.destroy());
  (async () => {
    const target = splitHostPort(req.url ?? '');
    if (!target) {
      client.end('HTTP/1.1 400 Bad Request\r\n\r\n');
      return;
    }
    const { address, reason } = await judge('CONNECT', target.host, target.port);
    if (!address) {
      client.end(`HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\n\r\ndrydock egress refused: ${reason}\n`);
      return;
    }
    if (client.destroyed) return;
    // noDelay: a TLS handshake is many small writes; Nagle would hold each for an ACK.
    const upstream = connect({ port: target.port, host: address, noDelay: true, allowHalfOpen: true });
    sockets.add(upstream);
    upstream.on('close', () => sockets.delete(upstream));
    // The client gone (its end or its idle timeout): nobody is left to read.
    client.on('close', () => upstream.destroy());
    upstream.setTimeout(idleTimeoutMs, () => upstream.destroy());
    upstream.once('error', () => client.end('HTTP/1.1 502 Bad Gateway\r\n\r\n'));
    upstream.once('connect', () => {
      upstream.removeAllListeners('error');
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) upstream.write(head);
      relay(client, upstream);
    });
  })().catch((err: unknown) => {
    // Never an unhandled rejection in the worker: the tunnel fails, the proxy goes on.
    opts.log.error({ err, sessionId: opts.sessionId, step: opts.step }, 'egress tunnel failed');
    client.end('HTTP/1.1 502 Bad Gateway\r\n\r\n');
  });
}

/** Opens the proxy of one step on its unix socket. */
export async function openEgressProxy(opts: EgressProxyOptions): Promise<EgressProxy> {
  const { records, counts, judge } = egressJudge(opts);
  const sockets = new Set<Socket>();
  const maxConnections = opts.maxConnections ?? EGRESS_DEFAULTS.maxConnections;
  const idleTimeoutMs = opts.idleTimeoutMs ?? EGRESS_DEFAULTS.idleTimeoutMs;

  const server = createServer((req, res) => forwardRequest(judge, opts, req, res));
  server.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) =>
    openTunnel(judge, opts, { sockets, idleTimeoutMs }, req, client, head),
  );
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.setTimeout(idleTimeoutMs, () => socket.destroy());
  });
  // Node closes connections past this count as they arrive; tunnels count until they close.
  server.maxConnections = maxConnections;
  server.headersTimeout = Math.min(idleTimeoutMs, 60_000);
  server.requestTimeout = 0; // an upload may be long; idleness is what ends a connection

  await listenForSandbox(server, opts.socketPath);

  return {
    records,
    counts,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      await closed;
      await rm(opts.socketPath, { force: true });
    },
  };
}
