/**
 * The provider contract (test/support/provider-contract.ts) on this host's
 * Docker engine: the Docker provider, and the test-only provider that reaches
 * the same engine over its API alone with no host folder
 * (test/support/api-only-provider.ts), which shows that a third provider is
 * its lifecycle and one streaming exec. The Kubernetes provider runs the same
 * contract in test/e2e/k8s-sandbox.test.ts.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DockerProvider } from '../../sandbox/docker/provider';
import { imageStoreOf, LABELS, type SandboxProvider, type SandboxSpec } from '../../sandbox/provider';
import { ApiOnlyProvider } from '../support/api-only-provider';
import { testConfig } from '../support/helpers';
import { providerContract } from '../support/provider-contract';

const MiB = 1024 ** 2;

async function specOf(name: string, hostFolders: boolean): Promise<SandboxSpec> {
  const spec: SandboxSpec = {
    name,
    image: testConfig().DRYDOCK_BASE_IMAGE!,
    labels: { [LABELS.session]: name, [LABELS.host]: 'contract-test', [LABELS.expires]: new Date().toISOString() },
    cpus: 1,
    memoryBytes: 256 * MiB,
    pids: 128,
    tmpBytes: 16 * MiB,
    diskBytes: 1024 * MiB,
    // The API provider mounts none: the field is required, and a spec that asks for more it refuses.
    egressDir: hostFolders ? await mkdtemp(path.join(tmpdir(), 'drydock-egress-')) : '',
  };
  return spec;
}

describe('the Docker provider', () => {
  const provider = new DockerProvider();
  providerContract({ provider: () => provider, spec: (name) => specOf(name, true) });
});

describe('a test-only provider over the Docker API alone, with no host folders', () => {
  const provider = new ApiOnlyProvider();
  providerContract({ provider: () => provider, spec: (name) => specOf(name, false) });

  test('it says it mounts no host folder, and refuses a spec that asks for one', async () => {
    expect(provider.capabilities.hostFolders).toBe(false);
    const spec = { ...(await specOf('drydock-contract-mounts', false)), mounts: [{ source: '/tmp', target: '/x' }] };
    await expect(provider.create(spec)).rejects.toThrow(/mounts no host folder/);
  });

  test('it keeps no images (no image store, an optional part): what needs one is refused in one line', () => {
    expect((provider as SandboxProvider).imageStore).toBeUndefined();
    expect(() => imageStoreOf(provider)).toThrow(/^the api-only sandbox provider keeps no images$/);
    expect(imageStoreOf(new DockerProvider())).toBeDefined();
  });
});
