// A real OpenID Connect provider (oidc-provider) for the tests, in its own
// process: one confidential client, PKCE required, its development login and
// consent pages, and the accounts given in OIDC_ACCOUNTS
// ({"alice": {"email": "alice@example.com", "email_verified": true}}).
// Usage: node oidc-provider.mjs <port> <client id> <client secret> <redirect uri>
import Provider from 'oidc-provider';

const [port, clientId, clientSecret, redirectUri] = process.argv.slice(2);
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS ?? '{}');
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      response_types: ['code'],
      grant_types: ['authorization_code'],
    },
  ],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
  findAccount: (_ctx, id) =>
    accounts[id] ? { accountId: id, claims: () => ({ sub: id, ...accounts[id] }) } : undefined,
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['drydock-test-provider-cookie-key'] },
});
// Development keys and pages are what this provider is for; their warnings are noise here.
provider.on('server_error', (_ctx, err) => console.error('provider error:', err));
provider.listen(Number(port), '127.0.0.1', () => console.log(`ready ${issuer}`));
