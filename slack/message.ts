/**
 * The one Slack message that shows a session: its phase, the request, the
 * change waiting for review with Approve / Reject buttons (carrying the
 * change's hash), the pull request, and links to the review console and the
 * Temporal UI. Pure: rendered again at every phase change and updated in place.
 *
 * The change's diffstat is shown as git wrote it, as literal text (a rich
 * text preformatted block: no mrkdwn, nothing in a file name can end it or
 * format the rest), beside a link to the whole change in the review console.
 * Approve is offered only beside the whole diffstat: when it was cut or is
 * missing, the console is where the change is approved.
 */
import type { Block, Button, KnownBlock } from '@slack/web-api';
import type { ThreadReport } from '../workflows/session/thread-report';
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
  if (r.pending) blocks.push(...approvalBlocks(r.sessionId, r.pending, links.console));
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

function approvalBlocks(
  sessionId: string,
  pending: NonNullable<ThreadReport['pending']>,
  review: string,
): (KnownBlock | Block)[] {
  const covers = pending.covers?.length ? ` (with ${pending.covers.join(', ')})` : '';
  const value = (v: ButtonValue) => JSON.stringify(v);
  const carried = { session: sessionId, action: pending.action, change: pending.change };
  // A plan at its gate is shown instead of a diffstat, and approved here when it is shown whole.
  const plan = pending.plan !== undefined;
  const whole = plan ? !pending.planCut : pending.diffstat.trim() !== '' && !pending.diffstatCut;
  const shown = plan
    ? pending.plan || '(an empty plan)'
    : pending.diffstat.trim() === ''
      ? 'no diffstat'
      : pending.diffstat;
  const button = (id: 'approve' | 'reject', label: string, style: 'primary' | 'danger'): Button => ({
    type: 'button',
    action_id: id,
    style,
    text: { type: 'plain_text', text: label },
    value: value(carried),
  });
  return [
    section(
      `Waiting for approval of *${pending.action}*${covers}, change \`${pending.change.slice(0, 12)}\`\n` +
        `Tests: ${escapeText(pending.tests)}\n` +
        (whole
          ? `<${review}|Review the whole change in the console>`
          : `<${review}|Review and approve it in the console>`) +
        (pending.diffstatCut ? ': the diffstat below is cut' : pending.planCut ? ': the plan below is cut' : ''),
    ),
    {
      type: 'rich_text',
      elements: [{ type: 'rich_text_preformatted', elements: [{ type: 'text', text: shown.slice(0, 3000) }] }],
    },
    {
      type: 'actions',
      block_id: `decide-${pending.change.slice(0, 12)}`,
      elements: [...(whole ? [button('approve', 'Approve', 'primary')] : []), button('reject', 'Reject', 'danger')],
    },
  ];
}
