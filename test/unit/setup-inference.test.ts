/**
 * Setup inferred from a repo's lockfiles (workflows/rules/setup-inference.ts):
 * the command, the registries offered as egress, what the image must have,
 * and where caches go so sessions find them.
 */
import { describeInferredSetup, inferSetup, missingProgramProblem } from '../../workflows/rules/setup-inference';

/** The Go step's warm-up: every package and its tests compiled into GOCACHE, none run, no result cached. */
const GO_SETUP_WARM =
  'go test -count=1 -exec true ./... || echo "drydock: the Go build cache is warmed only in part; sessions compile the rest";';

const only = (root: string[], more: Partial<Parameters<typeof inferSetup>[0]> = {}) => inferSetup({ root, ...more });

test('no lockfile drydock knows: nothing inferred', () => {
  expect(only(['README.md', 'package.json', 'Makefile'])).toBeUndefined();
});

test('npm, from package-lock.json or a shrinkwrap', () => {
  expect(only(['package.json', 'package-lock.json'])).toEqual({
    steps: [{ tool: 'npm', lockfile: 'package-lock.json', command: 'npm ci', egress: ['registry.npmjs.org'], env: {} }],
    command: 'npm ci',
    egress: ['registry.npmjs.org'],
    env: {},
    path: [],
  });
  expect(only(['npm-shrinkwrap.json'])?.command).toBe('npm ci');
});

test("pnpm: corepack's when packageManager names it, else the major that wrote the lockfile", () => {
  const declared = only(['pnpm-lock.yaml'], { packageJson: '{"packageManager":"pnpm@9.12.0"}' });
  expect(declared?.command).toBe('pnpm install --frozen-lockfile');
  expect(only(['pnpm-lock.yaml'], { pnpmLock: "lockfileVersion: '9.0'\n" })?.command).toBe(
    'npx --yes pnpm@9 install --frozen-lockfile',
  );
  expect(only(['pnpm-lock.yaml'], { pnpmLock: "lockfileVersion: '6.0'\n" })?.command).toBe(
    'npx --yes pnpm@8 install --frozen-lockfile',
  );
  expect(only(['pnpm-lock.yaml'], { pnpmLock: 'lockfileVersion: 5.4\n' })?.command).toBe(
    'npx --yes pnpm@7 install --frozen-lockfile',
  );
  // pnpm wins over a stray package-lock.json.
  expect(only(['pnpm-lock.yaml', 'package-lock.json'])?.steps.map((s) => s.tool)).toEqual(['pnpm']);
});

test('yarn classic and berry, with their registries', () => {
  const classic = only(['yarn.lock'], { yarnLock: '# yarn lockfile v1\n' });
  expect(classic?.command).toBe('npx --yes yarn@1 install --frozen-lockfile');
  expect(classic?.egress).toEqual(['registry.npmjs.org', 'registry.yarnpkg.com']);
  expect(only(['yarn.lock'], { yarnLock: '# yarn\n', packageJson: '{"packageManager":"yarn@1.22.22"}' })?.command).toBe(
    'yarn install --frozen-lockfile',
  );
  const berry = only(['yarn.lock'], { yarnLock: '__metadata:\n  version: 8\n' });
  expect(berry?.command).toBe('yarn install --immutable');
  expect(berry?.egress).toContain('repo.yarnpkg.com');
});

test('bun, from either of its lockfiles', () => {
  expect(only(['bun.lock'])?.command).toBe('npx --yes bun@1 install --frozen-lockfile');
  expect(only(['bun.lockb'])?.steps[0].lockfile).toBe('bun.lockb');
});

