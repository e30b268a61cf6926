/**
 * What ran for a change, for the review summary: the commands and tool calls
 * from the audit trail, the egress they used or were refused, the secrets
 * granted (names), and where a value was redacted before the reviewer saw
 * it. `whatRanOf` is pure; `auditRowsOf` reads a bounded number of rows.
 */
import type { Pool } from 'pg';
import { REDACTED } from '../platform/scrub';
import type { SessionStatus } from '../workflows/api';
import type { WhatRan } from './change-kinds';

/** Rows of the trail read for one summary: a session past this is summarized from its first rows. */
export const MAX_AUDIT_ROWS = 500;

export interface AuditRow {
  kind: string;
  data: Record<string, any>;
}

export async function auditRowsOf(pool: Pool, sessionId: string): Promise<AuditRow[]> {
  const { rows } = await pool.query<AuditRow>(
    `select kind, data from audit_events where session_id = $1 and kind in ('command', 'tool_call')
      order by seq limit $2`,
    [sessionId, MAX_AUDIT_ROWS],
  );
  return rows;
}

const count = (text: unknown) => (typeof text === 'string' ? text.split(REDACTED).length - 1 : 0);

/** The summary's "what ran" from the trail's commands and tool calls, the status and the diff shown. */
export function whatRanOf(rows: AuditRow[], s: SessionStatus, diff = ''): WhatRan {
  const ran: WhatRan = { commands: [], egress: { allowed: 0, refused: 0, hosts: [] }, secrets: [], redactions: [] };
  const redacted = (where: string, n: number) => n && ran.redactions.push({ where, count: n });
  for (const { kind, data } of rows) {
    const step = String(data.step ?? data.tool ?? kind);
    const command = String(data.command ?? data.summary ?? '');
    ran.commands.push({ step, command, ...(typeof data.exitCode === 'number' ? { exitCode: data.exitCode } : {}) });
    ran.egress.allowed += Number(data.egress?.allowed ?? 0);
    ran.egress.refused += Number(data.egress?.refused ?? 0);
    for (const host of data.hosts ?? []) if (!ran.egress.hosts.includes(host)) ran.egress.hosts.push(String(host));
    for (const name of data.secrets ?? []) if (!ran.secrets.includes(name)) ran.secrets.push(String(name));
    redacted(`the command of ${step}`, count(command));
  }
  for (const t of s.timeline) redacted(`the output of ${t.name}`, count(t.outputTail) + count(t.detail));
  redacted('the test output', count(s.verification?.outputTail));
  redacted("the agent's summary", count(s.agent?.summary));
  redacted('the diff', count(diff));
  return ran;
}
