/**
 * A jest test sequencer: jest's own order (failed first, then the slowest, else the
 * largest files), with the suites that wait for a first-run build moved last: the Gitea
 * suites (test/e2e/gitea-*.test.ts), then the Kubernetes ones (test/e2e/k8s-*.test.ts).
 * npm test builds Gitea and the cluster in the background on a fresh machine and starts
 * the end-to-end suites without waiting for them; those suites wait for their build
 * (test/support/gitea.ts, test/support/k8s-cluster.ts), so the others run meanwhile.
 */
import Sequencer from '@jest/test-sequencer';

const isGitea = (test) => /\/test\/e2e\/gitea-[^/]+\.test\.ts$/.test(test.path);
const isKubernetes = (test) => /\/test\/e2e\/k8s-[^/]+\.test\.ts$/.test(test.path);

export default class KubernetesLast extends Sequencer {
  async sort(tests) {
    const sorted = await super.sort(tests);
    const early = sorted.filter((t) => !isGitea(t) && !isKubernetes(t));
    return [...early, ...sorted.filter(isGitea), ...sorted.filter(isKubernetes)];
  }
}
