/**
 * git on the worker: the mirrors of the repos, bundles into and out of
 * sandboxes (which have no network), and drydock's own commit of a change,
 * made on the worker from the tree a sandbox snapshot holds.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { access, mkdir, mkdtemp, readFile, rename, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { redactUrl } from '../workflows/rules/repo-url';
import { OutputOverCap, type OutputCap } from '../platform/output-cap';
import { ProcessFailed, runProcess } from '../platform/processes';

/**
 * git failed; `stderr` says why (bad URL, missing ref, refused credentials,
 * rejected push...). Credentials in URLs are removed from all three, since
 * the message reaches the workflow's history and status.
 */
export class GitError extends Error {
  readonly args: string[];
  readonly stderr: string;

  constructor(args: string[], stderr: string) {
    const shown = args.map(redactUrl);
    const said = redactUrl(stderr);
    super(`git ${shown.join(' ')} failed: ${said.trim().split('\n').slice(-3).join(' | ')}`);
    this.name = 'GitError';
    this.args = shown;
    this.stderr = said;
  }

  /** The remote refused or asked for credentials: retrying will not help. */
  get isAuthFailure(): boolean {
    return /Authentication failed|could not read Username|returned error: 40[13]|Permission denied/.test(this.stderr);
  }
}

/** Extra environment for git (credentials from repos/credentials.ts). */
export type GitEnv = Record<string, string>;

/** Runs git on the worker; never prompts for credentials. */
export async function git(args: string[], cwd?: string, extraEnv: GitEnv = {}): Promise<string> {
  return (await gitWithOutput(args, cwd, extraEnv)).stdout;
}

/** git, answering both streams; a failure's GitError says what git printed on either (`failureOutput`). */
async function gitWithOutput(
  args: string[],
  cwd?: string,
  extraEnv: GitEnv = {},
  failureOutput: 'stderr' | 'both' = 'stderr',
): Promise<{ stdout: string; stderr: string }> {
  try {
    return await runProcess('git', args, {
      cwd,
      // No prompts; and a URL from a session input may use only these transports (no ext::, fd::, helpers).
      env: {
        ...process.env,
        GIT_TERMINAL_PROMPT: '0',
        GIT_ASKPASS: 'true',
        GIT_ALLOW_PROTOCOL: 'file:git:http:https:ssh',
        ...extraEnv,
      },
    });
  } catch (err) {
    if (!(err instanceof ProcessFailed)) throw new GitError(args, (err as Error).message);
    const said = failureOutput === 'both' ? `${err.stderr}\n${err.stdout}` : err.stderr;
    throw new GitError(args, said.trim() ? said : err.message);
  }
}

const mirrorLocks = new Map<string, Promise<unknown>>();

/** Serialises work on one mirror inside this process (git's own locks would fail a parallel fetch). */
function withMirrorLock<T>(mirror: string, fn: () => Promise<T>): Promise<T> {
  const previous = mirrorLocks.get(mirror) ?? Promise.resolve();
  const next = previous.catch(() => undefined).then(fn);
  mirrorLocks.set(mirror, next);
  return next;
}

/** Where the worker keeps the mirror of `url`. */
export function mirrorOf(mirrorsDir: string, url: string): string {
  return path.join(mirrorsDir, createHash('sha256').update(url).digest('hex').slice(0, 16) + '.git');
}

/**
 * A bare mirror of the repo on the worker host, created on first use and
 * fetched on every later one: sandboxes get their code from it (they have no
 * network) and pushes go out from it.
 */
export async function updateMirror(
  mirrorsDir: string,
  url: string,
  env: GitEnv = {},
  { maintenance = true }: { maintenance?: boolean } = {},
): Promise<string> {
  const mirror = mirrorOf(mirrorsDir, url);
  return withMirrorLock(mirror, async () => {
    if (await exists(mirror)) {
      // fetch itself, not `remote update`, which only starts a fetch in a second process. Without
      // `maintenance`, the fetch does not wait for the `git maintenance run --auto` it starts after
      // itself (a session's start waits for this fetch): upkeepBeside runs it instead.
      const upkeep = maintenance ? [] : ['-c', 'maintenance.auto=false'];
      await git([...upkeep, 'fetch', '--quiet', '--prune', 'origin'], mirror, env);
      if (!maintenance) upkeepBeside(mirror);
    } else {
      await mkdir(mirrorsDir, { recursive: true });
      const partial = `${mirror}.tmp-${process.pid}-${Date.now()}`;
      await git(['clone', '--quiet', '--mirror', '--', url, partial], undefined, env);
      await rename(partial, mirror);
    }
    return mirror;
  });
}

