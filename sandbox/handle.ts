/**
 * One sandbox on its provider, by name: what drydock does in it, said as
 * verbs rather than as argv (model: E2B's Sandbox, with `commands`, `files`
 * and `git`). Activities take a handle from `sandboxOf(provider, name)`;
 * only this module and the provider turn verbs into commands.
 */
import type { Readable } from 'node:stream';
import type { OutputCap } from '../platform/output-cap';
import {
  CommandExitError,
  WORKSPACE,
  type AttachedProcess,
  type ExecOptions,
  type ExecResult,
  type SandboxProvider,
  type SandboxShell,
  type TtySize,
} from './provider';
import { OWN_GIT_DIR } from './toolchains';

/** A shell script run by `sh -c`; `name` is its $0, which its error messages begin with. */
export interface ShellScript {
  name: string;
  text: string;
}

/** Running commands as the sandbox user in /workspace. */
export interface Commands {
  /** argv as it is; the exit code comes back (see SandboxProvider.exec). */
  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** Like exec, but a non-zero exit throws CommandExitError; returns stdout. */
  run(argv: string[], opts?: ExecOptions): Promise<string>;
  /** A shell script, its arguments as $1, $2…; the exit code comes back. */
  script(script: ShellScript, args?: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** Like script, but a non-zero exit throws CommandExitError; returns stdout. */
  runScript(script: ShellScript, args?: string[], opts?: ExecOptions): Promise<string>;
  /** Like exec, but stdout goes to `file` on the worker's disk, at most `cap.bytes` of it. */
  toFile(argv: string[], file: string, cap: OutputCap): Promise<{ exitCode: number; bytes: number; stderr: Buffer }>;
  /** A long-lived helper the worker talks to in lines. */
  attach(argv: string[]): Promise<AttachedProcess>;
  /** A person's interactive shell (drydock attach). */
  shell(tty: TtySize & { term?: string }): Promise<SandboxShell>;
}

/** Files of the sandbox. */
export interface Files {
  /** Whether a regular file exists. */
  exists(path: string): Promise<boolean>;
  /** A file's bytes, or undefined when it cannot be read; more than `cap` throws OutputOverCap. */
  read(path: string, cap?: OutputCap): Promise<Buffer | undefined>;
  /** A file's bytes straight to `file` on the worker's disk, at most `cap.bytes` of them. */
  readToFile(path: string, file: string, cap: OutputCap): Promise<{ exitCode: number; bytes: number }>;
  /** At most `bytes` of a file from byte `offset` on (0-based): empty when there is nothing (yet). */
  readFrom(path: string, offset: number, bytes: number): Promise<Buffer>;
  /** The end of a file: its whole size and at most its last `bytes` (0 and empty when it is missing). */
  tail(path: string, bytes: number): Promise<{ size: number; text: string }>;
  /** Extracts a tar stream into a folder (ownership from the tar headers). */
  copyIn(tar: Readable, dest: string): Promise<void>;
}

/** git in /workspace. */
export interface Git {
  /**
   * Applies a binary diff (a checkpoint) to the working tree at HEAD: the tree is first reset to
   * HEAD and its untracked files removed (ignored ones stay), so a retried provisioning, whose first
   * attempt applied it before a crash, applies it again onto what it was made against.
   */
  apply(diff: Buffer | string): Promise<void>;
  /**
   * The working tree (untracked files too) as a binary diff against `base`,
   * staged in a scratch index in `scratchDir` so the agent's own staging
   * stays as it is; stdout is the diff, at most `cap`.
   */
  diffFrom(base: string, scratchDir: string, cap: OutputCap): Promise<ExecResult>;
  /**
   * Records the working tree as setup left it (untracked files too, through a scratch index in
   * `scratchDir`) as the commit SETUP_REF on HEAD, so the change leaves out what setup wrote
   * (activities/commit.ts); none when setup wrote nothing. Returns how many paths setup wrote
   * and the first `listed` of them (git's quoting). Taken by drydock's own git (OWN_GIT), with
   * its git dirs at `gitDir` (the helpers' in a sandbox).
   */
  keepSetupBaseline(scratchDir: string, listed: number, gitDir?: string): Promise<{ count: number; paths: string[] }>;
}

export interface SandboxHandle {
  readonly name: string;
  readonly provider: SandboxProvider;
  readonly commands: Commands;
  readonly files: Files;
  readonly git: Git;
}

/**
 * The start of every script that runs drydock's own git in a sandbox: the
 * repository's config (agent-writable: .git/config, ~/.gitconfig) may not
 * run commands there (an fsmonitor, hooks, an external diff), which would run
 * the agent's code inside drydock's commands (seen: an fsmonitor's files in
 * the commit). Command-line config (GIT_CONFIG_COUNT) wins over every file.
 * It replaces the sandbox's own command-line config, so it keeps what that
 * said: /workspace is safe (on Kubernetes an emptyDir owned by root, which
 * git refuses otherwise: "dubious ownership"; sandbox/kubernetes/pod.ts).
 */
export const DRYDOCK_GIT =
  'export GIT_CONFIG_COUNT=5 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=false ' +
  'GIT_CONFIG_KEY_1=core.hooksPath GIT_CONFIG_VALUE_1=/dev/null GIT_CONFIG_KEY_2=diff.external GIT_CONFIG_VALUE_2= ' +
  'GIT_CONFIG_KEY_3=core.untrackedCache GIT_CONFIG_VALUE_3=false ' +
  `GIT_CONFIG_KEY_4=safe.directory GIT_CONFIG_VALUE_4=${WORKSPACE}`;

/**
 * The workspace as setup left it: one commit on HEAD of everything setup wrote that git sees
 * (a lockfile `npm install` made, a file it rewrote; ignored files are not in it). It is in
 * the snapshot image's .git, so every session of the snapshot has it.
 */
export const SETUP_REF = 'refs/drydock/setup';

const TAIL: ShellScript = { name: 'tail', text: 'wc -c <"$1" 2>/dev/null || echo 0; tail -c "$2" "$1" 2>/dev/null' };
const READ_FROM: ShellScript = { name: 'tail', text: 'tail -c +"$1" "$2" 2>/dev/null | head -c "$3"' };
/**
 * drydock's own git for taking the working tree (`git add -A`, `git write-tree`), as the shell
 * function `own_git`, with `$g` the helpers' git dir (OWN_GIT_DIR) and `$i` the scratch index:
 * the repository's objects under a git dir of drydock's (read-only in every sandbox, no config),
 * no system or global config. The repository's .git/config, ~/.gitconfig and the image's
 * /etc/gitconfig are the agent's or the repo's: a clean or process filter they define for a name
 * the repo's .gitattributes gives would run inside drydock's command, and the blob committed could
 * differ from the tree the tests ran on. Without their config no filter driver is defined, so a
 * .gitattributes `filter=` is a no-op; .git/info/exclude still says what is ignored.
 */
export const OWN_GIT = [
  'f=$(git rev-parse --show-object-format 2>/dev/null || true); [ "$f" = sha256 ] || f=sha1; g="$g/$f"',
  'own_git() { GIT_DIR="$g" GIT_WORK_TREE="$PWD" GIT_OBJECT_DIRECTORY="$PWD/.git/objects" GIT_INDEX_FILE="$i" ' +
    'GIT_CONFIG_NOSYSTEM=1 HOME="$g" XDG_CONFIG_HOME="$g" git -c core.excludesFile="$PWD/.git/info/exclude" "$@"; }',
  // The agent's index holds the stat cache; one git cannot read without the repo's own git dir (a split index) is dropped.
  'cp .git/index "$i" 2>/dev/null || rm -f "$i"',
  'own_git add -A 2>/dev/null || { rm -f "$i"; own_git read-tree "$base"; own_git add -A; }',
].join('\n');

/** The checkpoint: the working tree as a binary diff against $1, taken by own_git into $2's scratch index. */
const DIFF_FROM: ShellScript = {
  name: 'checkpoint',
  text: `set -e; ${DRYDOCK_GIT}; base=$1 i="$2/checkpoint.index" g=$3\n${OWN_GIT}\nGIT_INDEX_FILE="$i" git diff --cached --binary --no-ext-diff --no-textconv "$1"; rm -f "$i"`,
};
const APPLY: ShellScript = {
  name: 'sh',
  text: `${DRYDOCK_GIT}; f=$(mktemp) && cat > "$f" && git reset -q --hard && git clean -fdq && git apply --binary --whitespace=nowarn "$f" && rm -f "$f"`,
};

/**
 * Records SETUP_REF ($2) and prints how many paths setup wrote, then the first $3 of them. The tree
 * is taken by own_git, as the change's snapshot takes its own: no filter of the repo's runs, and a
 * file nobody changed since setup has the same blob in both, so the change leaves it out.
 */
const SETUP_BASELINE: ShellScript = {
  name: 'setup-baseline',
  text: [
    'set -e',
    DRYDOCK_GIT,
    'mkdir -p "$1"; base=$(git rev-parse HEAD) i="$1/setup.index" g=$4',
    OWN_GIT,
    't=$(own_git write-tree); rm -f "$i"',
    'if [ "$t" = "$(git rev-parse "HEAD^{tree}")" ]; then git update-ref -d "$2" 2>/dev/null || true; exit 0; fi',
    // A fixed identity and date: the same files make the same commit (a retried step records it again).
    'export GIT_AUTHOR_NAME=setup GIT_AUTHOR_EMAIL=setup@drydock GIT_AUTHOR_DATE="2000-01-01T00:00:00Z"',
    'export GIT_COMMITTER_NAME=setup GIT_COMMITTER_EMAIL=setup@drydock GIT_COMMITTER_DATE="2000-01-01T00:00:00Z"',
    'c=$(git commit-tree --no-gpg-sign "$t" -p HEAD -m "what setup wrote"); git update-ref "$2" "$c"',
    'git diff-tree -r --no-renames --name-only "$c^" "$c" >"$1/setup.paths"',
    'wc -l <"$1/setup.paths"; head -n "$3" "$1/setup.paths"; rm -f "$1/setup.paths"',
  ].join('\n'),
};

/** The exec that records the setup baseline (Git.keepSetupBaseline); `gitDir`: drydock's own git dirs (OWN_GIT). */
export function setupBaselineArgv(scratchDir: string, listed: number, gitDir = OWN_GIT_DIR): string[] {
  return scriptArgv(SETUP_BASELINE, [scratchDir, SETUP_REF, String(listed), gitDir]);
}

/** The exec that takes a checkpoint (Git.diffFrom); `gitDir`: drydock's own git dirs (OWN_GIT). */
export function checkpointArgv(base: string, scratchDir: string, gitDir = OWN_GIT_DIR): string[] {
  return scriptArgv(DIFF_FROM, [base, scratchDir, gitDir]);
}

/** The argv that runs a shell script with its arguments (for an exec whose output goes to a file). */
export function scriptArgv(script: ShellScript, args: string[] = []): string[] {
  return ['sh', '-c', script.text, script.name, ...args];
}

/**
 * The handle of the sandbox `name` on `provider` (nothing is asked of the
 * provider yet). `exec` runs its commands instead of the provider's own exec:
 * the built-in loop's executor, which answers the same for less.
 */
export function sandboxOf(provider: SandboxProvider, name: string, exec?: Commands['exec']): SandboxHandle {
  return handle(provider, name, exec ?? ((argv, opts) => provider.exec(name, argv, opts)));
}

function handle(provider: SandboxProvider, name: string, exec: Commands['exec']): SandboxHandle {
  const run: Commands['run'] = async (argv, opts) => {
    const result = await exec(argv, opts);
    if (result.exitCode !== 0) {
      throw new CommandExitError(argv.join(' '), result.exitCode, result.stdout.toString(), result.stderr.toString());
    }
    return result.stdout.toString();
  };
  const commands: Commands = {
    exec,
    run,
    script: (script, args, opts) => exec(scriptArgv(script, args), opts),
    runScript: (script, args, opts) => run(scriptArgv(script, args), opts),
    toFile: (argv, file, cap) => provider.execToFile(name, argv, file, cap),
    attach: (argv) => provider.attach(name, argv),
    shell: (tty) => provider.shell(name, tty),
  };
  const files: Files = {
    exists: async (path) => (await exec(['test', '-f', path])).exitCode === 0,
    read: async (path, cap) => {
      const read = await exec(['cat', path], cap ? { stdoutCap: cap } : {});
      return read.exitCode === 0 ? read.stdout : undefined;
    },
    readToFile: (path, file, cap) => provider.execToFile(name, ['cat', path], file, cap),
    readFrom: async (path, offset, bytes) =>
      (await exec(scriptArgv(READ_FROM, [String(offset + 1), path, String(bytes)]))).stdout,
    tail: async (path, bytes) => {
      const out = (await exec(scriptArgv(TAIL, [path, String(bytes)]))).stdout.toString('utf8');
      const newline = out.indexOf('\n');
      return { size: Number(out.slice(0, newline)) || 0, text: out.slice(newline + 1) };
    },
    copyIn: (tar, dest) => provider.copyIn(name, tar, dest),
  };
  const git: Git = {
    apply: async (diff) => void (await run(scriptArgv(APPLY), { stdin: diff })),
    diffFrom: (base, scratchDir, cap) => exec(checkpointArgv(base, scratchDir), { stdoutCap: cap }),
    keepSetupBaseline: async (scratchDir, listed, gitDir) => {
      const out = (await run(setupBaselineArgv(scratchDir, listed, gitDir))).split('\n');
      return { count: Number(out[0]) || 0, paths: out.slice(1).filter(Boolean) };
    },
  };
  return { name, provider, commands, files, git };
}
