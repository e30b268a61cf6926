/**
 * Image references and where an image may come from (workflows/rules/images.ts):
 * Docker's normalization, the operator's registry allowlist, pinning by digest, images no repo may start from.
 */
import {
  formatImageReference,
  imageSource,
  isRegistryName,
  parseImageReference,
  pinnedReference,
  repoMadeImage,
} from '../../workflows/rules/images';

const DIGEST = `sha256:${'ab'.repeat(32)}`;

test('references are normalized the way Docker does', () => {
  expect(parseImageReference('postgres:17')).toEqual({
    registry: 'docker.io',
    repository: 'library/postgres',
    tag: '17',
  });
  expect(parseImageReference('bitnami/redis')).toEqual({ registry: 'docker.io', repository: 'bitnami/redis' });
  expect(parseImageReference('index.docker.io/redis')).toEqual({ registry: 'docker.io', repository: 'library/redis' });
  expect(parseImageReference('ghcr.io/org/app/web:v1.2')).toEqual({
    registry: 'ghcr.io',
    repository: 'org/app/web',
    tag: 'v1.2',
  });
  expect(parseImageReference(`127.0.0.1:5000/postgres:17@${DIGEST}`)).toEqual({
    registry: '127.0.0.1:5000',
    repository: 'postgres',
    tag: '17',
    digest: DIGEST,
  });
  expect(parseImageReference('localhost/app')).toEqual({ registry: 'localhost', repository: 'app' });
  expect(formatImageReference(parseImageReference('mcr.microsoft.com/devcontainers/python:3') as never)).toBe(
    'mcr.microsoft.com/devcontainers/python:3',
  );
});

test('a malformed reference says what is wrong', () => {
  for (const [ref, why] of [
    ['Postgres', /lowercase/],
    ['postgres:', /tag/],
    ['postgres@sha256:12', /digest/],
    ['my image', /spaces/],
    ['', /empty/],
    ['-bad.host/x', /registry/],
  ] as const) {
    const parsed = parseImageReference(ref);
    expect('problem' in parsed && parsed.problem).toMatch(why);
  }
});

test('pinning keeps the registry and repository, and replaces the tag by the digest', () => {
  const ref = parseImageReference('127.0.0.1:5000/postgres:17');
  expect(pinnedReference(ref as never, DIGEST)).toBe(`127.0.0.1:5000/postgres@${DIGEST}`);
});

test('an image on the host is used; else only an allowed registry; else refused naming the image and the setting', () => {
  const base = { field: 'services.db.image', repo: 'acme/shop' };
  expect(imageSource({ ...base, image: 'postgres:17', onHost: true, allowed: [] })).toEqual({
    from: 'host',
    ref: 'postgres:17',
  });
  expect(imageSource({ ...base, image: 'postgres:17', onHost: false, allowed: ['index.docker.io'] })).toEqual({
    from: 'registry',
    ref: 'postgres:17',
    registry: 'docker.io',
  });
  expect(imageSource({ ...base, image: '127.0.0.1:5000/pg:17', onHost: false, allowed: ['127.0.0.1:5000'] })).toEqual({
    from: 'registry',
    ref: '127.0.0.1:5000/pg:17',
    registry: '127.0.0.1:5000',
  });
  const refused = imageSource({ ...base, image: 'ghcr.io/x/y:1', onHost: false, allowed: ['docker.io'] });
  expect(refused.from).toBe('refused');
  expect('problem' in refused && refused.problem).toBe(
    "services.db.image: image ghcr.io/x/y:1 is not on the worker's host and its registry ghcr.io is not allowed for acme/shop " +
      "(allowed: docker.io): allow it with 'drydock repo add acme/shop --allow-registry ghcr.io' or DRYDOCK_ALLOWED_REGISTRIES, " +
      "or load the image onto the worker's host",
  );
  // A registry on another port is another registry.
  expect(imageSource({ ...base, image: '127.0.0.1:5001/pg', onHost: false, allowed: ['127.0.0.1:5000'] }).from).toBe(
    'refused',
  );
  const malformed = imageSource({ ...base, image: 'Bad', onHost: true, allowed: [] });
  expect('problem' in malformed && malformed.problem).toMatch(/^services\.db\.image: "Bad" is not an image reference/);
});

test('registry names the operator may list', () => {
  expect(['ghcr.io', '127.0.0.1:5000', 'registry.example.com', '[::1]:5000'].every(isRegistryName)).toBe(true);
  expect(['https://ghcr.io', 'ghcr.io/org', '', 'a b'].some(isRegistryName)).toBe(false);
});

test('an image id or the start of one is refused: Docker resolves it to any image on the host (T4-M1)', () => {
  const base = { field: 'services.db.image', repo: 'acme/shop', onHost: true, allowed: [] };
  const id = 'cad0736c27e7e2a5c7a9e6f6d3b1c9e1b6a5d4c3b2a1f0e9d8c7b6a5f4e3d2c1';
  for (const image of [id, `sha256:${id}`, 'cad0736c27e7', 'cad07', 'sha256:cad0736c']) {
    const source = imageSource({ ...base, image });
    expect([image, 'problem' in source && source.problem]).toEqual([
      image,
      `services.db.image: ${image} reads as an image id (or the start of one), which Docker resolves to any image on ` +
        "the worker's host, another repository's snapshot included: name the image by repository and tag, or by digest",
    ]);
  }
  // Names, tags and digests stay names.
  for (const image of ['postgres:17', 'cafe:1', 'localhost/cafe', `redis@sha256:${id}`]) {
    expect([image, imageSource({ ...base, image }).from]).toEqual([image, 'host']);
  }
});

test("an image drydock made from a repository is no repo's base; the host's own images are", () => {
  const snapshot = { 'drydock.image': 'snapshot', 'drydock.snapshot.repo': 'https://github.com/acme/other.git' };
  expect(repoMadeImage('drydock-snap-x:1', snapshot)).toMatch(/made by drydock from a repository \(a snapshot\)/);
  expect(repoMadeImage('drydock-repo-x:1', { 'drydock.image': 'repo' })).toMatch(/a repository's Dockerfile build/);
  expect(repoMadeImage('drydock-env-x:1', { 'drydock.image': 'environment' })).toMatch(/a repository's environment/);
  // Built outside drydock on top of a snapshot: the snapshot's labels are inherited.
  expect(repoMadeImage('mine:1', { 'drydock.image': 'base', 'drydock.snapshot.repo': 'x' })).toBeDefined();
  expect(repoMadeImage('drydock-base:1', { 'drydock.image': 'base' })).toBeUndefined();
  expect(repoMadeImage('debian:trixie-slim', {})).toBeUndefined();
});
