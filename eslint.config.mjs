import { readdirSync } from 'node:fs';
import path from 'node:path';
import tseslint from 'typescript-eslint';

/** Folders that are not product code: tests, tools, data (and every dot-folder). */
const NOT_PRODUCT = ['node_modules', 'test', 'data', 'coverage'];

/**
 * The product folders, read from the tree rather than listed, so a new
 * capability's folder is under the function cap and the workflow boundary
 * from its first file: every top-level folder that holds TypeScript.
 * test/unit/lint-reach.test.ts holds this config against the tree.
 */
export const productFolders = readdirSync(import.meta.dirname, { withFileTypes: true })
  .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.') && !NOT_PRODUCT.includes(entry.name))
  .map((entry) => entry.name)
  .filter((dir) =>
    readdirSync(path.join(import.meta.dirname, dir), { recursive: true, encoding: 'utf8' }).some((f) =>
      f.endsWith('.ts'),
    ),
  )
  .sort();

// Workflow code is bundled into Temporal's deterministic sandbox: no Node
// built-ins, no server-side libraries, no clocks or randomness but Temporal's.
const forbiddenInWorkflows = {
  patterns: [
    { group: ['node:*'], message: 'Workflows are deterministic: no Node built-ins.' },
    {
      // Every product folder but the workflows' own: `**/sandbox/*` also covers sandbox/activities/.
      group: productFolders.filter((dir) => dir !== 'workflows').map((dir) => `**/${dir}/*`),
      allowTypeImports: true,
      message: 'Workflows may only import types from side-effecting code.',
    },
  ],
  paths: [
    'fs',
    'path',
    'os',
    'crypto',
    'child_process',
    'net',
    'http',
    'https',
    'dockerode',
    'pg',
    'pino',
    '@octokit/rest',
    '@temporalio/client',
    '@temporalio/worker',
    '@temporalio/activity',
  ].map((name) => ({ name, message: 'Workflows are deterministic: this module has side effects.' })),
};

export default tseslint.config(
  { ignores: ['node_modules/**', '.tools/**', 'data/**', 'coverage/**', 'bin/**'] },
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['workflows/**/*.ts'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', forbiddenInWorkflows] },
  },
  {
    // A function that needs a scroll bar to read is two functions.
    // Every product folder, the benchmarks included; tests are exempt (a test reads top to bottom).
    files: productFolders.map((dir) => `${dir}/**/*.ts`),
    rules: { 'max-lines-per-function': ['error', { max: 120, skipBlankLines: true, skipComments: true }] },
  },
  { files: ['**/*.mjs', '**/*.js'], ...tseslint.configs.disableTypeChecked },
);
