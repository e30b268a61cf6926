/**
 * The console's pick (T4-L1): the attempts page picks through the JSON API
 * from its script, naming the attempt's whole change; no form route takes a
 * cookie-authenticated pick any more.
 */
import { attemptsPage } from '../../workers/console/pilot';
import { pilotRoute } from '../../workers/routes/pilot';
import type { AttemptsStatus } from '../../workflows/api';

const CHANGE = 'c'.repeat(64);
const status: AttemptsStatus = {
  sessionId: 's1',
  repo: 'acme/app',
  task: 'Greet the reader',
  phase: 'awaiting_pick',
  startedAt: '2026-12-04T00:00:00Z',
  refusedPicks: [],
  attempts: [
    {
      index: 1,
      sessionId: 's1.1',
      agent: 'script',
      progress: {
        sessionId: 's1.1',
        phase: 'awaiting_approval',
        seq: 3,
        at: '2026-12-04T00:01:00Z',
        startedAt: '2026-12-04T00:00:00Z',
        pending: { action: 'push', change: CHANGE, approvers: [], deadline: '', evidence: {} as never },
      },
    },
  ],
};

test('the attempts page has no form: its Pick button names the whole change, for its script', () => {
  const html = attemptsPage(status, 'alice', 'n0nce');
  expect(html).not.toContain('action="/attempts/');
  expect(html).toContain(`<button type="button" data-pick="1" data-change="${CHANGE}">Pick attempt 1</button>`);
  expect(html).toContain('<script nonce="n0nce" src="/assets/console/attempts.js"></script>');
});

test('a pick is taken only as JSON at the API: the console form route is gone', () => {
  expect(pilotRoute('POST', '/attempts/s1/pick')).toBeUndefined();
  expect(pilotRoute('POST', '/api/sessions/s1/pick')).toBeDefined();
});
