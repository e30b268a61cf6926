/**
 * The lint's guards reach every product folder: the 120-line function cap and
 * the workflow import boundary of eslint.config.mjs, asked of ESLint itself for
 * a file in each folder the tree has (not a list kept beside the config).
 */
import { execFileSync } from 'node:child_process';
import { productFolders, root } from '../support/product-folders';

/** ESLint's config for `<folder>/probe.ts` of every folder, computed in a process of its own (ESLint's config is an ES module). */
function lintConfigs(): Record<string, { rules: Record<string, unknown> }> {
  const script = `
    const { ESLint } = require('eslint');
    const eslint = new ESLint({ cwd: process.cwd() });
    Promise.all(process.argv.slice(1).map((dir) => eslint.calculateConfigForFile(dir + '/probe.ts')))
      .then((configs) => console.log(JSON.stringify(Object.fromEntries(configs.map((c, i) => [process.argv[i + 1], c])))));`;
  return JSON.parse(execFileSync(process.execPath, ['-e', script, ...productFolders], { cwd: root, encoding: 'utf8' }));
}

const configs = lintConfigs();

test.each(productFolders)('%s/ is under the 120-line function cap', (dir) => {
  expect(configs[dir].rules['max-lines-per-function']).toEqual([
    2,
    expect.objectContaining({ max: 120, skipBlankLines: true, skipComments: true }),
  ]);
});

test('workflows may import only types from every other product folder', () => {
  const [, boundary] = configs.workflows.rules['@typescript-eslint/no-restricted-imports'] as [
    number,
    { patterns: { group: string[]; allowTypeImports?: boolean }[] },
  ];
  const typesOnly = boundary.patterns.filter((p) => p.allowTypeImports).flatMap((p) => p.group);
  const others = productFolders.filter((dir) => dir !== 'workflows');
  expect(others.filter((dir) => !typesOnly.includes(`**/${dir}/*`))).toEqual([]);
  expect(others.length).toBeGreaterThan(10);
});
