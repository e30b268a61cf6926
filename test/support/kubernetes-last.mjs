/**
 * A jest test sequencer: the order of a lane's test files and the split of the e2e project
 * between npm test's three lanes (infra/test.sh, docs/testing.md).
 *
 * Order: the heaviest end-to-end suites first (HEAVY: image builds in gVisor, several
 * workers), then jest's own order (failed first, then the slowest, else the largest files),
 * with the suites that wait for a first-run build moved last: the Gitea suites
 * (test/e2e/gitea-*.test.ts), then the Kubernetes ones (test/e2e/k8s-*.test.ts). npm test
 * builds Gitea and the cluster in the background on a fresh machine and starts the
 * end-to-end suites without waiting for them; those suites wait for their build
 * (test/support/gitea.ts, test/support/k8s-cluster.ts), so the others run meanwhile.
 *
 * Split (`--shard 1/3`, `2/3` and `3/3`; any other count is jest's own split by hash): 2/3
 * is the SECOND_LANE files of the e2e project, 3/3 the THIRD_LANE ones and the Kubernetes
 * suites, 1/3 all the others. The Kubernetes suites share one cluster per jest (its lock is
 * held until that jest ends: test/support/k8s-cluster.ts), so they stay in one lane: the
 * third, which ended about 9 minutes before the first in the loaded runs of session 28 (and 19
 * minutes before it on a fresh machine, where the first lane's builds in gVisor share the
 * cores with the first-run Go builds, and the cluster's build ends late).
 * npm test runs 2/3 in its second lane after the fast project and 3/3 in its third after the
 * drills, beside the first lane: light files only (scripted sessions, no image build in
 * gVisor, no more than a worker or two; the third lane's Kubernetes suites come 30 minutes
 * in), while the first lane has run its HEAVY files first, so that two heavy files never run
 * at once on 2 cores.
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
 * The second lane's e2e files, after the fast suite (2,208 s beside the load neighbour in
 * session 25's run, before four of them went to THIRD_LANE). Not here: image builds in
 * gVisor, Chromium, the timing-sensitive pilot and review, the Kubernetes and Gitea suites.
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
  'script-children',
];

/**
 * The third lane's e2e files, after the drills (which end 20 minutes before the other lanes
 * under load: session 25's run, lanes 3,438, 1,361 + 2,208 and 2,238 s). Beside the load
 * neighbour these took 766 s: audit 213, snapshots 137, operator-environment 121, hardening
 * 115 (from the second lane), teams 104 and real-registry 76 (from the first, a browser's
 * sign-in and one snapshot build of a real npm project: no build in gVisor).
 */
export const THIRD_LANE = ['audit', 'snapshots', 'operator-environment', 'hardening', 'teams', 'real-registry'];

const laneOf = (test) => {
  const name = e2eName(test);
  return SECOND_LANE.includes(name) ? 2 : THIRD_LANE.includes(name) || (name && isKubernetes(test)) ? 3 : 1;
};

export default class KubernetesLast extends Sequencer {
  shard(tests, options) {
    if (options.shardCount !== 3) return super.shard(tests, options);
    return tests.filter((t) => laneOf(t) === options.shardIndex);
  }

  async sort(tests) {
    const sorted = await super.sort(tests);
    const heavy = HEAVY.flatMap((name) => sorted.filter((t) => e2eName(t) === name));
    const early = sorted.filter((t) => !heavy.includes(t) && !isGitea(t) && !isKubernetes(t));
    return [...heavy, ...early, ...sorted.filter(isGitea), ...sorted.filter(isKubernetes)];
  }
}
