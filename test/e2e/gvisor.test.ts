/**
 * The hostile-agent suite (hardening.test.ts) again with every container of
 * its sessions (sandbox, browser) under gVisor: DRYDOCK_DOCKER_RUNTIME=runsc,
 * the runtime infra/runsc.sh registers. Where gVisor differs from runc the
 * probes say so (docs/security.md, "gVisor").
 */
process.env.DRYDOCK_TEST_RUNTIME = 'runsc';
// eslint-disable-next-line @typescript-eslint/no-require-imports
require('./hardening.test');
