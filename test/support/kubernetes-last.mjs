/**
 * A jest test sequencer: jest's own order (failed first, then the slowest, else the
 * largest files), with the Kubernetes suites (test/e2e/k8s-*.test.ts) moved last. npm test
 * builds the cluster in the background on a fresh machine (20 to 45 minutes) and starts the
 * end-to-end suites without waiting for it; the Kubernetes suites wait for that build
 * (test/support/k8s-cluster.ts), so the others run meanwhile.
 *
 * `--shard=i/n` (npm test runs the end-to-end suites in two lanes): the suites that share
 * the machine's one cluster or build drydock's images with infra/images.sh all go to the
 * last shard, one after the other; the rest are dealt out in turn, by path.
 */
import Sequencer from '@jest/test-sequencer';

const isKubernetes = (test) => /\/test\/e2e\/k8s-[^/]+\.test\.ts$/.test(test.path);
const sharesMachineWide = (test) => isKubernetes(test) || /\/test\/e2e\/deployment-run\.test\.ts$/.test(test.path);

export default class KubernetesLast extends Sequencer {
  async sort(tests) {
    const sorted = await super.sort(tests);
    return [...sorted.filter((t) => !isKubernetes(t)), ...sorted.filter(isKubernetes)];
  }

  shard(tests, { shardIndex, shardCount }) {
    const last = shardIndex === shardCount;
    const rest = tests.filter((t) => !sharesMachineWide(t)).sort((a, b) => a.path.localeCompare(b.path));
    return [
      ...rest.filter((_, i) => i % shardCount === shardIndex - 1),
      ...(last ? tests.filter(sharesMachineWide) : []),
    ];
  }
}
