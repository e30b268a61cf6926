/**
 * The one Slack message that shows a session: its phase, the request, the
 * change waiting for review with Approve / Reject buttons (carrying the
 * change's hash), the pull request, and links to the review console and the
 * Temporal UI. Pure: rendered again at every phase change and updated in place.
 */
import type { Block, KnownBlock } from '@slack/web-api';
import type { ThreadReport } from '../workflows/session/threads';
import type { ButtonValue } from './requests';

/** The metadata that marks drydock's message of a session, so it is found again before posting twice. */
export const METADATA_TYPE = 'drydock_session';

const ICON: Record<string, string> = {
  provisioning: ':hourglass_flowing_sand:',
  agent: ':robot_face:',
  verifying: ':test_tube:',
  awaiting_approval: ':eyes:',
  publishing: ':rocket:',
  awaiting_followup: ':speech_balloon:',
  attached: ':technologist:',
  tearing_down: ':broom:',
  completed: ':white_check_mark:',
  failed: ':x:',
  rejected: ':no_entry_sign:',
  cancelled: ':heavy_multiplication_x:',
  timed_out: ':alarm_clock:',
};

/** Slack's mrkdwn: &, < and > are its only control characters in text. */
export const escapeText = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

const section = (text: string): KnownBlock => ({
  type: 'section',
  text: { type: 'mrkdwn', text: text.slice(0, 3000) },
});

export interface StatusMessage {
  text: string;
  blocks: (KnownBlock | Block)[];
  metadata: { event_type: string; event_payload: { session_id: string; phase: string } };
}

export function statusMessage(r: ThreadReport, links: { console: string; temporal: string }): StatusMessage {
  const round = r.round > 1 ? ` (round ${r.round})` : '';
  const headline = `${ICON[r.phase] ?? ''} *${r.phase.replace(/_/g, ' ')}*${round} · \`${escapeText(r.repo)}\``;
  const blocks: (KnownBlock | Block)[] = [section(`${headline}\n>${escapeText(r.task).replace(/\n/g, '\n>')}`)];
  if (r.pending) blocks.push(...approvalBlocks(r.sessionId, r.pending));
  const facts = [
    r.requestedBy ? `requested by ${escapeText(r.requestedBy)}` : '',
    r.lastDecision
      ? `${r.lastDecision.action} ${r.lastDecision.decision === 'approve' ? 'approved' : 'rejected'} by ${escapeText(r.lastDecision.by)}`
      : '',
    r.pullRequest ? `<${r.pullRequest}|pull request>` : '',
    `<${links.console}|review console>`,
    `<${links.temporal}|Temporal UI>`,
  ].filter(Boolean);
  if (r.error) blocks.push(section(`:warning: ${escapeText(r.error)}`));
  blocks.push({ type: 'context', elements: [{ type: 'mrkdwn', text: facts.join(' · ').slice(0, 3000) }] });
  return {
    text: `drydock ${r.phase}: ${r.task}`.slice(0, 3000),
    blocks,
    metadata: { event_type: METADATA_TYPE, event_payload: { session_id: r.sessionId, phase: r.phase } },
  };
}

function approvalBlocks(sessionId: string, pending: NonNullable<ThreadReport['pending']>): (KnownBlock | Block)[] {
  const covers = pending.covers?.length ? ` (with ${pending.covers.join(', ')})` : '';
  const value = (v: ButtonValue) => JSON.stringify(v);
  const carried = { session: sessionId, action: pending.action, change: pending.change };
  return [
    section(
      `Waiting for approval of *${pending.action}*${covers}, change \`${pending.change.slice(0, 12)}\`\n` +
        `Tests: ${escapeText(pending.tests)}\n\`\`\`${escapeText(pending.diffstat) || 'no diffstat'}\`\`\``,
    ),
    {
      type: 'actions',
      block_id: `decide-${pending.change.slice(0, 12)}`,
      elements: [
        {
          type: 'button',
          action_id: 'approve',
          style: 'primary',
          text: { type: 'plain_text', text: 'Approve' },
          value: value(carried),
        },
        {
          type: 'button',
          action_id: 'reject',
          style: 'danger',
          text: { type: 'plain_text', text: 'Reject' },
          value: value(carried),
        },
      ],
    },
  ];
}
