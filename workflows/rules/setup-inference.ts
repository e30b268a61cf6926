/**
 * A repo's setup, inferred from its lockfiles when nobody gave one (no
 * `--setup`, no `setup:` in .drydock/config.yaml, no dev container command,
 * no .drydock/setup.sh): what `repo add` prints and a snapshot build runs and
 * records, with the registries the tool needs offered as egress. One command
 * per ecosystem found at the repo's root (a JavaScript front end beside a
 * Python back end gets both). Pure: the caller reads the few files it needs.
 *
 * What setup makes must be in /workspace (the snapshot keeps only that) and
 * out of the change (the diff takes untracked files that are not ignored):
 * node_modules and .venv are ignored by nearly every repo; the caches of Go
 * (modules and build), Cargo and Bundler go under .git/drydock, which is in /workspace but never
 * in the work tree, and `env` tells sessions where they are.
 */

export type SetupTool = 'npm' | 'pnpm' | 'yarn' | 'bun' | 'uv' | 'poetry' | 'pip' | 'go' | 'cargo' | 'bundler';

export interface InferredStep {
  tool: SetupTool;
  /** The file that gave it away. */
  lockfile: string;
  command: string;
  /** Hosts the tool fetches from during setup. */
  egress: string[];
  /** A program the image must have beyond drydock's base image (Go, Rust, Ruby), or undefined. */
  needs?: string;
  /** Environment of setup and of every session, where the tool's cache must be found again. */
  env: Record<string, string>;
  /** A folder of /workspace to put first on PATH (the project's virtualenv). */
  path?: string;
}

export interface InferredSetup {
  steps: InferredStep[];
  /** The steps as one shell command. */
  command: string;
  /** Every step's hosts, once each. */
  egress: string[];
  env: Record<string, string>;
  /** Folders to put first on PATH. */
  path: string[];
}

/** What inference reads: the names at the repo's root and a few of their contents. */
export interface SetupFiles {
  /** File names at the root of the repo. */
  root: string[];
  packageJson?: string;
  yarnLock?: string;
  pnpmLock?: string;
}

const NPM = ['registry.npmjs.org'];
const PYPI = ['pypi.org', 'files.pythonhosted.org'];
const CACHE = '/workspace/.git/drydock';
const VENV = 'python3 -m venv .venv';
const REQUIREMENTS = [
  'requirements.txt',
  'requirements-dev.txt',
  'dev-requirements.txt',
  'requirements-test.txt',
  'test-requirements.txt',
];

/** The setup a repo's lockfiles imply, or undefined when it has none drydock knows. */
export function inferSetup(files: SetupFiles): InferredSetup | undefined {
  const steps = [javascript(files), python(files), ...native(files)].filter((s): s is InferredStep => !!s);
  if (!steps.length) return undefined;
  return {
    steps,
    command: steps.map((s) => s.command).join(' && '),
    egress: [...new Set(steps.flatMap((s) => s.egress))],
    env: Object.assign({}, ...steps.map((s) => s.env)) as Record<string, string>,
    path: steps.flatMap((s) => (s.path ? [s.path] : [])),
  };
}

/** "pnpm@9.1.0+sha…" → { name: "pnpm", major: 9 }. */
function packageManagerOf(packageJson: string | undefined): { name: string; major: number } | undefined {
  try {
    const value = (JSON.parse(packageJson ?? '{}') as { packageManager?: unknown }).packageManager;
    const m = typeof value === 'string' ? /^(npm|pnpm|yarn|bun)@(\d+)/.exec(value) : null;
    return m ? { name: m[1], major: Number(m[2]) } : undefined;
  } catch {
    return undefined;
  }
}

function javascript(files: SetupFiles): InferredStep | undefined {
  const has = (f: string) => files.root.includes(f);
  const declared = packageManagerOf(files.packageJson);
  const step = (tool: SetupTool, lockfile: string, command: string, egress = NPM): InferredStep => ({
    tool,
    lockfile,
    command,
    egress,
    env: {},
  });
  if (has('pnpm-lock.yaml')) {
    // With packageManager, corepack's pnpm is on PATH (lib/toolchains.ts); else the major the lockfile was written by.
    const pnpm = declared?.name === 'pnpm' ? 'pnpm' : `npx --yes pnpm@${pnpmMajor(files.pnpmLock)}`;
    return step('pnpm', 'pnpm-lock.yaml', `${pnpm} install --frozen-lockfile`);
  }
  if (has('yarn.lock')) {
    const berry = /^__metadata:/m.test(files.yarnLock ?? '');
    if (berry) return step('yarn', 'yarn.lock', 'yarn install --immutable', [...NPM, 'repo.yarnpkg.com']);
    const yarn = declared?.name === 'yarn' ? 'yarn' : 'npx --yes yarn@1';
    return step('yarn', 'yarn.lock', `${yarn} install --frozen-lockfile`, [...NPM, 'registry.yarnpkg.com']);
  }
  const bunLock = ['bun.lock', 'bun.lockb'].find(has);
  if (bunLock) return step('bun', bunLock, 'npx --yes bun@1 install --frozen-lockfile');
  const npmLock = ['package-lock.json', 'npm-shrinkwrap.json'].find(has);
  if (npmLock) return step('npm', npmLock, 'npm ci');
  return undefined;
}

