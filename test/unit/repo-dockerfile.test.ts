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
  // Emitted from the checked instructions, one a line (continuations joined as Docker joins them).
  expect(built.pinned('sha256:abc')).toBe(
    '# escape=`\nARG BASE=debian\nFROM sha256:abc\nENV A=1   B=2\nCOPY --chown=1000:1000 x /x\nUSER 1000\n',
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

// T4-H1: the checker took a bare \r for a line break and Docker's parser does not, and the
// pinning edited the text by the checker's line numbers: the FROM line replaced the COPY, and
// the RUN the checker had read as COPY's continuation reached the builder as an instruction.
test('a bare carriage return is refused: it cannot smuggle RUN past the check', () => {
  const attack = '#\rFROM base\nCOPY . /src \\\nRUN id > /pwned\n';
  expect(plan(attack)).toEqual({
    problem: expect.stringMatching(/^line 1: a carriage return not followed by a line feed/),
  });
  // With \r\n the continuation is one to both: the RUN is COPY's argument, and stays one.
  const joined = plan('FROM base\r\nCOPY . /src \\\r\nRUN x\r\n');
  if ('problem' in joined) throw new Error(joined.problem);
  expect(joined.pinned('sha256:abc')).toBe('FROM sha256:abc\nCOPY . /src RUN x\n');
  const crlf = plan('FROM base\r\nCOPY a \\\r\n  /b\r\n');
  if ('problem' in crlf) throw new Error(crlf.problem);
  expect(crlf.pinned('sha256:abc')).toBe('FROM sha256:abc\nCOPY a   /b\n');
});

test.each([
  ['#\fescape=`\nFROM x\nCOPY a /b \\\nRUN evil\n', /line 1: a control character/],
  ['FROM x\nCOPY a /b \\\n\u00a0RUN evil\n', /line 3: whitespace outside ASCII/],
  ['FROM x\nCOPY a /b \\\n\u2028RUN evil\n', /line 3: whitespace outside ASCII/],
  ['# x=1\n# escape=`\nFROM x\n', /line 1: # x= is a parser directive/],
  ['# escape=`\n# escape=\\\nFROM x\n', /line 2: # escape= is a parser directive/],
])('read the same by Docker and the checker, or refused: %j', (text, problem) => {
  const planned = plan(text);
  expect('problem' in planned && planned.problem).toMatch(problem);
});

/** A seeded generator (mulberry32): the same cases every run. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test('whatever is accepted reaches the builder as one checked instruction a line, never RUN, ADD or a second FROM', () => {
  const parts = [
    'FROM base',
    'COPY a /b',
    'RUN evil',
    'ADD http://x/ /y',
    'FROM other',
    'ENV A=1',
    ' ',
    '\t',
    '\\',
    '`',
    '#',
    '# escape=`',
    '\n',
    '\n',
    '\n',
    '\r',
    '\r\n',
    'LABEL "k"="v"',
    'CMD ["sh"]',
  ];
  const next = random(44);
  let accepted = 0;
  for (let n = 0; n < 20_000; n++) {
    const text = Array.from(
      { length: 3 + Math.floor(next() * 12) },
      () => parts[Math.floor(next() * parts.length)],
    ).join('');
    const planned = plan(text);
    if ('problem' in planned) continue;
    accepted++;
    const pinned = planned.pinned('sha256:abc');
    const escape = pinned.startsWith('# escape=`\n') ? '`' : '\\';
    const lines = pinned.split('\n').filter((l) => l && l !== '# escape=`');
    expect(lines[lines.findIndex((l) => l.startsWith('FROM'))]).toBe('FROM sha256:abc');
    for (const line of lines) {
      expect(line).toMatch(/^(ARG|FROM sha256:abc$|COPY|ENV|LABEL|CMD)\b/i);
      expect(line).not.toMatch(/\r|^\s*#/);
      expect(line.trimEnd().endsWith(escape)).toBe(false); // no continuation: a line is an instruction
    }
    expect(lines.filter((l) => /^FROM/i.test(l))).toHaveLength(1);
  }
  expect(accepted).toBeGreaterThan(100);
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
