/** The artifact store keeps every session inside its own folder, whatever the id or name. */
import { mkdtemp, mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ArtifactStore, isSafeSessionId, UnsafeArtifactPath } from '../../store/artifacts';

let dataDir: string;
let store: ArtifactStore;

beforeEach(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-artifacts-'));
  await writeFile(path.join(dataDir, 'api-tokens'), 'alice=secret-token\n');
  await mkdir(path.join(dataDir, 'artifacts'));
  store = new ArtifactStore(path.join(dataDir, 'artifacts'));
});

test("get('..', 'api-tokens') is refused instead of reading the data dir's token file", async () => {
  await expect(store.get('..', 'api-tokens')).rejects.toBeInstanceOf(UnsafeArtifactPath);
});

test.each([
  ['.', 'x.log'],
  ['..', 'x.log'],
  ['', 'x.log'],
  ['s1', '../../api-tokens'],
  ['s1', '..'],
  ['s1', '.'],
  ['s1', ''],
  ['s1', '/etc/passwd'],
  ['s1', 'junit//x.xml'],
  ['s1', 'junit/./x.xml'],
])('session %j, name %j is refused by put, append and get', async (sessionId, name) => {
  await expect(store.put(sessionId, name, 'x')).rejects.toBeInstanceOf(UnsafeArtifactPath);
  await expect(store.append(sessionId, name, 'x')).rejects.toBeInstanceOf(UnsafeArtifactPath);
  await expect(store.get(sessionId, name)).rejects.toBeInstanceOf(UnsafeArtifactPath);
});

test('plain ids and names with folders are stored under the session', async () => {
  expect(await store.put('s-1.a_b', 'junit/report.xml', 'ok')).toBe(path.join('s-1.a_b', 'junit', 'report.xml'));
  expect((await store.get('s-1.a_b', 'junit/report.xml'))?.toString()).toBe('ok');
  // Other characters are mapped to "_", as before: still one plain segment.
  expect(await store.put('a/b', 'x.log', 'ok')).toBe(path.join('a_b', 'x.log'));
  expect(await store.get('s-1.a_b', 'missing.log')).toBeUndefined();
});

test.each([
  ['api-1', true],
  ['a.b_c-d', true],
  ['.', false],
  ['..', false],
  ['', false],
  ['a/b', false],
  ['x'.repeat(101), false],
])('session id %j is safe: %s', (id, safe) => {
  expect(isSafeSessionId(id)).toBe(safe);
});
