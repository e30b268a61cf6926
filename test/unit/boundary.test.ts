/** Workflow code is bundled into Temporal's deterministic sandbox: it may not import side effects. */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const dir = path.join(__dirname, '../../workflows');
const forbidden =
  /^(node:|fs$|path$|os$|crypto$|child_process$|net$|dockerode|pg|pino|@octokit|@temporalio\/(client|worker|activity))/;

test.each(readdirSync(dir).filter((f) => f.endsWith('.ts')))('workflows/%s imports no side effects', (file) => {
  const source = readFileSync(path.join(dir, file), 'utf8');
  const imports = [...source.matchAll(/^import\s+(type\s+)?[^'"]*from\s+'([^']+)'/gm)];
  for (const [, typeOnly, from] of imports) {
    expect(forbidden.test(from) ? `${from}` : 'ok').toBe('ok');
    if (/^\.\.\/(activities|lib|workers|cli)\//.test(from) || from === '../activities') {
      expect(typeOnly ? 'type-only' : `value import of ${from}`).toBe('type-only');
    }
  }
});
