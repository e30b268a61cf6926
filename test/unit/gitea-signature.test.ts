/**
 * X-Gitea-Signature as drydock checks it: the hex HMAC-SHA256 of the raw body
 * (the e2e suite test/e2e/gitea-server.test.ts checks it on the real server's
 * deliveries). A known answer computed with openssl, then a fuzz of forgeries.
 */
import { randomBytes } from 'node:crypto';
import { giteaSignatureMatches } from '../../gitea/signature';

const body = Buffer.from('{"action":"opened","number":1}');
// printf '{"action":"opened","number":1}' | openssl dgst -sha256 -hmac gitea-secret
const signature = '6508b1f1f158529e1e6e55c49bf8fc4e5e61e67b16bedddafb09d8fd3105220e';

test('the known answer verifies; the old secret during a rotation too; nothing else does', () => {
  expect(giteaSignatureMatches(['gitea-secret'], body, signature)).toBe(true);
  expect(giteaSignatureMatches(['new-secret', 'gitea-secret'], body, signature)).toBe(true);
  expect(giteaSignatureMatches(['other'], body, signature)).toBe(false);
  expect(giteaSignatureMatches([], body, signature)).toBe(false);
  expect(giteaSignatureMatches([''], body, signature)).toBe(false);
  expect(giteaSignatureMatches(['gitea-secret'], Buffer.alloc(0), signature)).toBe(false);
  expect(giteaSignatureMatches(['gitea-secret'], body, undefined)).toBe(false);
});

test("GitHub's header form, upper case, short or long hex: malformed, never verified", () => {
  for (const bad of [
    `sha256=${signature}`,
    signature.toUpperCase(),
    signature.slice(2),
    `${signature}00`,
    ' '.repeat(64),
  ]) {
    expect(giteaSignatureMatches(['gitea-secret'], body, bad)).toBe(false);
  }
});

test('fuzz: any changed byte of the body or the signature fails', () => {
  for (let i = 0; i < 500; i++) {
    const changed = Buffer.from(body);
    changed[i % changed.length] ^= 1 + (randomBytes(1)[0] % 255);
    expect(giteaSignatureMatches(['gitea-secret'], changed, signature)).toBe(false);
    const at = i % 64;
    const digit = '0123456789abcdef'.replace(signature[at], '')[i % 15];
    const forged = signature.slice(0, at) + digit + signature.slice(at + 1);
    expect(giteaSignatureMatches(['gitea-secret'], body, forged)).toBe(false);
  }
});
