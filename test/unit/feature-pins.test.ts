/**
 * What a snapshot build pulled is what that repo's sessions read
 * (sandbox/feature-registry.ts): the kept index of a reference is the repo's
 * own, so another repo's later pull of the same tag (moved meanwhile) does not
 * change which content a session installs.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FEATURE_LAYER_TYPE, resolveFeatures } from '../../sandbox/feature-registry';
import { featureRequests } from '../../sandbox/features';
import type { RepoTree } from '../../sandbox/repo-files';

const KEY = 'registry.test/features/tool:1';
const sha = (data: Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

describe("a feature's kept pull", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'feature-pins-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  /** A feature's layer whose install.sh says `version`. */
  async function layerOf(version: string): Promise<Buffer> {
    const folder = path.join(dir, `src-${version}`);
    await mkdir(folder);
    await writeFile(path.join(folder, 'devcontainer-feature.json'), JSON.stringify({ id: 'tool', version }));
    await writeFile(path.join(folder, 'install.sh'), `echo ${version}\n`);
    return execFileSync('tar', ['-c', '--format=posix', '-f', '-', '-C', folder, '.']);
  }

  /** A registry whose tag `1` holds `layer`. */
  function registry(layer: Buffer): typeof fetch {
    const manifest = Buffer.from(
      JSON.stringify({ layers: [{ mediaType: FEATURE_LAYER_TYPE, digest: sha(layer), size: layer.length }] }),
    );
    return (async (url: string | URL | Request) => {
      const body = String(url).includes('/manifests/') ? manifest : layer;
      return new Response(new Uint8Array(body), { status: 200 });
    }) as typeof fetch;
  }

  const requests = () => featureRequests({ [KEY]: {} }, 'devcontainer.json', '.devcontainer');
  const tree = {} as RepoTree;
  const installOf = (files: Awaited<ReturnType<typeof resolveFeatures>>) => {
    const entry = files[0].files.entries['install.sh'];
    return entry.kind === 'file' ? entry.data.toString('utf8') : '';
  };

  test("another repo's later pull of the same tag does not change what this repo's sessions install", async () => {
    const root = path.join(dir, 'features');
    const allowed = { allowed: ['registry.test'] };
    const one = await layerOf('1.0');
    const two = await layerOf('1.1');
    // Repo a's snapshot build pulls tag 1 (then 1.0); the tag moves; repo b's snapshot build pulls it (1.1).
    const pinnedA = await resolveFeatures(
      requests(),
      { root, repo: 'a', pull: allowed, fetchImpl: registry(one) },
      tree,
    );
    await resolveFeatures(requests(), { root, repo: 'b', pull: allowed, fetchImpl: registry(two) }, tree);
    // Repo a's session (no pull) installs what its snapshot build pinned.
    const session = await resolveFeatures(requests(), { root, repo: 'a' }, tree);
    expect(session[0].feature.pinned).toBe(pinnedA[0].feature.pinned);
    expect(installOf(session)).toBe('echo 1.0\n');
    // And repo b's, its own.
    const other = await resolveFeatures(requests(), { root, repo: 'b' }, tree);
    expect(installOf(other)).toBe('echo 1.1\n');
  });

  test('a repo whose snapshot build never pulled the feature does not install what another repo pulled', async () => {
    const root = path.join(dir, 'features');
    const layer = await layerOf('1.0');
    await resolveFeatures(
      requests(),
      { root, repo: 'a', pull: { allowed: ['registry.test'] }, fetchImpl: registry(layer) },
      tree,
    );
    await expect(resolveFeatures(requests(), { root, repo: 'c' }, tree)).rejects.toThrow(/was not pulled/);
  });
});
