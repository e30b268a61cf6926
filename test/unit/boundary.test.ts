/**
 * Workflow code is bundled into Temporal's deterministic sandbox: it may not
 * import side effects. Every other product folder (read from the tree, so a new
 * one is covered from its first file) is side-effect code that workflows name
 * only with `import type`.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { productFolders, productSources, root } from '../support/product-folders';

const forbidden =
  /^(node:|fs$|path$|os$|crypto$|child_process$|net$|dockerode|pg|pino|@octokit|@temporalio\/(client|worker|activity))/;
const files = productSources.filter((file) => file.startsWith('workflows/'));
const sideEffectFolders = productFolders.filter((dir) => dir !== 'workflows');

test('the workflow folder and its sub-folders are all checked', () => {
  expect(files).toEqual(expect.arrayContaining(['workflows/api.ts', 'workflows/session/workflow.ts']));
  expect(sideEffectFolders).toEqual(expect.arrayContaining(['activities', 'identity', 'sandbox', 'slack']));
});

test.each(files)('%s imports no side effects', (file) => {
  const source = readFileSync(path.join(root, file), 'utf8');
  const imports = [...source.matchAll(/^(?:import|export)\s+(type\s+)?[^'";]*?from\s+'([^']+)'/gm)];
  for (const [, typeOnly, from] of imports) {
    expect(forbidden.test(from) ? `${from}` : 'ok').toBe('ok');
    if (!from.startsWith('.')) continue;
    const target = path.relative(root, path.resolve(root, path.dirname(file), from)).split(path.sep)[0];
    if (sideEffectFolders.includes(target)) {
      expect(typeOnly ? 'type-only' : `value import of ${from}`).toBe('type-only');
    }
  }
});
