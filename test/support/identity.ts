/** Personal tokens for test people, issued in the suite's database as `drydock token issue` would. */
import { Pool } from 'pg';
import { PersonalTokens } from '../../identity/personal-tokens';
import { migrate } from '../../store/db';

export async function personalTokens<P extends string>(...people: P[]): Promise<Record<P, string>> {
  const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
  try {
    await migrate(pool);
    const tokens = new PersonalTokens(pool);
    const issued = {} as Record<P, string>;
    for (const person of people) issued[person] = (await tokens.issue(person, 'cli', 3600_000)).token;
    return issued;
  } finally {
    await pool.end();
  }
}
