/**
 * What a change touches, by kind of file, and which parts of a review need the
 * most attention: pure rules over the changed files and what ran, unit-tested
 * without a server (test/unit/change-kinds.test.ts). The console's summary
 * (workers/console/summary.ts) shows what these return.
 */

/** One file of a change, as the diff names it. */
export interface ChangedFile {
  path: string;
  /** The path before a rename. */
  oldPath?: string;
  status: 'added' | 'deleted' | 'renamed' | 'modified';
  added: number;
  deleted: number;
  binary?: boolean;
  /** The first added lines (a few), where a generator's marker would be. */
  head?: string[];
}

export type FileKind = 'test' | 'lockfile' | 'manifest' | 'ci' | 'migration' | 'generated' | 'environment' | 'other';

const LOCKFILES = new Set([
  'package-lock.json',
  'npm-shrinkwrap.json',
  'yarn.lock',
  'pnpm-lock.yaml',
  'bun.lockb',
  'bun.lock',
  'poetry.lock',
  'pipfile.lock',
  'uv.lock',
  'pdm.lock',
  'cargo.lock',
  'go.sum',
  'gemfile.lock',
  'composer.lock',
  'gradle.lockfile',
  'packages.lock.json',
  'mix.lock',
  'pubspec.lock',
  'package.resolved',
  'flake.lock',
]);
const MANIFESTS = new Set([
  'package.json',
  'pyproject.toml',
  'pipfile',
  'setup.py',
  'setup.cfg',
  'cargo.toml',
  'go.mod',
  'gemfile',
  'composer.json',
  'pom.xml',
  'build.gradle',
  'build.gradle.kts',
  'mix.exs',
  'pubspec.yaml',
  'package.swift',
  '.nvmrc',
  '.node-version',
  '.python-version',
  '.tool-versions',
]);
const REQUIREMENTS = /^(requirements|constraints)([-_.][\w.-]*)?\.(txt|in)$/;
const CI = [
  /^\.github\/(workflows|actions)\//,
  /^\.gitlab-ci\.ya?ml$/,
  /^\.circleci\//,
  /^\.buildkite\//,
  /^\.ci\//,
  /^jenkinsfile$/i,
  /^azure-pipelines\.ya?ml$/,
  /^\.travis\.ya?ml$/,
  /^\.drone\.ya?ml$/,
  /^bitbucket-pipelines\.yml$/,
  /^\.pre-commit-config\.yaml$/,
];
const ENVIRONMENT = [
  /(^|\/)dockerfile[^/]*$/i,
  /^\.devcontainer\//,
  /^\.drydock\//,
  /(^|\/)docker-compose[^/]*\.ya?ml$/,
];
const MIGRATIONS = [/(^|\/)migrations?\//i, /(^|\/)alembic\/versions\//, /(^|\/)db\/migrate\//, /\.migration\.\w+$/];
const TESTS = [
  /(^|\/)(test|tests|__tests__|spec|specs|e2e)\//i,
  /\.(test|spec)\.[cm]?[jt]sx?$/,
  /(^|\/)test_[^/]+\.py$/,
  /_test\.(py|go|rb|exs?)$/,
  /Tests?\.(java|kt|cs|swift)$/,
  /_spec\.rb$/,
];
const GENERATED_PATHS = [
  /(^|\/)(dist|build|out|vendor|node_modules|__generated__|generated)\//,
  /\.min\.(js|css)$/,
  /\.(pb|pb\.gw)\.go$/,
  /_pb2(_grpc)?\.py$/,
  /\.generated\.\w+$/,
  /\.snap$/,
  /\.map$/,
];
/** What generators write at the top of a file (Go's convention, Facebook's @generated, and the common "do not edit"). */
const GENERATED_MARK =
  /^(\/\/|#|\/\*|\*|--|<!--)?\s*(Code generated .* DO NOT EDIT|@generated\b|DO NOT EDIT|AUTO-?GENERATED)/i;

/** The kind of one changed file; a file is of one kind, the first rule that matches. */
export function kindOf(file: Pick<ChangedFile, 'path' | 'head'>): FileKind {
  const p = file.path;
  const name = p.split('/').pop()!.toLowerCase();
  if (LOCKFILES.has(name)) return 'lockfile';
  if (MANIFESTS.has(name) || REQUIREMENTS.test(name)) return 'manifest';
  if (CI.some((r) => r.test(p))) return 'ci';
  if (ENVIRONMENT.some((r) => r.test(p))) return 'environment';
  if (MIGRATIONS.some((r) => r.test(p))) return 'migration';
  if (GENERATED_PATHS.some((r) => r.test(p)) || file.head?.some((l) => GENERATED_MARK.test(l.trim()))) {
    return 'generated';
  }
  if (TESTS.some((r) => r.test(p))) return 'test';
  return 'other';
}

export interface ChangeKinds {
  files: number;
  added: number;
  deleted: number;
  /** Paths by kind, in the diff's order. */
  byKind: Record<FileKind, string[]>;
  binary: string[];
}

export function changeKinds(files: ChangedFile[]): ChangeKinds {
  const byKind: Record<FileKind, string[]> = {
    test: [],
    lockfile: [],
    manifest: [],
    ci: [],
    migration: [],
    generated: [],
    environment: [],
    other: [],
  };
  for (const f of files) byKind[kindOf(f)].push(f.path);
  return {
    files: files.length,
    added: files.reduce((n, f) => n + f.added, 0),
    deleted: files.reduce((n, f) => n + f.deleted, 0),
    byKind,
    binary: files.filter((f) => f.binary).map((f) => f.path),
  };
}

/** What ran for the change, as the reviewer needs it (from the audit trail and status). */
export interface WhatRan {
  commands: { step: string; command: string; exitCode?: number }[];
  /** Requests through the egress proxy: allowed and refused (blocked), and the hosts steps were allowed. */
  egress: { allowed: number; refused: number; hosts: string[] };
  /** Names of the worker secrets steps were granted. */
  secrets: string[];
  /** Where a value was redacted before the reviewer saw it, and how many times. */
  redactions: { where: string; count: number }[];
}

/** Verification, as counted for attention. */
export interface VerificationFacts {
  passed?: boolean;
  failedTests: number;
  failedChecks: number;
}

export type Attention = { level: 'high' | 'medium' | 'low'; what: string; why: string };

const LEVELS = { high: 0, medium: 1, low: 2 } as const;
const list = (paths: string[], max = 3) =>
  paths.slice(0, max).join(', ') + (paths.length > max ? ` and ${paths.length - max} more` : '');

/** Fixed rules for the parts of a change that deserve a reviewer's time first; most important first. */
export function attentionOf(kinds: ChangeKinds, ran: WhatRan, verification: VerificationFacts): Attention[] {
  const out: Attention[] = [];
  const add = (level: Attention['level'], what: string, why: string) => out.push({ level, what, why });
  const k = kinds.byKind;
  if (verification.failedTests || verification.failedChecks || verification.passed === false) {
    const parts = [
      verification.failedTests ? `${verification.failedTests} failing test(s)` : '',
      verification.failedChecks ? `${verification.failedChecks} failing browser check(s)` : '',
    ].filter(Boolean);
    add('high', parts.join(' and ') || 'verification failed', 'the change does not pass its own checks');
  }
  if (k.lockfile.length) add('high', `lockfile: ${list(k.lockfile)}`, 'new or changed dependencies come with it');
  if (k.manifest.length) add('high', `dependency manifest: ${list(k.manifest)}`, 'what is installed changes');
  if (k.ci.length) add('high', `CI/workflow: ${list(k.ci)}`, 'runs with the repository’s credentials');
  if (k.migration.length) add('high', `migration: ${list(k.migration)}`, 'changes data; often hard to undo');
  for (const r of ran.redactions) {
    add('high', `redacted in ${r.where} (${r.count}×)`, 'a secret-shaped value was printed or written');
  }
  if (ran.egress.refused) add('medium', `${ran.egress.refused} request(s) blocked`, 'a step tried to reach a host');
  if (ran.secrets.length) add('medium', `secrets granted: ${ran.secrets.join(', ')}`, 'a step could read them');
  if (k.environment.length) add('medium', `environment: ${list(k.environment)}`, 'changes how the repo is built');
  if (kinds.binary.length) add('medium', `binary: ${list(kinds.binary)}`, 'not readable in the diff');
  const code = k.other.length + k.migration.length;
  if (code && !k.test.length) add('medium', 'no test added or changed', `${code} other file(s) changed`);
  if (k.generated.length) add('low', `generated: ${list(k.generated)}`, 'skim: made by a tool');
  return out.sort((a, b) => LEVELS[a.level] - LEVELS[b.level]);
}