/** The pnpm major that reads a lockfile of this version: 9.0 → 9, 6.x → 8, 5.x → 7. */
function pnpmMajor(lock: string | undefined): number {
  const version = /^lockfileVersion:\s*'?(\d+)/m.exec(lock ?? '')?.[1];
  return version === '5' ? 7 : version === '6' ? 8 : 9;
}

function python(files: SetupFiles): InferredStep | undefined {
  const has = (f: string) => files.root.includes(f);
  const step = (tool: SetupTool, lockfile: string, command: string): InferredStep => ({
    tool,
    lockfile,
    command,
    egress: PYPI,
    // Sessions find the project's Python first, as `source .venv/bin/activate` would.
    env: { VIRTUAL_ENV: '/workspace/.venv' },
    path: '/workspace/.venv/bin',
  });
  if (has('uv.lock')) {
    // --inexact: uv sync would otherwise remove the uv it runs from.
    return step('uv', 'uv.lock', `${VENV} && .venv/bin/pip install --quiet uv && .venv/bin/uv sync --frozen --inexact`);
  }
  if (has('poetry.lock')) {
    return step(
      'poetry',
      'poetry.lock',
      `${VENV} && .venv/bin/pip install --quiet poetry && POETRY_VIRTUALENVS_IN_PROJECT=true .venv/bin/poetry install --no-interaction`,
    );
  }
  const requirements = REQUIREMENTS.filter(has);
  if (!requirements.length) return undefined;
  const args = requirements.map((f) => `-r ${f}`).join(' ');
  return step('pip', requirements[0], `${VENV} && .venv/bin/pip install ${args}`);
}

/**
 * Compiles every package and its tests (the standard library and the
 * dependencies with them) into GOCACHE, which the snapshot keeps, and runs
 * none: `-exec true` stands in for each test binary, and `-count=1` keeps a
 * result out of the test cache, so a session's `go test` compiles only what
 * its change touched and still runs every test.
 */
const GO_WARM_BUILD_CACHE = 'go test -count=1 -exec true ./...';
/** A package that does not build yet (cgo without a compiler, say) does not fail setup: sessions compile it. */
const GO_WARM_FAILED = 'drydock: the Go build cache is warmed only in part; sessions compile the rest';

function native(files: SetupFiles): InferredStep[] {
  const has = (f: string) => files.root.includes(f);
  const steps: InferredStep[] = [];
  if (has('go.mod')) {
    steps.push({
      tool: 'go',
      lockfile: has('go.sum') ? 'go.sum' : 'go.mod',
      command: `go mod download && { ${GO_WARM_BUILD_CACHE} || echo "${GO_WARM_FAILED}"; }`,
      egress: ['proxy.golang.org', 'sum.golang.org'],
      needs: 'go',
      env: { GOMODCACHE: `${CACHE}/go-mod`, GOCACHE: `${CACHE}/go-build`, GOFLAGS: '-mod=mod' },
    });
  }
  if (has('Cargo.lock')) {
    steps.push({
      tool: 'cargo',
      lockfile: 'Cargo.lock',
      command: 'cargo fetch --locked',
      egress: ['index.crates.io', 'static.crates.io'],
      needs: 'cargo',
      env: { CARGO_HOME: `${CACHE}/cargo` },
    });
  }
  if (has('Gemfile.lock')) {
    steps.push({
      tool: 'bundler',
      lockfile: 'Gemfile.lock',
      command: 'BUNDLE_FROZEN=true bundle install',
      egress: ['rubygems.org', 'index.rubygems.org'],
      needs: 'bundle',
      env: { BUNDLE_PATH: `${CACHE}/bundle` },
    });
  }
  return steps;
}

/**
 * The inference as `repo add` prints it: one line per step, and what it
 * needs. `image` is the operator's `--environment image:<ref>` when given in
 * the same command: the program is then that image's to bring, not a reason
 * to pick one.
 */
export function describeInferredSetup(setup: InferredSetup, image?: string): string[] {
  const needs = (program: string) =>
    image
      ? `; needs ${program} in ${image}`
      : `; needs ${program} in the image, which drydock's base image lacks (${IMAGE_HINT})`;
  return setup.steps.map(
    (s) => `${s.lockfile}: ${s.command} (egress: ${s.egress.join(', ')})` + (s.needs ? needs(s.needs) : ''),
  );
}

/** How an operator gives a repo an image with the program its setup needs (`repo add` has no --image). */
const IMAGE_HINT = "give one with 'drydock repo add <url> --environment image:<ref>', or a dev container or Dockerfile";

/**
 * A plain account of a setup whose shell found no program (exit 127, `sh: 1: go: not found`),
 * naming the program and how to get it; undefined otherwise. drydock's base image has
 * Node.js and Python, not Go, Rust or Ruby.
 */
export function missingProgramProblem(exitCode: number, output: string): string | undefined {
  if (exitCode !== 127) return undefined;
  const program = /(?:^|\n)(?:\S+: )?(?:(?:line )?\d+: )?([\w.+-]+): (?:command )?not found/.exec(output)?.[1];
  if (!program) return undefined;
  return `${program} is not in the sandbox's image (${IMAGE_HINT})`;
}
