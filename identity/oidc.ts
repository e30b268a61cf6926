/**
 * Signing in to the console with OpenID Connect (authorization code flow with
 * PKCE, state and nonce), through openid-client. The pending sign-in travels
 * in a short-lived HttpOnly cookie; the provider's ID token is checked by the
 * library (issuer, audience, signature, nonce), then one claim
 * (DRYDOCK_OIDC_CLAIM, default `email`) names the account that the identities
 * file maps to a person.
 */
import * as oidc from 'openid-client';

export interface OidcSettings {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** The ID token claim that the identities file's `oidc:` entries name. */
  claim: string;
  /** `<console URL>/auth/callback`, as registered with the provider (known once serve listens). */
  redirectUri: () => string;
}

/** A pending sign-in: what the callback must match. Kept in the browser's cookie for 10 minutes. */
interface Pending {
  state: string;
  nonce: string;
  verifier: string;
}

export class SignInRefused extends Error {
  name = 'SignInRefused';
}

/** Plain HTTP is allowed only to a provider on this machine (a local test or development provider). */
function loopback(url: URL): boolean {
  return url.protocol === 'http:' && ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
}

export class OidcSignIn {
  private discovered?: Promise<oidc.Configuration>;

  constructor(readonly settings: OidcSettings) {}

  /** The provider's metadata, read once (again after a failure). */
  private configuration(): Promise<oidc.Configuration> {
    const issuer = new URL(this.settings.issuer);
    this.discovered ??= oidc
      .discovery(
        issuer,
        this.settings.clientId,
        this.settings.clientSecret,
        undefined,
        loopback(issuer) ? { execute: [oidc.allowInsecureRequests], timeout: 10 } : { timeout: 10 },
      )
      .catch((err: unknown) => {
        this.discovered = undefined;
        throw err;
      });
    return this.discovered;
  }

  /** Where to send the browser, and the cookie value that the callback needs back. */
  async begin(): Promise<{ url: string; pending: string }> {
    const config = await this.configuration();
    const pending: Pending = {
      state: oidc.randomState(),
      nonce: oidc.randomNonce(),
      verifier: oidc.randomPKCECodeVerifier(),
    };
    const url = oidc.buildAuthorizationUrl(config, {
      redirect_uri: this.settings.redirectUri(),
      scope: 'openid email profile',
      code_challenge: await oidc.calculatePKCECodeChallenge(pending.verifier),
      code_challenge_method: 'S256',
      state: pending.state,
      nonce: pending.nonce,
    });
    return { url: url.href, pending: Buffer.from(JSON.stringify(pending)).toString('base64url') };
  }

  /**
   * Redeems the callback's code; resolves with the value of the configured
   * claim. `search` is the callback's query string, as the provider sent it.
   */
  async finish(search: string, pendingCookie: string | undefined): Promise<string> {
    const pending = parsePending(pendingCookie);
    const config = await this.configuration();
    const current = new URL(`${this.settings.redirectUri()}${search}`);
    let claims: Record<string, unknown> | undefined;
    try {
      const tokens = await oidc.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
      claims = tokens.claims();
      // Providers that keep scope claims out of the ID token answer them at the userinfo endpoint.
      if (claims && missingClaims(claims, this.settings.claim)) {
        claims = { ...(await oidc.fetchUserInfo(config, tokens.access_token, String(claims.sub))), ...claims };
      }
    } catch (err) {
      throw new SignInRefused(`the provider's answer did not check out: ${(err as Error).message}`);
    }
    return accountOf(claims ?? {}, this.settings.claim);
  }
}

const missingClaims = (claims: Record<string, unknown>, claim: string) =>
  claims[claim] === undefined || (claim === 'email' && claims.email_verified === undefined);

/**
 * The account the claims name. An email counts only when the provider says it
 * verified it (`email_verified: true`): a provider that lets anyone set any
 * address, and says nothing, would otherwise sign a stranger in as its owner.
 */
export function accountOf(claims: Record<string, unknown>, claim: string): string {
  const value = claims[claim];
  if (typeof value !== 'string' || !value) throw new SignInRefused(`the ID token has no ${claim} claim`);
  if (claim === 'email' && claims.email_verified !== true) {
    throw new SignInRefused(
      `the provider has not verified ${value} (email_verified is ${JSON.stringify(claims.email_verified) ?? 'absent'})`,
    );
  }
  return value;
}

function parsePending(cookie: string | undefined): Pending {
  try {
    const parsed = JSON.parse(Buffer.from(cookie ?? '', 'base64url').toString('utf8')) as Partial<Pending>;
    if (typeof parsed.state === 'string' && typeof parsed.nonce === 'string' && typeof parsed.verifier === 'string') {
      return parsed as Pending;
    }
  } catch {
    // falls through
  }
  throw new SignInRefused('no sign-in is pending in this browser (it expires after 10 minutes): start again');
}
