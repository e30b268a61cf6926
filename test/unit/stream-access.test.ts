/**
 * The console's events stream checks its reader again before each update
 * (workers/access.ts stillReads, used by workers/routes/console.ts), not only
 * at connect: a token revoked, or a reader no longer allowed, gets no more.
 */
import type { IncomingMessage } from 'node:http';
import { Roles } from '../../identity/roles';
import { stillReads } from '../../workers/access';
import type { ServeContext } from '../../workers/http';

const SHOP = 'https://github.com/acme/shop.git';
const tokens = new Map([['dave-token-0123456789', 'dave']]);
let roles = new Roles({ 'acme/shop': { reader: ['dave'] } });
const ctx = {
  identities: {
    identify: async (t?: string) => (t && tokens.has(t) ? { name: tokens.get(t) } : undefined),
    get roles() {
      return roles;
    },
  },
  repos: { byUrl: async (url: string) => (url === SHOP ? { ok: true, repo: { name: 'acme/shop' } } : { ok: false }) },
} as unknown as ServeContext;
const request = { headers: { authorization: 'Bearer dave-token-0123456789' } } as unknown as IncomingMessage;

test('a reader still reads while their token and role hold', async () => {
  expect(await stillReads(ctx, request, 'dave', SHOP)).toBe(true);
});

test('a role taken away ends what the stream may send', async () => {
  roles = new Roles({ 'acme/shop': { reader: ['erin'] } });
  try {
    expect(await stillReads(ctx, request, 'dave', SHOP)).toBe(false);
  } finally {
    roles = new Roles({ 'acme/shop': { reader: ['dave'] } });
  }
});

test('a token revoked (or a cookie signed out) mid-stream ends it', async () => {
  tokens.delete('dave-token-0123456789');
  expect(await stillReads(ctx, request, 'dave', SHOP)).toBe(false);
});
