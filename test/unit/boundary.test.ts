/** Workflow code is bundled into Temporal's deterministic sandbox: it may not import side effects. */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const dir = path.join(__dirname, '../../workflows');
const forbidden =
  /^(node:|fs$|path$|os$|crypto$|child_process$|net$|dockerode|pg|pino|@octokit|@temporalio\/(client|worker|activity))/;
const files = readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));

test('the workflow folder and its sub-folders are all checked', () => {
  expect(files).toEqual(expect.arrayContaining(['api.ts', path.join('session', 'workflow.ts')]));
});

test.each(files)('workflows/%s imports no side effects', (file) => {
  const source = readFileSync(path.join(dir, file), 'utf8');
  const imports = [...source.matchAll(/^import\s+(type\s+)?[^'"]*from\s+'([^']+)'/gm)];
  for (const [, typeOnly, from] of imports) {
    expect(forbidden.test(from) ? `${from}` : 'ok').toBe('ok');
    if (/^(\.\.\/)+(platform|store|models|github|repos|review|sandbox|activities|workers|cli)(\/|$)/.test(from)) {
      expect(typeOnly ? 'type-only' : `value import of ${from}`).toBe('type-only');
    }
  }
});
