/** What of a repo's Dockerfile drydock builds (sandbox/repo-dockerfile.ts): nothing that runs or fetches on the host. */
import { planDockerfile, repoMadeImage } from '../../sandbox/repo-dockerfile';

const plan = (text: string, args: Record<string, string> = {}) => planDockerfile(text, args);

test('a Dockerfile without RUN or ADD is built FROM the image its ARGs name, pinned by id', () => {
  const built = plan(
    '# escape=`\nARG BASE=debian\nFROM ${BASE}:trixie AS app\nENV A=1 `\n  B=2\nCOPY --chown=1000:1000 x /x\nUSER 1000\n',
    {},
  );
  expect(built).toMatchObject({ from: 'debian:trixie' });
  if ('problem' in built) throw new Error(built.problem);
  expect(built.pinned('sha256:abc')).toBe(
    '# escape=`\nARG BASE=debian\nFROM sha256:abc\nENV A=1 `\n  B=2\nCOPY --chown=1000:1000 x /x\nUSER 1000\n',
  );
  expect(plan('ARG BASE\nFROM $BASE\n', { BASE: 'img:1' })).toMatchObject({ from: 'img:1' });
  expect(plan('FROM ${BASE:-img:2}\n')).toMatchObject({ from: 'img:2' });
});

test.each([
  [
    'FROM x\nRUN apt-get install -y curl\n',
    /line 2: RUN runs as root in the host's image builder: put what it does in setup/,
  ],
  ['FROM x\nRUN --mount=type=cache,target=/root/.cache true\n', /line 2: RUN runs as root/],
  ['FROM x\nADD http://169.254.169.254/latest/meta-data/ /leak\n', /line 2: ADD fetches URLs/],
  ['FROM x\nADD app.tar.gz /opt\n', /line 2: ADD fetches URLs and unpacks archives/],
  ['# syntax=docker/dockerfile:1\nFROM x\n', /line 1: # syntax= is a BuildKit directive/],
  [
    'FROM x\nCOPY --from=drydock-snap-other:1 /workspace /stolen\n',
    /line 2: COPY --from: drydock copies only from the build context/,
  ],
  ['FROM a AS build\nFROM b\nCOPY --from=build /x /x\n', /line 2: a second FROM/],
  ['FROM --platform=linux/amd64 x\n', /line 1: FROM takes one image/],
  ['FROM ${NOPE}\n', /line 1: FROM names \$\{NOPE\}/],
  ['FROM x\nVOLUME /data\n', /line 2: VOLUME/],
  ['FROM x\nONBUILD RUN true\n', /line 2: ONBUILD/],
  ['FROM x\nHEALTHCHECK CMD true\n', /line 2: HEALTHCHECK runs a command in the sandbox between steps/],
  ['FROM x\nCOPY <<EOF /f\nhi\nEOF\n', /line 2: COPY with a here-document/],
  ['ENV A=1\nFROM x\n', /line 1: ENV before FROM/],
  ['# just a comment\n', /no FROM/],
])('refused: %s', (text, problem) => {
  const planned = plan(text);
  expect('problem' in planned && planned.problem).toMatch(problem);
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
