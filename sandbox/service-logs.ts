/**
 * A sandbox's service logs (and its app's) as the built-in loop's
 * `service_logs` tool and the review console read them (docs/services.md,
 * "Logs"): the last lines, bounded in lines and characters, as plain text
 * (a service's output is the repo's, so its terminal sequences and control
 * characters are dropped before a model or a page sees them).
 */
import { APP_LOG_IN_SANDBOX } from '../workflows/rules/verification';
import { plainLogText } from '../platform/scrub';
import type { SandboxProvider } from './provider';

/** Lines a reader gets when it does not say, and the most it may ask for. */
export const LOG_LINES = { default: 100, max: 1_000 } as const;
/** The most characters of one log a reader gets (the newest kept). */
export const LOG_CHARS = 64_000;
/** The name the app's log is read by, beside the services' names. */
export const APP_LOG_NAME = 'app';

/** The companion that runs a sandbox's app for its agent (sandbox/activities/agent-app.ts). */
export function agentAppContainerName(sandbox: string): string {
  return `${sandbox}-app`;
}
/** The companion that runs a sandbox's features' postStartCommands (sandbox/activities/agent-app.ts). */
export function featureStartContainerName(sandbox: string): string {
  return `${sandbox}-start`;
}
/** Where that companion's app writes its output: its own /tmp (the sandbox's home is read-only there). */
export const AGENT_APP_LOG = '/tmp/drydock-app.log';

/** The last `lines` lines of `text`, at most `chars` characters (cut at a line's start when it can be). */
export function lastLines(text: string, lines: number, chars = LOG_CHARS): string {
  const all = text.endsWith('\n') ? text.slice(0, -1).split('\n') : text.split('\n');
  let kept = all.slice(-Math.max(1, lines)).join('\n');
  if (kept.length > chars) {
    kept = kept.slice(-chars);
    const start = kept.indexOf('\n');
    if (start >= 0 && start < kept.length - 1) kept = kept.slice(start + 1);
  }
  return kept;
}

/** How many lines a request gets: `asked` when it is a whole number within bounds, else the default or the most. */
export function linesAsked(asked: unknown): number {
  if (typeof asked !== 'number' || !Number.isFinite(asked) || asked < 1) return LOG_LINES.default;
  return Math.min(Math.floor(asked), LOG_LINES.max);
}

/** A log read, or why it could not be. */
export type LogRead = { ok: true; text: string } | { ok: false; error: string };

/**
 * The last `lines` lines of a service's log (or the app's, by APP_LOG_NAME,
 * read from APP_LOG_IN_SANDBOX), as plain text; an unknown name is
 * answered with the names there are.
 */
export async function readLog(
  sandboxes: SandboxProvider,
  sandbox: string,
  name: string,
  lines: number,
): Promise<LogRead> {
  const services = (await sandboxes.services?.list(sandbox)) ?? [];
  if (services.includes(name)) {
    const text = await sandboxes.services!.log(sandbox, name, lines);
    return { ok: true, text: lastLines(plainLogText(text), lines) };
  }
  if (name === APP_LOG_NAME) {
    const app = await appLog(sandboxes, sandbox, lines);
    if (app !== undefined) return { ok: true, text: app };
  }
  const there = [...services, ...((await appLog(sandboxes, sandbox, 1)) !== undefined ? [APP_LOG_NAME] : [])];
  return {
    ok: false,
    error: there.length
      ? `no service "${name}" in this sandbox: its logs are ${there.map((n) => `"${n}"`).join(', ')}`
      : `no service "${name}": this sandbox has no services and no app running`,
  };
}

/**
 * The app's log's last lines: the app kept for the agent's, else the one the
 * browser check started in the sandbox; undefined when neither ran.
 */
async function appLog(sandboxes: SandboxProvider, sandbox: string, lines: number): Promise<string | undefined> {
  const companion = agentAppContainerName(sandbox);
  if (await sandboxes.exists(companion)) return logFile(sandboxes, companion, AGENT_APP_LOG, lines);
  return logFile(sandboxes, sandbox, APP_LOG_IN_SANDBOX, lines);
}

async function logFile(sandboxes: SandboxProvider, container: string, file: string, lines: number) {
  // Its last 4 MiB at most, so a log of endless lines costs the worker no more.
  const script = 'test -f "$1" || exit 3; tail -c 4194304 -- "$1" | tail -n "$2"';
  const run = await sandboxes.exec(container, ['sh', '-c', script, 'app-log', file, String(lines)]);
  if (run.exitCode !== 0) return undefined;
  return lastLines(plainLogText(run.stdout.toString()), lines);
}
