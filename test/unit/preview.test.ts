/**
 * The app's preview (sandbox/preview.ts, workers/routes/preview.ts,
 * workflows/rules/preview.ts): a session's origin and its passes, the
 * headers the app gets, when the app may be started, and the connection
 * itself: http.request over the real `drydock-port` helper (run by Node on
 * pipes, standing in for the sandbox's exec) to a real server on loopback.
 */
import { spawn } from 'node:child_process';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { AttachedProcess, SandboxProvider } from '../../sandbox/provider';
import { cookiesOf } from '../../workers/http';
import {
  appConnection,
  PREVIEW_LIMITS,
  previewLabel,
  previewLabelOf,
  previewOrigin,
  PreviewPasses,
} from '../../sandbox/preview';
import { answerHeaders, appHeaders } from '../../workers/routes/preview';
import { checkPreview } from '../../workflows/rules/preview';

const BASE = 'http://preview.localhost:8080';

describe('origins', () => {
  test("each session has a label of its own under the base's host, any id", () => {
    const a = previewLabel('session-a');
    expect(a).toMatch(/^p[0-9a-f]{24}$/);
    expect(previewLabel('session-b')).not.toBe(a);
    expect(previewOrigin(BASE, 'session-a')).toBe(`http://${a}.preview.localhost:8080`);
    expect(previewLabel('a/b c?é'.repeat(40))).toMatch(/^p[0-9a-f]{24}$/);
  });

  test("a request's Host is a preview origin only under the base, with a label's shape", () => {
    const a = previewLabel('session-a');
    expect(previewLabelOf(`${a}.preview.localhost:8080`, BASE)).toBe(a);
    expect(previewLabelOf(`${a.toUpperCase()}.PREVIEW.localhost`, BASE)).toBe(a);
    expect(previewLabelOf('127.0.0.1:8080', BASE)).toBeUndefined();
    expect(previewLabelOf('preview.localhost:8080', BASE)).toBeUndefined();
    expect(previewLabelOf(`x.${a}.preview.localhost`, BASE)).toBeUndefined();
    expect(previewLabelOf(`${a}.preview.localhost.evil.example`, BASE)).toBeUndefined();
    expect(previewLabelOf(undefined, BASE)).toBeUndefined();
  });
});

