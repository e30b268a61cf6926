/**
 * For the dev stack (`drydock up`): a personal token for the local user in
 * `<data dir>/dev-token` (mode 0600), so the console and `drydock login`
 * work out of the box. Made once, and again when it no longer names them.
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { isPersonName } from './names';
import type { PersonalTokens } from './personal-tokens';

const A_YEAR_MS = 365 * 24 * 3600_000;

export async function ensureDevToken(tokens: PersonalTokens, dataDir: string, user: string): Promise<string> {
  const file = path.join(dataDir, 'dev-token');
  const person = isPersonName(user)
    ? user
    : user.replace(/[^A-Za-z0-9._@-]/g, '-').replace(/^[^A-Za-z0-9]+/, '') || 'developer';
  const existing = (await readFile(file, 'utf8').catch(() => '')).trim();
  if (existing && (await tokens.identify(existing))?.person === person) return file;
  const issued = await tokens.issue(person, 'cli', A_YEAR_MS);
  await writeFile(file, `${issued.token}\n`, { mode: 0o600 });
  return file;
}