/** When each mirror's upkeep was last started beside a fetch (upkeepBeside). */
const UPKEEP_STARTED = new Map<string, number>();
/** At most one upkeep per mirror this often, ms: the fetches between add a pack or some loose objects each. */
const UPKEEP_EVERY_MS = 10 * 60_000;

/**
 * The mirror's `git maintenance run --auto` (it gcs when git's thresholds say so), not awaited
 * and at most every UPKEEP_EVERY_MS: beside the caller, so a session's start does not wait for
 * it, and seldom, so starts in a row do not share the host's cores with it each time. git locks
 * its own maintenance, and a gc works beside fetches by design.
 */
function upkeepBeside(mirror: string): void {
  const last = UPKEEP_STARTED.get(mirror);
  if (last !== undefined && Date.now() - last < UPKEEP_EVERY_MS) return;
  UPKEEP_STARTED.set(mirror, Date.now());
  void git(['maintenance', 'run', '--auto', '--quiet'], mirror).catch(() => undefined);
}

/** A full object id: what names the same content for ever. */
export const OBJECT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/** Answers of readAtCommit, by mirror and arguments; the oldest go first past this many characters. */
const IMMUTABLE_READS = new Map<string, { out: string } | { err: GitError }>();
const IMMUTABLE_READS_MAX_CHARS = 32 * 1024 * 1024;
let immutableChars = 0;

/**
 * git `args` that read only what the full object id `object` names
 * (`ls-tree <commit>`, `cat-file blob <commit>:<path>`): the answer can never change, so each is asked once
 * per process. Provisioning, the warm pool's fill and snapshot builds read
 * the same few files at the same commits; each read is otherwise a process.
 * "No such path" is remembered too; a git that could not run is not.
 */
export async function readAtCommit(mirror: string, object: string, args: string[]): Promise<string> {
  // A ref or an abbreviation can name another object tomorrow: asked every time.
  if (!OBJECT_ID.test(object)) return git(args, mirror);
  const key = `${mirror}\0${args.join('\0')}`;
  const known = IMMUTABLE_READS.get(key);
  if (known) {
    if ('err' in known) throw known.err;
    return known.out;
  }
  let answer: { out: string } | { err: GitError };
  try {
    answer = { out: await git(args, mirror) };
  } catch (err) {
    if (!(err instanceof GitError && /does not exist|not a valid object name|exists on disk/i.test(err.stderr)))
      throw err;
    answer = { err };
  }
  const size = key.length + ('out' in answer ? answer.out.length : 0);
  IMMUTABLE_READS.set(key, answer);
  immutableChars += size;
  for (const [k, v] of IMMUTABLE_READS) {
    if (immutableChars <= IMMUTABLE_READS_MAX_CHARS) break;
    immutableChars -= k.length + ('out' in v ? v.out.length : 0);
    IMMUTABLE_READS.delete(k);
  }
  if ('err' in answer) throw answer.err;
  return answer.out;
}

