/**
 * accountOf (identity/oidc.ts): which account a provider's claims name.
 * T4-L9: an email counts only when the provider says it verified it.
 */
import { accountOf, SignInRefused } from '../../identity/oidc';

test.each([
  [{ email: 'a@example.com', email_verified: true }, 'email', 'a@example.com'],
  [{ sub: 'u-1', preferred_username: 'alice' }, 'preferred_username', 'alice'],
  [{ sub: 'u-1' }, 'sub', 'u-1'],
])('%j names its %s', (claims, claim, account) => {
  expect(accountOf(claims, claim)).toBe(account);
});

test.each([
  [{ email: 'a@example.com' }, /has not verified a@example.com \(email_verified is absent\)/],
  [{ email: 'a@example.com', email_verified: false }, /email_verified is false/],
  [{ email: 'a@example.com', email_verified: 'true' }, /email_verified is "true"/],
  [{ email: '', email_verified: true }, /the ID token has no email claim/],
  [{ sub: 'u-1' }, /the ID token has no email claim/],
])('%j is refused', (claims, reason) => {
  expect(() => accountOf(claims, 'email')).toThrow(SignInRefused);
  expect(() => accountOf(claims, 'email')).toThrow(reason);
});
