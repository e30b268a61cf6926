/**
 * A jest test sequencer: the order of a lane's test files and the split of the e2e project
 * between npm test's two lanes (infra/test.sh, docs/testing.md).
 *
 * Order: the heaviest end-to-end suites first (HEAVY: image builds in gVisor, several
 * workers), then jest's own order (failed first, then the slowest, else the largest files),
 * with the suites that wait for a first-run build moved last: the Gitea suites
 * (test/e2e/gitea-*.test.ts), then the Kubernetes ones (test/e2e/k8s-*.test.ts). npm test
 * builds Gitea and the cluster in the background on a fresh machine and starts the
 * end-to-end suites without waiting for them; those suites wait for their build
 * (test/support/gitea.ts, test/support/k8s-cluster.ts), so the others run meanwhile.
 *
 * Split (`--shard 1/2` and `--shard 2/2`; any other count is jest's own split by hash):
 * 2/2 is the SECOND_LANE files of the e2e project, 1/2 all the others. npm test runs 2/2 in
 * its second lane after the fast project, beside the first lane: light files only (scripted
 * sessions, no image build, no browser, no more than a worker or two), while the first lane
 * has run its HEAVY files first, so that two heavy files never run at once on 2 cores.
 */
import path from 'node:path';
import Sequencer from '@jest/test-sequencer';

const isGitea = (test) => /\/test\/e2e\/gitea-[^/]+\.test\.ts$/.test(test.path);
const isKubernetes = (test) => /\/test\/e2e\/k8s-[^/]+\.test\.ts$/.test(test.path);
const e2eName = (test) =>
  path.basename(path.dirname(test.path)) === 'e2e' &&
  test.context.config.displayName?.name === 'e2e' &&
  path.basename(test.path, '.test.ts');

/** The first lane's first files, slowest first (seconds alone in a quiet run: 357, 165, 144, 127, 88). */
export const HEAVY = ['builder', 'environments', 'services', 'gvisor', 'multi-host'];

/**
 * The second lane's e2e files, after the fast suite. Beside the load neighbour (session 24,
 * the drills still in this lane then) the first lane took 2,972 s and this one 3,189 (fast
 * 849, drills 1,204, these 1,136); the drills have a lane of their own now, so audit,
 * snapshots, hardening, operator-environment and script-children (425 s there) came back
 * from the first. Not here: image builds in gVisor, Chromium, the timing-sensitive pilot and
 * review, the Kubernetes and Gitea suites.
 */
export const SECOND_LANE = [
  'agent',
  'agent-clis',
  'webhooks',
  'publish',
  'cli',
  'session',
  'temporal-pg',
  'children-crash',
  'agent-cli-mcp',
  'telemetry',
  'hosts',
  'roles',
  'admission',
  'dev-stack',
  'attach',
  'review-diff',
  'pool',
  'ci-followup',
  'gitlab',
  'agent-app',
  'park',
  'memory',
  'repos',
  'mcp-stdio',
  'attempts',
  'status',
  'provision-attempts',
  'followup',
  'snapshot-egress',
  'plan',
  'provider-contract',
  'provider-check',
  'agent-cli-children',
  'leftovers',
  'cow-workspace',
  'git-credentials',
  'reaper',
  'service-image-users',
  'audit',
  'snapshots',
  'hardening',
  'operator-environment',
  'script-children',
];

const inSecondLane = (test) => SECOND_LANE.includes(e2eName(test));

export default class KubernetesLast extends Sequencer {
  shard(tests, options) {
    if (options.shardCount !== 2) return super.shard(tests, options);
    return tests.filter((t) => inSecondLane(t) === (options.shardIndex === 2));
  }

  async sort(tests) {
    const sorted = await super.sort(tests);
    const heavy = HEAVY.flatMap((name) => sorted.filter((t) => e2eName(t) === name));
    const early = sorted.filter((t) => !heavy.includes(t) && !isGitea(t) && !isKubernetes(t));
    return [...heavy, ...early, ...sorted.filter(isGitea), ...sorted.filter(isKubernetes)];
  }
}
