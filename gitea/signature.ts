/**
 * Gitea's webhook signature: X-Gitea-Signature is the hex HMAC-SHA256 of the
 * raw body under the hook's secret (no "sha256=" prefix, unlike GitHub's
 * header, which Gitea also sends). Checked over the bytes as received, in
 * constant time, against the current secret and then an old one while it is
 * rotated out.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** A well-formed X-Gitea-Signature: 64 lower-case hex digits. */
export const GITEA_SIGNATURE = /^[0-9a-f]{64}$/;

/** True when `signature` is the HMAC-SHA256 of exactly `body` under one of `secrets`. */
export function giteaSignatureMatches(secrets: string[], body: Buffer, signature: string | undefined): boolean {
  if (secrets.length === 0 || body.length === 0 || !signature || !GITEA_SIGNATURE.test(signature)) return false;
  const given = Buffer.from(signature, 'hex');
  // Every secret is tried (no early return), so the time taken does not say which matched.
  let matched = false;
  for (const secret of secrets) {
    if (!secret) continue;
    const expected = createHmac('sha256', secret).update(body).digest();
    if (timingSafeEqual(expected, given)) matched = true;
  }
  return matched;
}
