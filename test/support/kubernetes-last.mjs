/**
 * A jest test sequencer: jest's own order (failed first, then the slowest, else the
 * largest files), with the Kubernetes suites (test/e2e/k8s-*.test.ts) moved last. npm test
 * builds the cluster in the background on a fresh machine (20 to 45 minutes) and starts the
 * end-to-end suites without waiting for it; the Kubernetes suites wait for that build
 * (test/support/k8s-cluster.ts), so the others run meanwhile.
 */
import Sequencer from '@jest/test-sequencer';

const isKubernetes = (test) => /\/test\/e2e\/k8s-[^/]+\.test\.ts$/.test(test.path);

export default class KubernetesLast extends Sequencer {
  async sort(tests) {
    const sorted = await super.sort(tests);
    return [...sorted.filter((t) => !isKubernetes(t)), ...sorted.filter(isKubernetes)];
  }
}
