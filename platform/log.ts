/** Logging: one pino logger per process, as JSON lines or readable ones. */
import pino from 'pino';

/** `json`: one JSON object a line; `pretty`: one readable line; `auto`: pretty on a terminal, else JSON. */
export type LogFormat = 'auto' | 'json' | 'pretty';

/** One logger per process; correlation keys are `sessionId`, `sandboxId`, `host`. */
export function createLogger(level: string = process.env.LOG_LEVEL ?? 'info', format: LogFormat = 'auto'): pino.Logger {
  const pretty = format === 'pretty' || (format === 'auto' && process.stderr.isTTY === true);
  const options = { level, base: { pid: process.pid } };
  if (!pretty) return pino(options, pino.destination(2));
  const color = process.stderr.isTTY === true && !process.env.NO_COLOR;
  return pino(options, { write: (line: string) => void process.stderr.write(prettyLine(line, color)) });
}

/** Fields a pretty line shows in their own place, or not at all (pid, hostname). */
const SHOWN_APART = new Set(['level', 'time', 'msg', 'err', 'pid', 'hostname']);

const LEVELS: Record<number, { name: string; color: number }> = {
  10: { name: 'TRACE', color: 90 },
  20: { name: 'DEBUG', color: 36 },
  30: { name: 'INFO', color: 32 },
  40: { name: 'WARN', color: 33 },
  50: { name: 'ERROR', color: 31 },
  60: { name: 'FATAL', color: 35 },
};

/**
 * One pino JSON line as a person reads it: time, level, message, then the
 * other fields as key=value, and an error's stack below. pino-pretty's job,
 * done here without a dependency.
 */
export function prettyLine(line: string, color = false): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  const { level, time, msg, err } = entry;
  const fields = Object.entries(entry).filter(([k]) => !SHOWN_APART.has(k));
  const paint = (code: number, text: string) => (color ? `\x1b[${code}m${text}\x1b[0m` : text);
  const known = LEVELS[level as number] ?? { name: String(level), color: 0 };
  const clock = typeof time === 'number' ? new Date(time).toISOString().slice(11, 23) : '';
  const rest = fields
    .map(([k, v]) => `${k}=${typeof v === 'string' && !/\s/.test(v) ? v : JSON.stringify(v)}`)
    .join(' ');
  const stack = (err as { stack?: string } | undefined)?.stack;
  const below = stack ? `\n    ${stack.split('\n').join('\n    ')}` : '';
  const message = typeof msg === 'string' ? msg : '';
  return `${clock} ${paint(known.color, known.name.padEnd(5))} ${message}${rest ? ` ${paint(90, rest)}` : ''}${below}\n`;
}

export type Logger = pino.Logger;
