import pino from 'pino';

/** One logger per process; correlation keys are `sessionId`, `sandboxId`, `host`. */
export function createLogger(level: string = process.env.LOG_LEVEL ?? 'info'): pino.Logger {
  return pino({ level, base: { pid: process.pid } }, pino.destination(2));
}

export type Logger = pino.Logger;
