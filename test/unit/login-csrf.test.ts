/**
 * POST /login and /logout (workers/routes/identity.ts) over real HTTP: a form
 * posted from another site signs nobody in (T4-L9, login CSRF); the console's
 * own form, and a client that is not a browser, do.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { login, logout } from '../../workers/routes/identity';
import type { ServeContext } from '../../workers/http';

const TOKEN = 'mallory-machine-token-0123456789';
let server: Server;
let url: string;

beforeAll(async () => {
  const ctx = {
    config: { DRYDOCK_HTTP_MAX_BODY: 65_536, DRYDOCK_HTTP_HOST: '127.0.0.1', DRYDOCK_HTTP_PORT: 0 },
    identities: {
      identify: async (t: string) => (t === TOKEN ? { name: 'machine:mallory', kind: 'machine' } : undefined),
    },
    log: { warn: () => undefined, info: () => undefined },
  } as unknown as ServeContext;
  server = createServer((req, res) => {
    const handler = req.url === '/logout' ? logout : login;
    handler(ctx, req, res).catch((err: { status?: number; message: string }) => {
      res.writeHead(err.status ?? 500).end(err.message);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

const post = (path: string, headers: Record<string, string>) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: `token=${TOKEN}`,
  });

test.each([
  [{ origin: 'https://evil.example' }],
  [{ origin: 'null' }],
  [{ 'sec-fetch-site': 'cross-site' }],
  [{ 'sec-fetch-site': 'same-site' }],
])('a sign-in form posted from elsewhere (%j) sets no cookie', async (headers) => {
  const res = await post('/login', headers);
  expect(res.status).toBe(403);
  expect(res.headers.get('set-cookie')).toBeNull();
  expect(await res.text()).toContain('Sign in from this console’s own page.');
});

test('a sign-out form posted from elsewhere is refused', async () => {
  const res = await post('/logout', { origin: 'https://evil.example' });
  expect(res.status).toBe(403);
  expect(res.headers.get('set-cookie')).toBeNull();
});

test("the console's own form, and a client that is not a browser, sign in", async () => {
  const own: Record<string, string>[] = [{ origin: url, 'sec-fetch-site': 'same-origin' }, {}];
  for (const headers of own) {
    const res = await post('/login', headers);
    expect(res.status).toBe(303);
    expect(res.headers.get('set-cookie')).toMatch(/^drydock_token=/);
  }
});
