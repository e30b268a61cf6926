/**
 * The floors of docs/development.md: every relative import of a product
 * folder goes to its own folder or a lower floor, workflows take only types
 * from the side-effect half, and inside sandbox/ the runtime imports none of
 * its activities. An import running back up fails here with its file.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { productFolders, productSources, root } from '../support/product-folders';

/** Lower is nearer the ground; folders on one floor do not import each other. */
const FLOORS: Record<string, number> = {
  workflows: 0,
  'sandbox-images': 0,
  platform: 1,
  store: 2,
  // The forge seam (issue 50): the interface and what every forge shares; each provider is a floor up.
  forge: 3,
  models: 4,
  github: 4,
  gitlab: 4,
  gitea: 4,
  identity: 4,
  slack: 4,
  linear: 4,
  repos: 5,
  figures: 5,
  review: 5,
  // Issue 49's MCP client (branch mcp), placed ahead of its merge: it imports models/, store/, platform/.
  mcp: 5,
  sandbox: 6,
  'agent-loop': 7,
  activities: 8,
  workers: 9,
  cli: 10,
  bench: 11,
};

/** Every product folder the tree has, whether FLOORS names it or not (a folder without a floor fails below). */
const sources = productSources.map((file) => file.split('/').join(path.sep));

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

test('every product folder has a floor', () => {
  const unplaced = productFolders.filter((dir) => !(dir in FLOORS));
  expect(unplaced.map((dir) => `${dir}/ has no floor: give it one in FLOORS and docs/development.md`)).toEqual([]);
});

test('no import runs back up a floor', () => {
  const upward = imports.filter(({ from, to, typeOnly }) => {
    if (!productFolders.includes(top(to)) || top(to) === top(from)) return false;
    // Workflows name the activities' types: the samples' `import type` of the activities.
    if (top(from) === 'workflows' && typeOnly) return false;
    return !(FLOORS[top(to)] < FLOORS[top(from)]);
  });
  expect(upward.map(({ from, to }) => `${from} -> ${to}`)).toEqual([]);
});

const inSandbox = (p: string) => p.startsWith(`sandbox${path.sep}`);
/** sandbox/'s front door: what code outside imports of it (sandbox/index.ts). */
const SANDBOX_DOOR = path.join('sandbox', 'index');

test("the sandbox's runtime imports none of its activities", () => {
  const upward = imports.filter(
    ({ from, to }) =>
      inSandbox(from) &&
      from !== `${SANDBOX_DOOR}.ts` &&
      !from.includes(`${path.sep}activities${path.sep}`) &&
      to.includes(`sandbox${path.sep}activities`),
  );
  expect(upward.map(({ from, to }) => `${from} -> ${to}`)).toEqual([]);
});

/**
 * Code outside sandbox/ comes in by its front door (index.ts) or takes the
 * contract's types (contract.ts, which workflows name). One file is let in
 * further: the Kubernetes pod bench times the Kubernetes provider itself,
 * which the door does not carry (its client loads on demand, host-provider.ts).
 */
const THROUGH_THE_SIDE: Record<string, string> = {
  [path.join('bench', 'k8s-pod.ts')]: path.join('sandbox', 'kubernetes', 'provider'),
};

test("code outside sandbox/ imports only its front door (or the contract's types)", () => {
  const doors = [SANDBOX_DOOR, path.join('sandbox', 'contract'), 'sandbox'];
  const inside = imports.filter(
    ({ from, to }) => !inSandbox(from) && top(to) === 'sandbox' && !doors.includes(to) && THROUGH_THE_SIDE[from] !== to,
  );
  expect(
    inside.map(({ from, to }) => `${from} -> ${to}: import it from the sandbox's front door (sandbox/index.ts)`),
  ).toEqual([]);
});

test("no capability reaches for the registry's bag of dependencies (ActivityDeps)", () => {
  // Each room's factory declares its own deps; the registry (activities/) joins them and the worker builds them.
  const reaching = sources.filter(
    (file) =>
      !['activities', 'workers'].includes(top(file)) &&
      /\bActivityDeps\b/.test(readFileSync(path.join(root, file), 'utf8')),
  );
  expect(reaching).toEqual([]);
});

/** The file an import names: `x.ts`, or `x/index.ts`; undefined outside the product folders. */
function fileOf(to: string): string | undefined {
  return [`${to}.ts`, path.join(to, 'index.ts'), to].find((candidate) => sources.includes(candidate));
}

test('no files import each other in a circle (type imports included)', () => {
  const edges = new Map<string, string[]>(sources.map((file) => [file, []]));
  for (const { from, to } of imports) {
    const target = fileOf(to);
    if (target) edges.get(from)!.push(target);
  }
  // Depth-first: an import of a file still on the path closes a circle.
  const state = new Map<string, 'open' | 'done'>();
  const circles: string[] = [];
  const visit = (file: string, trail: string[]) => {
    state.set(file, 'open');
    for (const next of edges.get(file)!) {
      if (state.get(next) === 'open') circles.push([...trail.slice(trail.indexOf(next)), file, next].join(' -> '));
      else if (!state.has(next)) visit(next, [...trail, file]);
    }
    state.set(file, 'done');
  };
  for (const file of sources) if (!state.has(file)) visit(file, []);
  expect(circles).toEqual([]);
});
