/** No merge's conflict markers are committed: in code the type check finds them, in docs only this does (one reached docs/security.md once). */
import { execFileSync } from 'node:child_process';
import path from 'node:path';

test('no tracked file holds a conflict marker', () => {
  const root = path.join(__dirname, '..', '..');
  let found = '';
  try {
    found = execFileSync('git', ['grep', '-n', '-E', '^(<<<<<<< |>>>>>>> |=======$)', '--', '.'], {
      cwd: root,
      encoding: 'utf8',
    });
  } catch (err) {
    // git grep exits 1 when nothing matches.
    if ((err as { status?: number }).status !== 1) throw err;
  }
  expect(found).toBe('');
});
