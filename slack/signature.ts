/**
 * Slack's request signing (v0): `X-Slack-Signature` is `v0=` and the
 * HMAC-SHA256, under the app's signing secret, of `v0:<X-Slack-Request-Timestamp>:<raw body>`.
 * A request older than five minutes is a replay and refused.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** How far the request's timestamp may be from the server's clock. */
export const SLACK_REPLAY_WINDOW_MS = 5 * 60_000;

export type SignatureCheck = { ok: true } | { ok: false; reason: string };

export function checkSlackSignature(
  secret: string,
  headers: { timestamp?: string; signature?: string },
  body: Buffer,
  now = Date.now(),
): SignatureCheck {
  const { timestamp, signature } = headers;
  if (!timestamp || !/^\d{1,12}$/.test(timestamp)) return { ok: false, reason: 'missing X-Slack-Request-Timestamp' };
  if (!signature || !/^v0=[0-9a-f]{64}$/.test(signature))
    return { ok: false, reason: 'missing or malformed X-Slack-Signature' };
  if (Math.abs(now - Number(timestamp) * 1000) > SLACK_REPLAY_WINDOW_MS) {
    return {
      ok: false,
      reason: 'X-Slack-Request-Timestamp is more than 5 minutes away: a replay, or a clock that is off',
    };
  }
  const base = Buffer.concat([Buffer.from(`v0:${timestamp}:`), body]);
  const expected = Buffer.from(`v0=${createHmac('sha256', secret).update(base).digest('hex')}`);
  const given = Buffer.from(signature);
  return given.length === expected.length && timingSafeEqual(given, expected)
    ? { ok: true }
    : { ok: false, reason: 'X-Slack-Signature does not match' };
}

/** Signs a request as Slack does (for tests and local tools). */
export function signSlackRequest(secret: string, body: string | Buffer, timestamp = Math.floor(Date.now() / 1000)) {
  const base = Buffer.concat([Buffer.from(`v0:${timestamp}:`), Buffer.from(body)]);
  return {
    'x-slack-request-timestamp': String(timestamp),
    'x-slack-signature': `v0=${createHmac('sha256', secret).update(base).digest('hex')}`,
  };
}
