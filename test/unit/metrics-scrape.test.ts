/**
 * GET /metrics over real HTTP (workers/routes/metrics.ts): the counts span
 * every repo, so a token needs a role on "*" once roles are configured, as the
 * other figures do; without a roles section any token still scrapes.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { Roles } from '../../identity/roles';
import type { ServeContext } from '../../workers/http';
import { metricsScrape } from '../../workers/routes/metrics';

const TOKENS: Record<string, string> = {
  'prometheus-token-0123456789': 'machine:prometheus',
  'ci-token-0123456789abcdef': 'machine:ci',
};

async function serving(roles: Roles): Promise<{ url: string; server: Server }> {
  const ctx = {
    identities: { identify: async (t?: string) => (t && TOKENS[t] ? { name: TOKENS[t] } : undefined), roles },
    sessionMetrics: new Registry(),
  } as unknown as ServeContext;
  const server = createServer((req, res) => {
    metricsScrape(ctx, req, res).catch((err: { status?: number; message: string }) => {
      res.writeHead(err.status ?? 500).end(err.message);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`, server };
}

const scrape = (url: string, token?: string) =>
  fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });

test('with roles, only a token that reads every repo scrapes /metrics', async () => {
  const { url, server } = await serving(
    new Roles({ '*': { reader: ['machine:prometheus'] }, 'acme/shop': { approver: ['machine:ci'] } }),
  );
  try {
    expect((await scrape(url, 'prometheus-token-0123456789')).status).toBe(200);
    const ci = await scrape(url, 'ci-token-0123456789abcdef');
    expect(ci.status).toBe(403);
    expect(await ci.text()).toContain('needs the reader role on "*"');
    expect((await scrape(url)).status).toBe(401);
  } finally {
    server.close();
  }
});

test('without a roles section, any valid token scrapes', async () => {
  const { url, server } = await serving(new Roles());
  try {
    expect((await scrape(url, 'ci-token-0123456789abcdef')).status).toBe(200);
    expect((await scrape(url, 'not-a-token')).status).toBe(401);
  } finally {
    server.close();
  }
});