/** The remote's default branch as the mirror's clone recorded it ("main"), if it has one. */
export async function defaultBranchOf(mirror: string): Promise<string | undefined> {
  const ref = await git(['symbolic-ref', '--quiet', 'HEAD'], mirror).catch(() => '');
  return ref.trim().replace(/^refs\/heads\//, '') || undefined;
}

/** The commit a ref names in the mirror (default: the remote's default branch). */
export async function resolveCommit(mirror: string, ref?: string): Promise<string> {
  const candidates = ref ? [ref, `refs/heads/${ref}`, `refs/tags/${ref}`] : ['HEAD'];
  for (const candidate of candidates) {
    try {
      const commit = (await git(['rev-parse', '--verify', '--quiet', `${candidate}^{commit}`], mirror)).trim();
      rememberCommit(mirror, commit);
      return commit;
    } catch {
      // try the next spelling
    }
  }
  throw new GitError(['rev-parse', ref ?? 'HEAD'], `ref '${ref ?? 'HEAD'}' not found in the repository`);
}

/**
 * A working tree at `commit` (with history, for commits and bundles inside the
 * sandbox), as a tar file owned by the sandbox user. Call `cleanup` after.
 */
export async function workingTreeTar(
  mirror: string,
  commit: string,
  uid: number,
): Promise<{ tar: Readable; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-tree-'));
  const cleanup = () => rm(dir, { recursive: true, force: true });
  const tree = path.join(dir, 'tree');
  const file = path.join(dir, 'tree.tar');
  try {
    await git(['clone', '--quiet', '--no-checkout', mirror, tree]);
    await git(['checkout', '--quiet', '--detach', commit], tree);
    await runProcess('tar', ['-C', tree, `--owner=${uid}`, `--group=${uid}`, '--numeric-owner', '-cf', file, '.']);
  } catch (err) {
    await cleanup();
    throw err;
  }
  return { tar: createReadStream(file), cleanup };
}

/** git options that keep a repository's own content from steering how a diff is shown. */
const PLAIN_DIFF = [
  '-c',
  'core.attributesFile=/dev/null',
  '-c',
  'diff.external=',
  'diff',
  '--no-textconv',
  '--no-ext-diff',
];

/** Who drydock's commits are by (author and committer): the worker's, never the sandbox's. */
export interface GitIdentity {
  name: string;
  email: string;
}

/** The sandbox ref holding its snapshot of the change: one commit of the working tree on the base. */
export const CHANGE_REF = 'refs/drydock/change';

/** What drydock's commit of a change is made of; the same fields make the same commit. */
export interface CommitSpec {
  /** The commit's only parent: the session's base (a later round: the commit pushed before). */
  parent: string;
  author: GitIdentity;
  /** ISO date, for author and committer: the same tree committed again is the same commit. */
  date: string;
  /** The whole message, trailers included. */
  message: string;
}

/**
 * Reads the sandbox's snapshot bundle (CHANGE_REF) into the mirror and makes
 * drydock's own commit of its tree: one parent, drydock's identity, drydock's
 * message. Nothing but the tree is taken from the sandbox: its commits, their
 * authors and parents (and the objects only they reach) never reach a remote.
 * Runs `fn` with the commit under the mirror's lock (the commit is not kept
 * under any ref: a later push makes it again from the same spec).
 */
export function sealChange<T>(
  mirror: string,
  /** A git bundle file on the worker's disk (withSandboxBundle). */
  bundle: string,
  spec: CommitSpec,
  fn: (sealed: { commit: string; tree: string }) => Promise<T>,
): Promise<T> {
  return withMirrorLock(mirror, async () => {
    // Into FETCH_HEAD only (the mirror's lock is held): no staging ref to make and remove.
    // Objects past 1 MiB are hashed as a stream, never inflated whole (a bundle's blob may inflate to gigabytes).
    // No `git maintenance run --auto` after it (a process the commit would wait for): upkeepBeside runs it.
    const opts = ['-c', 'core.bigFileThreshold=1m', '-c', 'maintenance.auto=false'];
    await git([...opts, 'fetch', '--quiet', bundle, CHANGE_REF], mirror);
    const tree = (await git(['rev-parse', '--verify', 'FETCH_HEAD^{tree}'], mirror)).trim();
    const who = spec.author;
    const env = {
      GIT_AUTHOR_NAME: who.name,
      GIT_AUTHOR_EMAIL: who.email,
      GIT_AUTHOR_DATE: spec.date,
      GIT_COMMITTER_NAME: who.name,
      GIT_COMMITTER_EMAIL: who.email,
      GIT_COMMITTER_DATE: spec.date,
    };
    const args = ['commit-tree', '--no-gpg-sign', tree, '-p', spec.parent, '-m', spec.message];
    const commit = (await git(args, mirror, env)).trim();
    return fn({ commit, tree });
  });
}

/**
 * The change from `parent` to `commit` as the worker's own git shows it, so
 * the evidence a reviewer sees (diffstat, diff) cannot be forged by git
 * configuration or attributes inside the sandbox. One git process: the
 * diffstat, then the patch (file names with a newline are quoted, so the
 * first line that starts "diff --git " starts the patch).
 */
export async function describeChange(
  mirror: string,
  parent: string,
  commit: string,
  diffCap: OutputCap,
): Promise<{ diffstat: string; diff: string }> {
  // To a file first: only a diff within the cap is read into memory.
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-diff-'));
  try {
    const file = path.join(dir, 'change.diff');
    await git([...PLAIN_DIFF, '--patch-with-stat', '--binary', `--output=${file}`, parent, commit], mirror);
    if ((await stat(file)).size > diffCap.bytes) throw new OutputOverCap(diffCap);
    const both = await readFile(file, 'utf8');
    const at = both.indexOf('\ndiff --git ') + 1;
    if (at === 0) return { diffstat: both.trimEnd(), diff: '' };
    return { diffstat: both.slice(0, at).trimEnd(), diff: both.slice(at) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Pushes `commit` (drydock's, made by sealChange) to `branch` of the repo's
 * remote, from the worker (the sandbox holds no credentials): exactly the
 * objects it reaches that the remote lacks. Pushing it again is a no-op.
 */
export async function pushCommit(opts: {
  mirror: string;
  url: string;
  branch: string;
  commit: string;
  env?: GitEnv;
}): Promise<{ alreadyPushed: boolean }> {
  // One process and one connection: --porcelain says "=" for a ref the remote has at `commit` already,
  // and names a refused ref ("[rejected] (non-fast-forward)") on stdout, which the error carries too.
  const args = ['push', '--porcelain', '--', opts.url, `${opts.commit}:refs/heads/${opts.branch}`];
  const { stdout } = await gitWithOutput(args, opts.mirror, opts.env, 'both');
  return { alreadyPushed: /^=\t/m.test(stdout) };
}

/**
 * Whether the mirror holds `commit` and every object it reaches (objects
 * that no ref reaches can be pruned by gc after two weeks): then it can be
 * pushed as it is.
 */
export async function hasWholeCommit(mirror: string, commit: string): Promise<boolean> {
  if (!OBJECT_ID.test(commit)) return false;
  return git(['rev-list', '--objects', '--quiet', commit, '--not', '--all'], mirror).then(
    () => true,
    () => false,
  );
}

/** Whether `commit` is in the mirror (a force push and gc can drop an old snapshot's commit). */
export async function hasCommit(mirror: string, commit: string): Promise<boolean> {
  if (knownCommit(mirror, commit)) return true;
  return git(['cat-file', '-e', `${commit}^{commit}`], mirror).then(
    () => (rememberCommit(mirror, commit), true),
    () => false,
  );
}

/**
 * Commits this process saw in a mirror (resolved there, or found by hasCommit), with when:
 * a session's provisioning asks for the commit its repoPolicy resolved moments before, and
 * need not start a git process to hear it again. An object seen in a mirror stays there far
 * longer than KNOWN_COMMIT_MS: git prunes unreachable objects only after gc.pruneExpire
 * (two weeks by default), and a mirror is only ever fetched into.
 */
const KNOWN_COMMITS = new Map<string, number>();
const KNOWN_COMMIT_MS = 10 * 60_000;
const KNOWN_COMMITS_MAX = 10_000;

function rememberCommit(mirror: string, commit: string): void {
  if (!OBJECT_ID.test(commit)) return;
  const key = `${mirror}\0${commit}`;
  KNOWN_COMMITS.delete(key); // the newest last, so the oldest go first
  KNOWN_COMMITS.set(key, Date.now());
  for (const oldest of KNOWN_COMMITS.keys()) {
    if (KNOWN_COMMITS.size <= KNOWN_COMMITS_MAX) break;
    KNOWN_COMMITS.delete(oldest);
  }
}

function knownCommit(mirror: string, commit: string): boolean {
  const seen = KNOWN_COMMITS.get(`${mirror}\0${commit}`);
  return seen !== undefined && Date.now() - seen < KNOWN_COMMIT_MS;
}

/** Commits in `to` that `from` lacks; undefined when `from` is unknown to the mirror. */
export async function commitsBetween(mirror: string, from: string, to: string): Promise<number | undefined> {
  if (from === to) return 0;
  if (!(await hasCommit(mirror, from))) return undefined;
  return Number((await git(['rev-list', '--count', `${from}..${to}`], mirror)).trim());
}

/** The ref a catch-up bundle carries its commit under (a staging ref of the mirror, used under its lock). */
export const CATCH_UP_REF = 'refs/drydock-staging/catch-up';

/**
 * A git bundle that brings a copy holding `from` up to `to`: only the commits
 * in between (the whole history of `to` when the mirror no longer knows
 * `from`). `to` is carried as CATCH_UP_REF.
 */
export async function catchUpBundle(mirror: string, from: string, to: string): Promise<Buffer> {
  return withMirrorLock(mirror, async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'drydock-catch-up-'));
    try {
      await git(['update-ref', CATCH_UP_REF, to], mirror);
      const file = path.join(dir, 'catch-up.bundle');
      const prerequisite = (await hasCommit(mirror, from)) ? [`^${from}`] : [];
      await git(['bundle', 'create', '--quiet', file, CATCH_UP_REF, ...prerequisite], mirror);
      return await readFile(file);
    } finally {
      await git(['update-ref', '-d', CATCH_UP_REF], mirror).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
  });
}

async function exists(p: string): Promise<boolean> {
  return access(p).then(
    () => true,
    () => false,
  );
}
