/**
 * Two projects: `fast` (unit and workflow tests: no Docker, no services) and
 * `e2e` (real Temporal, Docker, Postgres and git: see test/support/global-setup.ts for
 * what is started). A project's global setup runs only when one of its tests
 * is selected, so `npx jest test/workflow` starts none of the services.
 */
// ES-module-only packages (the Kubernetes client and what it imports): Jest's own
// module loader cannot require them, so they are compiled to CommonJS like our code.
const esmOnly = ['@kubernetes/client-node', 'openid-client', 'oauth4webapi', 'jose'];

const shared = {
  testEnvironment: 'node',
  transform: {
    '^.+\\.ts$': ['@swc/jest'],
    [`/node_modules/(${esmOnly.join('|')})/.+\\.js$`]: ['@swc/jest', { module: { type: 'commonjs' } }],
  },
  transformIgnorePatterns: [`/node_modules/(?!(${esmOnly.join('|')})/)`],
};

module.exports = {
  testTimeout: 180_000,
  maxWorkers: 1,
  projects: [
    {
      ...shared,
      displayName: 'fast',
      testMatch: ['<rootDir>/test/unit/**/*.test.ts', '<rootDir>/test/workflow/**/*.test.ts'],
    },
    {
      ...shared,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/e2e/**/*.test.ts'],
      globalSetup: '<rootDir>/test/support/global-setup.ts',
      globalTeardown: '<rootDir>/test/support/global-teardown.ts',
    },
  ],
};
