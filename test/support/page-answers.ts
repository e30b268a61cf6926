/**
 * Waits on a console page's answer that say what the page showed. The
 * console writes what the server answered a button (a decision, a follow-up)
 * into a status element (#answer, #followup-answer); a wait for it that runs
 * out fails with what that element holds (or that it is not on the page),
 * the page's phase, every answer the server sent to that request, and the
 * server's log lines about it, instead of Playwright's bare "Timeout 30000ms
 * exceeded". The server's log is kept by ServeLog (startServe in helpers.ts).
 */
import pino from 'pino';
import type { Page, Response } from 'playwright-core';

/** How many of the server's log lines are kept (the newest). */
const KEPT_LINES = 20_000;

/**
 * drydock serve's log for a test: every line at info and above is kept in
 * memory (whatever LOG_LEVEL prints), those at `printLevel` and above go to
 * stderr as before.
 */
export class ServeLog {
  private readonly lines: string[] = [];
  readonly logger: pino.Logger;

  constructor(printLevel: string) {
    const printFrom = pino.levels.values[printLevel] ?? Infinity;
    this.logger = pino(
      { level: 'info', base: { pid: process.pid } },
      {
        write: (line: string) => {
          this.lines.push(line.trimEnd());
          if (this.lines.length > KEPT_LINES) this.lines.shift();
          if (((JSON.parse(line) as { level?: number }).level ?? 0) >= printFrom) process.stderr.write(line);
        },
      },
    );
  }

  /** The kept lines that contain every one of `needles` (a session id, a path). */
  about(...needles: string[]): string[] {
    return this.lines.filter((line) => needles.every((n) => line.includes(n)));
  }
}

export interface AnswerWait {
  /** The status element: `answer` (Approve / Reject) or `followup-answer`. */
  id?: 'answer' | 'followup-answer';
  /** The request whose answer the element shows, as its path ends: `/decide`, `/followups`. */
  request: string;
  /** The session, to find the server's log lines about it. */
  sessionId: string;
  /** The answer waited for: its class (`ok`, `bad`) and, if given, its text's start. */
  className?: string;
  textStarts?: string;
  /** @default 30_000 (ms) */
  timeoutMs?: number;
}

/** What the page and the server said, for a wait that ran out. */
export interface AnswerWatch {
  /** Waits for the answer; on time-out, throws with what the page showed and the server said. */
  wait(): Promise<void>;
}

/**
 * Starts watching `page`'s responses to `opts.request` now (call it before the
 * click or key that sends it), then `wait()` for the answer.
 */
export function watchAnswer(page: Page, log: ServeLog, opts: AnswerWait): AnswerWatch {
  const id = opts.id ?? 'answer';
  const className = opts.className ?? 'ok';
  const answered: string[] = [];
  const onResponse = (res: Response) => {
    if (!new URL(res.url()).pathname.endsWith(opts.request)) return;
    const at = new Date().toISOString();
    void res.text().then(
      (body) => answered.push(`${at} HTTP ${res.status()}: ${body.slice(0, 500)}`),
      (err: unknown) => answered.push(`${at} HTTP ${res.status()}, its body unread: ${String(err)}`),
    );
  };
  page.on('response', onResponse);
  return {
    async wait() {
      try {
        await page.waitForFunction(
          ([elementId, cls, start]) => {
            const element = document.getElementById(elementId);
            return element?.className === cls && (!start || (element.textContent ?? '').startsWith(start));
          },
          [id, className, opts.textStarts ?? ''] as const,
          { timeout: opts.timeoutMs ?? 30_000 },
        );
      } catch (err) {
        throw new Error(await explainAnswer(page, log, opts, id, answered, err));
      } finally {
        page.off('response', onResponse);
      }
    },
  };
}

async function explainAnswer(
  page: Page,
  log: ServeLog,
  opts: AnswerWait,
  id: string,
  answered: string[],
  err: unknown,
): Promise<string> {
  const shown = await page
    .evaluate(
      ([elementId]) => {
        const element = document.getElementById(elementId);
        const phase = document.getElementById('phase')?.textContent ?? '(no #phase)';
        if (!element) return `#${elementId} is not on the page (phase ${phase})`;
        return `#${elementId} says ${JSON.stringify(element.textContent)} with class ${JSON.stringify(element.className)} (phase ${phase})`;
      },
      [id] as const,
    )
    .catch((e: unknown) => `the page could not be read: ${String(e)}`);
  const want = `class "${opts.className ?? 'ok'}"${opts.textStarts ? ` and text "${opts.textStarts}…"` : ''}`;
  const serverLines = log.about(opts.sessionId).slice(-40);
  return [
    `the page's #${id} did not show ${want}: ${(err as Error).message.split('\n')[0]}`,
    `the page: ${shown}`,
    `the server's answers to ${opts.request}: ${answered.length ? `\n  ${answered.join('\n  ')}` : 'none'}`,
    `the server's log about ${opts.sessionId}: ${serverLines.length ? `\n  ${serverLines.join('\n  ')}` : 'nothing'}`,
  ].join('\n');
}
