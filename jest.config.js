/**
 * Three projects: `fast` (unit and workflow tests: no Docker, no services),
 * `e2e` (real Temporal, Docker, Postgres and git: see test/support/global-setup.ts
 * for what is started) and `drills` (the end-to-end fault drills: kills and
 * restarts of their own workers, sandboxes and servers, mostly waiting out
 * heartbeat timeouts). A project's global setup runs only when one of its tests
 * is selected, so `npx jest test/workflow` starts none of the services; npm test
 * runs `drills` beside `e2e` (each with its own services), since the drills
 * mostly wait.
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
const services = {
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  setupFilesAfterEnv: ['<rootDir>/test/support/run-tmp.ts'],
};
const DRILLS = ['faults', 'chaos', 'crash', 'agent-crash', 'dead-sandbox'].map((f) => `test/e2e/${f}.test.ts`);

module.exports = {
  testTimeout: 180_000,
  maxWorkers: 1,
  // A handle a failed suite left open (a server its afterAll never reached) must not hold a
  // lane until the run's deadline, as it once did for 45 minutes: jest exits once its tests
  // and global teardown are done, with the tests' result (`--detectOpenHandles` finds a leak).
  forceExit: true,
  reporters: ['default', '<rootDir>/test/support/progress-reporter.mjs'],
  // The Kubernetes suites last: the others run while npm test's background build of the cluster ends.
  testSequencer: '<rootDir>/test/support/kubernetes-last.mjs',
  projects: [
    {
      ...shared,
      displayName: 'fast',
      testMatch: ['<rootDir>/test/unit/**/*.test.ts', '<rootDir>/test/workflow/**/*.test.ts'],
    },
    {
      ...shared,
      ...services,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/e2e/**/*.test.ts'],
      testPathIgnorePatterns: ['/node_modules/', ...DRILLS.map((f) => `<rootDir>/${f}$`)],
    },
    {
      ...shared,
      ...services,
      displayName: 'drills',
      testMatch: DRILLS.map((f) => `<rootDir>/${f}`),
    },
  ],
};
