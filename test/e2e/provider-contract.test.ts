/**
 * The provider contract (test/support/provider-contract.ts) on this host's
 * Docker engine: the Docker provider, and the test-only provider that reaches
 * the same engine over its API alone with no host folder
 * (test/support/api-only-provider.ts), which shows that a third provider is
 * its lifecycle and one streaming exec. The Kubernetes provider runs the same
 * contract in test/e2e/k8s-sandbox.test.ts.
 */
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import Docker from 'dockerode';
import { pack } from 'tar-stream';
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

  test("a first command runs as the sandbox's first process, as an exec would, after the files given; its result comes back, the keeper stays", async () => {
    expect(provider.capabilities.firstCommand).toBe(true);
    const [ok, failing] = ['drydock-contract-first-ok', 'drydock-contract-first-failing'];
    try {
      const probe = 'echo out; echo err >&2; id -un; pwd; printf "%s" "$HOME"';
      const made = await provider.create({ ...(await specOf(ok, true)), first: { argv: ['sh', '-c', probe] } });
      expect(made.created).toBe(true);
      const asExec = await provider.exec(ok, ['sh', '-c', probe]);
      expect(made.first).toEqual({ exitCode: 0, stdout: asExec.stdout, stderr: Buffer.from('err\n') });
      // The keeper is pid 1's only child, `sleep infinity`, as without a first command.
      const children = await provider.exec(ok, [
        'sh',
        '-c',
        'for d in /proc/[0-9]*; do read -r s < $d/stat; set -- ${s##*) }; [ "$2" = 1 ] && tr "\\0" " " < $d/cmdline && echo; done',
      ]);
      expect(
        children.stdout
          .toString()
          .split('\n')
          .filter((l) => l && !l.startsWith('sh -c')),
      ).toEqual(['sleep infinity ']);
      // A retry finds the sandbox: no first command again.
      expect(await provider.create({ ...(await specOf(ok, true)), first: { argv: ['false'] } })).toEqual({
        id: made.id,
        created: false,
      });

      // A retry that finds it made but never started (its worker died between create and start)
      // makes it anew and runs its first command: started as it was, its first process would
      // prepare the workspace a second time beside the retry's own preparation.
      await provider.destroy(ok);
      await new Docker().createContainer({ name: ok, Image: testConfig().DRYDOCK_BASE_IMAGE!, Cmd: ['true'] });
      const again = await provider.create({ ...(await specOf(ok, true)), first: { argv: ['sh', '-c', 'echo anew'] } });
      expect(again).toMatchObject({ created: true, first: { exitCode: 0, stdout: Buffer.from('anew\n') } });
      expect((await provider.exec(ok, ['true'])).exitCode).toBe(0);

      // Files put in before it runs (the cold path's working tree): there for it, owned as their headers say.
      const tree = pack();
      tree.entry({ name: 'greeting.txt', uid: 1000, gid: 1000 }, 'hello\n');
      tree.finalize();
      await provider.destroy(ok);
      const seeing = ['sh', '-c', 'cat /workspace/greeting.txt; stat -c %u /workspace/greeting.txt'];
      const withFiles = await provider.create({
        ...(await specOf(ok, true)),
        first: { argv: seeing, files: { tar: Promise.resolve(Readable.from(tree)), dest: '/workspace' } },
      });
      expect(withFiles.first).toMatchObject({ exitCode: 0, stdout: Buffer.from('hello\n1000\n') });

      const argv = ['sh', '-c', 'echo "$1" >&2; exit 5', 'sh', 'it failed'];
      const bad = await provider.create({ ...(await specOf(failing, true)), first: { argv } });
      expect(bad.first).toMatchObject({ exitCode: 5, stderr: Buffer.from('it failed\n') });
      expect((await provider.exec(failing, ['true'])).exitCode).toBe(0); // still up
    } finally {
      await provider.destroy(ok);
      await provider.destroy(failing);
    }
  });

  test('removals of one sandbox at once (a teardown beside a fault or the reaper) all succeed, and its disk goes', async () => {
    const name = 'drydock-contract-removed-twice';
    await provider.create(await specOf(name, true));
    const disk = path.join(provider.storage.root, 'sandboxes', name);
    expect(existsSync(disk)).toBe(true);
    // The container already gone (a fault's removal under way, drydock's own: with its volumes), its disk still
    // mounted: each call removes the disk.
    await new Docker().getContainer(name).remove({ force: true, v: true });
    const removals = await Promise.allSettled([1, 2, 3, 4].map(() => provider.destroy(name)));
    expect(removals.map((r) => (r.status === 'rejected' ? String(r.reason) : r.status))).toEqual([
      'fulfilled',
      'fulfilled',
      'fulfilled',
      'fulfilled',
    ]);
    expect(existsSync(disk)).toBe(false);
  });
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
