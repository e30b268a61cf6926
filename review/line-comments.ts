/**
 * A review's comments become one follow-up, like a review submitted on
 * GitHub: plain words for an agent that reads them (a model or an agent
 * CLI), script steps for a scripted agent (each comment is a shell command,
 * or JSON steps). Pure; the console's API and the GitHub review webhook use it.
 */

/** A comment on one line of the change. */
export interface LineComment {
  path: string;
  line: number;
  body: string;
}

/** At most this many comments in one review, and characters in each (the follow-up's own limit is 8,000). */
export const MAX_COMMENTS = 50;
export const MAX_COMMENT_CHARS = 2_000;

export type ReviewFollowup =
  { ok: true; text: string } | { ok: true; steps: unknown[] } | { ok: false; reason: string };

/** Comments from an outside body: each one checked and bounded, or the reason it is not. */
export function parseComments(raw: unknown): { ok: true; comments: LineComment[] } | { ok: false; reason: string } {
  if (raw === undefined) return { ok: true, comments: [] };
  if (!Array.isArray(raw)) return { ok: false, reason: 'comments: a list of {path, line, body}' };
  if (raw.length > MAX_COMMENTS) return { ok: false, reason: `comments: at most ${MAX_COMMENTS}` };
  const comments: LineComment[] = [];
  for (const [i, c] of raw.entries()) {
    const { path, line, body } = (c ?? {}) as Record<string, unknown>;
    if (typeof path !== 'string' || !path || path.length > 500 || /[\0\n]/.test(path)) {
      return { ok: false, reason: `comments[${i}].path: a file of the change` };
    }
    if (!Number.isInteger(line) || (line as number) < 1) {
      return { ok: false, reason: `comments[${i}].line: a line number` };
    }
    if (typeof body !== 'string' || !body.trim() || body.length > MAX_COMMENT_CHARS) {
      return { ok: false, reason: `comments[${i}].body: text of 1 to ${MAX_COMMENT_CHARS} characters` };
    }
    comments.push({ path, line: line as number, body: body.trim() });
  }
  return { ok: true, comments };
}

/** A script agent's steps from text: a JSON list of steps as it is, else the text as one shell command. */
export function stepsFromText(text: string): unknown[] {
  const trimmed = text.trim();
  if (trimmed.startsWith('[')) {
    try {
      const parsed: unknown = JSON.parse(trimmed);
      if (Array.isArray(parsed)) return parsed;
    } catch {
      // not JSON: a command that starts with "[" (a test expression)
    }
  }
  return [{ run: trimmed }];
}

/** The comments (and an overall note) as one follow-up for an agent of this kind. */
export function reviewFollowup(
  agentKind: 'script' | 'openai' | 'cli',
  comments: LineComment[],
  note = '',
): ReviewFollowup {
  const sorted = [...comments].sort((a, b) => a.path.localeCompare(b.path) || a.line - b.line);
  if (!sorted.length && !note.trim()) return { ok: false, reason: 'nothing to send: no comment and no text' };
  if (agentKind === 'script') {
    return {
      ok: true,
      steps: [...sorted.flatMap((c) => stepsFromText(c.body)), ...(note.trim() ? stepsFromText(note) : [])],
    };
  }
  const lines = sorted.map((c) => `- ${c.path}, line ${c.line}: ${c.body.replace(/\n/g, '\n  ')}`);
  const text = [
    note.trim(),
    lines.length ? `Review comments on the change, each on a line of a file:\n${lines.join('\n')}` : '',
  ]
    .filter(Boolean)
    .join('\n\n');
  return { ok: true, text };
}