test('Python: uv, then poetry, then requirements files, into the project .venv that sessions find first', () => {
  const uv = only(['uv.lock', 'pyproject.toml', 'requirements.txt']);
  expect(uv?.steps.map((s) => s.tool)).toEqual(['uv']);
  expect(uv?.command).toBe(
    'python3 -m venv .venv && .venv/bin/pip install --quiet uv && .venv/bin/uv sync --frozen --inexact',
  );
  expect(uv?.egress).toEqual(['pypi.org', 'files.pythonhosted.org']);
  expect(uv?.env).toEqual({ VIRTUAL_ENV: '/workspace/.venv' });
  expect(uv?.path).toEqual(['/workspace/.venv/bin']);
  expect(only(['poetry.lock'])?.command).toMatch(/poetry install --no-interaction$/);
  expect(only(['requirements.txt', 'requirements-dev.txt'])?.command).toBe(
    'python3 -m venv .venv && .venv/bin/pip install -r requirements.txt -r requirements-dev.txt',
  );
});

test('Go, Cargo and Bundler: caches under .git/drydock, and the toolchain the image must bring', () => {
  const go = only(['go.mod', 'go.sum']);
  expect(go?.steps[0]).toEqual({
    tool: 'go',
    lockfile: 'go.sum',
    command: `go mod download && { ${GO_SETUP_WARM} }`,
    egress: ['proxy.golang.org', 'sum.golang.org'],
    needs: 'go',
    env: {
      GOMODCACHE: '/workspace/.git/drydock/go-mod',
      GOCACHE: '/workspace/.git/drydock/go-build',
      GOFLAGS: '-mod=mod',
    },
  });
  expect(only(['Cargo.lock'])?.steps[0]).toMatchObject({ command: 'cargo fetch --locked', needs: 'cargo' });
  expect(only(['Gemfile.lock'])?.env).toEqual({ BUNDLE_PATH: '/workspace/.git/drydock/bundle' });
});

test('several ecosystems: one command, every registry once', () => {
  const both = only(['package-lock.json', 'requirements.txt', 'go.mod']);
  expect(both?.command).toBe(
    `npm ci && python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && go mod download && { ${GO_SETUP_WARM} }`,
  );
  expect(both?.egress).toEqual([
    'registry.npmjs.org',
    'pypi.org',
    'files.pythonhosted.org',
    'proxy.golang.org',
    'sum.golang.org',
  ]);
  expect(describeInferredSetup(both!)).toEqual([
    'package-lock.json: npm ci (egress: registry.npmjs.org)',
    'requirements.txt: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt (egress: pypi.org, files.pythonhosted.org)',
    `go.mod: go mod download && { ${GO_SETUP_WARM} } (egress: proxy.golang.org, sum.golang.org); needs go in the image, which drydock's base image lacks (give one with 'drydock repo add <url> --environment image:<ref>', or a dev container or Dockerfile)`,
  ]);
});

test("with the operator's image in the same repo add, the program is that image's to bring, not a reason to pick one", () => {
  const go = only(['go.mod', 'go.sum'])!;
  expect(describeInferredSetup(go, 'image:realproj/golang:1.24')).toEqual([
    `go.sum: go mod download && { ${GO_SETUP_WARM} } (egress: proxy.golang.org, sum.golang.org); needs go in image:realproj/golang:1.24`,
  ]);
});

test('a broken package.json is no packageManager', () => {
  expect(only(['pnpm-lock.yaml'], { packageJson: '{' })?.command).toBe('npx --yes pnpm@9 install --frozen-lockfile');
});

test('a setup that finds no program says which and how to get it (repo add has no --image; go-chi/chi as published)', () => {
  expect(missingProgramProblem(127, 'sh: 1: go: not found\n')).toBe(
    "go is not in the sandbox's image (give one with 'drydock repo add <url> --environment image:<ref>', or a dev container or Dockerfile)",
  );
  expect(missingProgramProblem(127, 'Installing…\n/bin/sh: cargo: command not found')).toMatch(/^cargo is not in/);
  expect(missingProgramProblem(127, 'bash: line 1: bundle: command not found')).toMatch(/^bundle is not in/);
  expect(missingProgramProblem(1, 'sh: 1: go: not found')).toBeUndefined();
  expect(missingProgramProblem(127, 'make: *** [all] Error 127')).toBeUndefined();
});
