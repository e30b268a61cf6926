/**
 * The input schemas (zod), loaded on first use. A workflow evaluates every
 * module it imports at each start, and evaluating the schemas costs every new
 * session 15–40 ms (units.ts), so workflow code that parses an input (parallel
 * attempts, a pilot, a script follow-up) loads them here instead of importing
 * them. A synchronous load: update validators are synchronous.
 */
/* eslint-disable @typescript-eslint/no-require-imports */

export const sessionSchemas = (): typeof import('./input') => require('./input') as typeof import('./input');

export const pilotSchemas = (): typeof import('./pilot/input') =>
  require('./pilot/input') as typeof import('./pilot/input');
