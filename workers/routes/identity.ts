/**
 * Signing in and out of the console (OpenID Connect, or a pasted token), and
 * a person's CLI token: `POST /api/tokens` issues one for the signed-in person,
 * `GET /api/whoami` says whom a token names.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CLI_TOKEN_MS, CONSOLE_SESSION_MS } from '../../identity/identities';
import { SignInRefused } from '../../identity/oidc';
import { loginPage, signedInPage } from '../console';
import {
  consoleUrl,
  cookieOf,
  COOKIE,
  header,
  HttpError,
  readBody,
  requireJsonRequest,
  sendHtml,
  tokenOf,
  type ServeContext,
} from '../http';

/** The pending OpenID Connect sign-in; Lax, so the provider's redirect back brings it. */
const PENDING_COOKIE = 'drydock_oidc';

function cookie(ctx: ServeContext, name: string, value: string, attributes: string): string {
  const secure = ctx.config.DRYDOCK_CONSOLE_URL?.startsWith('https:') ? '; Secure' : '';
  return `${name}=${encodeURIComponent(value)}; HttpOnly; ${attributes}${secure}`;
}

/**
 * Why a browser's form POST comes from another site, or undefined. A page
 * elsewhere could post its own token to /login and sign the person in as
 * someone else (login CSRF): their next decision would be recorded under the
 * attacker's name. Browsers send Origin on every cross-site POST (and
 * Sec-Fetch-Site); a request with neither is not a browser's.
 */
export function crossSiteReason(req: IncomingMessage, consoleOrigin: string): string | undefined {
  const origin = header(req, 'origin');
  if (origin !== undefined) {
    const own = [new URL(consoleOrigin).origin, `http://${header(req, 'host')}`, `https://${header(req, 'host')}`];
    return own.includes(origin) ? undefined : `a form sent from ${origin}, not from this console`;
  }
  const site = header(req, 'sec-fetch-site');
  return site === undefined || site === 'same-origin' || site === 'none' ? undefined : `a form sent ${site}`;
}

/** POST /login: a token from the form (a personal or a machine token) becomes the console cookie. */
export async function login(ctx: ServeContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const crossSite = crossSiteReason(req, consoleUrl(ctx.config));
  if (crossSite) {
    ctx.log.warn({ ip: req.socket.remoteAddress, reason: crossSite }, 'console sign-in refused');
    return sendHtml(res, 403, loginPage(Boolean(ctx.identities.oidc), 'Sign in from this console’s own page.'));
  }
  const form = new URLSearchParams((await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY)).toString('utf8'));
  const token = form.get('token') ?? '';
  const who = await ctx.identities.identify(token);
  if (!who) {
    ctx.log.warn({ ip: req.socket.remoteAddress }, 'console sign-in refused');
    return sendHtml(res, 401, loginPage(Boolean(ctx.identities.oidc), 'That token is not valid.'));
  }
  res.writeHead(303, { location: '/', 'set-cookie': cookie(ctx, COOKIE, token, 'SameSite=Strict; Path=/') });
  res.end();
}

/** POST /logout: a sign-in's token is revoked, and the cookie cleared. */
export async function logout(ctx: ServeContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const crossSite = crossSiteReason(req, consoleUrl(ctx.config));
  if (crossSite) throw new HttpError(403, `sign out from this console's own page (${crossSite})`);
  const token = cookieOf(req, COOKIE);
  const found = token ? await ctx.identities.personal?.identify(token) : undefined;
  if (token && found?.purpose === 'console') await ctx.identities.personal?.revoke(token);
  res.writeHead(303, {
    location: '/login',
    'set-cookie': cookie(ctx, COOKIE, '', 'SameSite=Strict; Path=/; Max-Age=0'),
  });
  res.end();
}

/** GET /auth/login: to the OpenID Connect provider, with the pending sign-in in a cookie. */
export async function oidcBegin(ctx: ServeContext, res: ServerResponse): Promise<void> {
  const oidc = ctx.identities.oidc;
  if (!oidc) throw new HttpError(404, 'single sign-on is not configured (DRYDOCK_OIDC_ISSUER)');
  const { url, pending } = await oidc.begin();
  res.writeHead(303, {
    location: url,
    'set-cookie': cookie(ctx, PENDING_COOKIE, pending, 'SameSite=Lax; Path=/auth; Max-Age=600'),
  });
  res.end();
}

/**
 * GET /auth/callback: the provider's answer. The claim must name a person in
 * the identities file; the browser then gets a console sign-in of 12 hours.
 */
export async function oidcCallback(ctx: ServeContext, req: IncomingMessage, res: ServerResponse, url: URL) {
  const { oidc, directory, personal } = ctx.identities;
  if (!oidc || !personal) throw new HttpError(404, 'single sign-on is not configured (DRYDOCK_OIDC_ISSUER)');
  const clear = cookie(ctx, PENDING_COOKIE, '', 'SameSite=Lax; Path=/auth; Max-Age=0');
  let person: string | undefined;
  let account = '';
  try {
    account = await oidc.finish(url.search, cookieOf(req, PENDING_COOKIE));
    person = directory.personOf('oidc', account);
  } catch (err) {
    if (!(err instanceof SignInRefused)) throw err;
    ctx.log.warn({ reason: err.message }, 'single sign-on refused');
    res.setHeader('set-cookie', clear);
    return sendHtml(res, 401, loginPage(true, `Sign-in failed: ${err.message}.`));
  }
  if (!person) {
    ctx.log.warn({ account }, 'single sign-on of an account no person claims');
    res.setHeader('set-cookie', clear);
    return sendHtml(res, 403, loginPage(true, `${account} is not anyone's account in drydock's identities file.`));
  }
  const issued = await personal.issue(person, 'console', CONSOLE_SESSION_MS);
  ctx.log.info({ person, token: issued.id }, 'signed in to the console');
  // A page, not a redirect: a cookie set on the way back from another site is sent by the next same-site request.
  res.setHeader('set-cookie', [clear, cookie(ctx, COOKIE, issued.token, 'SameSite=Strict; Path=/')]);
  sendHtml(res, 200, signedInPage(person));
}

/** POST /api/tokens: a CLI token for the signed-in person (shown once); machines have theirs configured. */
export async function issueCliToken(ctx: ServeContext, req: IncomingMessage) {
  requireJsonRequest(req);
  const who = await ctx.identities.identify(tokenOf(req));
  if (!who || who.kind !== 'person') throw new HttpError(403, 'only a person has personal tokens');
  if (!ctx.identities.personal) throw new HttpError(503, 'personal tokens need the database');
  const issued = await ctx.identities.personal.issue(who.name, 'cli', CLI_TOKEN_MS);
  ctx.log.info({ person: who.name, token: issued.id }, 'CLI token issued');
  const { token, id, person, expiresAt } = issued;
  return [201, { token, id, person, expiresAt, login: `drydock login --server ${consoleUrl(ctx.config)}` }] as const;
}

/** GET /api/whoami: whom the token names. */
export async function whoami(ctx: ServeContext, req: IncomingMessage) {
  return [200, await ctx.identities.identify(tokenOf(req))] as const;
}
