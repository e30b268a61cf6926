/**
 * The floors of docs/development.md: every relative import of a product
 * folder goes to its own folder or a lower floor, workflows take only types
 * from the side-effect half, and inside sandbox/ the runtime imports none of
 * its activities. An import running back up fails here with its file.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');

/** Lower is nearer the ground; folders on one floor do not import each other. */
const FLOORS: Record<string, number> = {
  workflows: 0,
  'sandbox-images': 0,
  platform: 1,
  models: 2,
  github: 2,
  store: 2,
  repos: 3,
  figures: 3,
  sandbox: 4,
  // Above the sandbox (its stdio servers are to run in containers of their own), below the activities.
  mcp: 4.5,
  activities: 5,
  workers: 6,
  cli: 7,
  bench: 8,
};

const sources = Object.keys(FLOORS).flatMap((dir) =>
  readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => path.join(dir, f)),
);

interface Import {
  from: string;
  to: string;
  typeOnly: boolean;
}

function importsOf(file: string): Import[] {
  const source = readFileSync(path.join(root, file), 'utf8');
  // `import … from '…'` and `export … from '…'` at the start of a line; template strings hold none.
  const found = source.matchAll(/^(?:import|export)\s+(type\s+)?[^'";]*?from\s+'(\.[^']+)'/gm);
  return [...found].map(([, typeOnly, spec]) => ({
    from: file,
    to: path.normalize(path.join(path.dirname(file), spec)),
    typeOnly: Boolean(typeOnly),
  }));
}

const imports = sources.flatMap(importsOf);
const top = (file: string) => file.split(path.sep)[0];

test('the product folders are read', () => {
  expect(imports.length).toBeGreaterThan(400);
});

test('no import runs back up a floor', () => {
  const upward = imports.filter(({ from, to, typeOnly }) => {
    if (!(top(to) in FLOORS) || top(to) === top(from)) return false;
    // Workflows name the activities' types: the samples' `import type` of the activities.
    if (top(from) === 'workflows' && typeOnly) return false;
    return FLOORS[top(to)] >= FLOORS[top(from)];
  });
  expect(upward.map(({ from, to }) => `${from} -> ${to}`)).toEqual([]);
});

test("the sandbox's runtime imports none of its activities", () => {
  const inSandbox = (p: string) => p.startsWith(`sandbox${path.sep}`);
  const upward = imports.filter(
    ({ from, to }) =>
      inSandbox(from) &&
      !from.includes(`${path.sep}activities${path.sep}`) &&
      to.includes(`sandbox${path.sep}activities`),
  );
  expect(upward.map(({ from, to }) => `${from} -> ${to}`)).toEqual([]);
});
