import tseslint from 'typescript-eslint';

// Workflow code is bundled into Temporal's deterministic sandbox: no Node
// built-ins, no server-side libraries, no clocks or randomness but Temporal's.
const forbiddenInWorkflows = {
  patterns: [
    { group: ['node:*'], message: 'Workflows are deterministic: no Node built-ins.' },
    {
      group: [
        '**/platform/*',
        '**/store/*',
        '**/models/*',
        '**/github/*',
        '**/repos/*',
        '**/review/*',
        '**/sandbox/*',
        '**/sandbox/activities/*',
        '**/activities/*',
        '**/workers/*',
        '**/cli/*',
        '**/figures/*',
        '**/mcp/*',
      ],
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
    // Every product folder and the benchmarks; tests are exempt (a test reads top to bottom).
    files: [
      'workflows/**/*.ts',
      'activities/**/*.ts',
      'sandbox/**/*.ts',
      'platform/**/*.ts',
      'store/**/*.ts',
      'models/**/*.ts',
      'github/**/*.ts',
      'repos/**/*.ts',
      'workers/**/*.ts',
      'cli/**/*.ts',
      'figures/**/*.ts',
      'mcp/**/*.ts',
      'sandbox-images/**/*.ts',
      'bench/**/*.ts',
    ],
    rules: { 'max-lines-per-function': ['error', { max: 120, skipBlankLines: true, skipComments: true }] },
  },
  { files: ['**/*.mjs', '**/*.js'], ...tseslint.configs.disableTypeChecked },
);