describe('passes', () => {
  const passes = new PreviewPasses();
  const now = 1_000_000;
  const a = previewLabel('session-a');

  test("a pass opens its session's origin for its person, until it runs out", () => {
    const enter = passes.issue('enter', { sessionId: 'session-a', who: 'dave' }, now);
    expect(passes.check(enter, 'enter', a, now + 1000)).toEqual({ sessionId: 'session-a', who: 'dave' });
    expect(passes.check(enter, 'enter', a, now + PREVIEW_LIMITS.enterTtlMs + 1)).toMatch(/ran out/);
    const cookie = passes.issue('cookie', { sessionId: 'session-a', who: 'dave' }, now);
    expect(passes.check(cookie, 'cookie', a, now + PREVIEW_LIMITS.enterTtlMs + 1)).toMatchObject({ who: 'dave' });
  });

  test("one session's pass is refused on another's origin; a forged, foreign or misused one too", () => {
    const cookie = passes.issue('cookie', { sessionId: 'session-a', who: 'dave' }, now);
    expect(passes.check(cookie, 'cookie', previewLabel('session-b'), now)).toMatch(/another session's/);
    expect(passes.check(cookie, 'enter', a, now)).toMatch(/not valid here/);
    expect(new PreviewPasses().check(cookie, 'cookie', a, now)).toMatch(/not valid here/);
    const [body, mac] = cookie.split('.');
    const forged = Buffer.from(
      JSON.stringify({ ...JSON.parse(Buffer.from(body, 'base64url').toString()), w: 'alice' }),
    ).toString('base64url');
    expect(passes.check(`${forged}.${mac}`, 'cookie', a, now)).toMatch(/not valid here/);
    expect(passes.check(undefined, 'cookie', a, now)).toMatch(/open the preview from the session page/);
    expect(passes.check('x.y.z', 'cookie', a, now)).toMatch(/not valid here/);
  });
});

test("the app gets the browser's headers without drydock's cookies or the connection's, and its own Host", () => {
  const headers = appHeaders(
    {
      host: 'p1.preview.localhost:8080',
      cookie: 'drydock_preview=abc; theme=dark; drydock_token=secret; sid=1',
      connection: 'keep-alive',
      'x-custom': 'yes',
      accept: 'text/html',
    },
    3000,
    'http://p1.preview.localhost:8080',
  );
  expect(headers).toEqual({
    cookie: 'theme=dark; sid=1',
    'x-custom': 'yes',
    accept: 'text/html',
    host: 'localhost:3000',
    'x-forwarded-host': 'p1.preview.localhost:8080',
    'x-forwarded-proto': 'http',
  });
  expect(appHeaders({ cookie: 'drydock_token=secret' }, 3000, 'http://p')).not.toHaveProperty('cookie');
});

test("the app's answer keeps its host-only cookies; one naming a Domain (another session's, the console's) is dropped", () => {
  expect(
    answerHeaders({
      'content-type': 'text/html',
      connection: 'keep-alive',
      'set-cookie': ['sid=1; Path=/', 'drydock_token=x; Domain=example.com; Path=/', 'b=2;domain =preview.localhost'],
    }),
  ).toEqual({ 'content-type': 'text/html', 'set-cookie': ['sid=1; Path=/'] });
  expect(answerHeaders({ 'set-cookie': ['a=1; Domain=preview.localhost'] })).toEqual({});
});

describe('when the app may be started for its preview', () => {
  const sandbox = { preview: { port: 3000 } };
  test('at the gate, or while someone is attached, with an app and a live sandbox', () => {
    expect(checkPreview({ phase: 'awaiting_approval', sandbox }, { by: 'dave' })).toEqual({ ok: true });
    expect(checkPreview({ phase: 'attached', sandbox }, { by: 'dave' })).toEqual({ ok: true });
  });
  test('refused, saying why, otherwise', () => {
    const reason = (state: Parameters<typeof checkPreview>[0], by = 'dave') => {
      const checked = checkPreview(state, { by });
      return checked.ok ? 'ok' : checked.reason;
    };
    expect(reason({ phase: 'awaiting_approval', sandbox }, '')).toMatch(/needs \{by\}/);
    expect(reason({ phase: 'awaiting_approval' })).toMatch(/no sandbox/);
    expect(reason({ phase: 'awaiting_approval', sandbox: {} })).toMatch(/declares no app/);
    expect(reason({ phase: 'awaiting_approval', sandbox, parked: { since: 'x' } })).toMatch(/parked/);
    expect(reason({ phase: 'verifying', sandbox })).toMatch(/only while the session waits at its gate/);
    expect(reason({ phase: 'agent', sandbox })).toMatch(/phase agent/);
  });
});

describe('the connection through drydock-port', () => {
  let app: Server;
  let port: number;
  const HELPER = path.join(__dirname, '..', '..', 'sandbox-images', 'base', 'drydock-port');
  /** A provider whose attach runs the helper here, on pipes, as an exec in the sandbox would. */
  const provider = {
    attach: async (_name: string, argv: string[]): Promise<AttachedProcess> => {
      const child = spawn(process.execPath, [HELPER, ...argv.slice(1)], { stdio: 'pipe' });
      return {
        stdin: child.stdin,
        stdout: child.stdout,
        stderr: child.stderr,
        close: () => child.kill(),
        busy: () => {},
      };
    },
  } as unknown as SandboxProvider;

  beforeAll(async () => {
    app = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => res.end(JSON.stringify({ method: req.method, url: req.url, host: req.headers.host, body })));
    });
    await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
    port = (app.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => app.close(() => resolve())));

  const ask = async (p: number, method: string, body?: string) => {
    const connection = await appConnection(provider, 'sandbox', p);
    return new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(
        { method, path: '/x?y=1', headers: { host: `localhost:${p}` }, createConnection: () => connection as never },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  };

  test('a request and its body reach the app on loopback; its answer comes back whole', async () => {
    const answer = await ask(port, 'POST', 'a'.repeat(200_000));
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.text)).toEqual({
      method: 'POST',
      url: '/x?y=1',
      host: `localhost:${port}`,
      body: 'a'.repeat(200_000),
    });
  });

  test('nothing listening on the port: the request fails (the route offers to start the app)', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const free = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    // The same error whichever came first, the request's write to a helper gone (EPIPE) or its end.
    const refused = `connect ECONNREFUSED 127.0.0.1:${free}`;
    await expect(ask(free, 'GET')).rejects.toThrow(refused);
    await expect(ask(free, 'POST', 'a'.repeat(1 << 20))).rejects.toThrow(refused);
  });
});

test("every value of a cookie is read: an app's script can toss one of the pass's name for a parent domain", () => {
  const req = {
    headers: { cookie: 'drydock_preview=tossed; other=1; drydock_preview=real%2Epass; drydock_preview=%E0' },
  };
  expect(cookiesOf(req as unknown as IncomingMessage, 'drydock_preview')).toEqual(['tossed', 'real.pass']);
  expect(cookiesOf({ headers: {} } as unknown as IncomingMessage, 'drydock_preview')).toEqual([]);
});
