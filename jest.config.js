/**
 * Two projects: `fast` (unit and workflow tests: no Docker, no services) and
 * `e2e` (real Temporal, Docker, Postgres and git: see test/support/global-setup.ts for
 * what is started). A project's global setup runs only when one of its tests
 * is selected, so `npx jest test/workflow` starts none of the services.
 */
const shared = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': ['@swc/jest'] },
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
