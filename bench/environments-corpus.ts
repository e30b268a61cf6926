/**
 * bench/environments-corpus: how many published dev container
 * configurations and compose files drydock accepts as they are (issue 46's
 * corpus measure). Each folder of `<dir>` is one repository's files as
 * published (`<dir>/<owner>+<name>/…`, never committed: public code; the
 * corpus is committed as a manifest, environments-corpus.json: repository,
 * commit and files, written by `manifest` from git mirrors and unpacked from
 * them by `unpack`); for each, drydock's own readers run as a snapshot build
 * runs them, with every image taken as present and nothing built or fetched:
 *
 *   dev container   `.devcontainer/devcontainer.json`, chosen and read as the
 *                   snapshot build does (declaredEnvironment, no operator
 *                   setting, no .drydock/config.yaml), its compose files
 *                   through the compose reader (declaredStack), then the
 *                   Dockerfile check on the Dockerfile it builds
 *   compose file    a root `docker-compose.yml` / `compose.yaml` (with
 *                   Compose's default override file) that no dev container
 *                   names, read as a dev container naming it would have it
 *                   read: its dev service the one a developer works in
 *                   (devServiceOf)
 *
 * Prints N accepted of M (percent) for each kind and in all, the refusals
 * grouped by reason (file names, service names, values and line numbers
 * taken out), the refusals that name no field, and the accepted files'
 * notes (what is read as Compose or the Dev Container CLI reads it but differs
 * in a sandbox, said in the worker's log: an unset ${localEnv:…} empty,
 * remoteUser root not given). A file is refused for every problem drydock
 * reports of it; "would unlock" counts the files whose only reasons are that one.
 *
 * Each refused file is counted by design, broken as published, or refused
 * for a limit of drydock's (isByDesign, isBrokenAsPublished).
 *
 *   npx tsx bench/environments-corpus.ts manifest <mirrors>
 *   npx tsx bench/environments-corpus.ts unpack <mirrors> <dir>
 *   npx tsx bench/environments-corpus.ts <dir> [--json out.json]
 */
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { parseDocument } from 'yaml';
import {
  declaredEnvironment,
  declaredStack,
  dockerfileBases,
  RepoFileError,
  type RepoObject,
  DEVCONTAINER_FILE,
  EnvironmentError,
  type RepoEnvironment,
} from '../sandbox';

type Kind = 'devcontainer' | 'compose';
interface Outcome {
  repo: string;
  kind: Kind;
  file: string;
  problems: string[];
  /** What the readers said of an accepted part: read as Compose or the Dev Container CLI reads it, but said. */
  notes?: string[];
}

const ROOT_COMPOSE = ['compose.yaml', 'compose.yml', 'docker-compose.yaml', 'docker-compose.yml'];

/** A file of the repo folder, as git would give it to the snapshot build (undefined: not a file there). */
function reader(folder: string): (file: string) => Promise<string | undefined> {
  return (file) => {
    const at = path.join(folder, file);
    if (!path.resolve(at).startsWith(path.resolve(folder) + path.sep)) return Promise.resolve(undefined);
    try {
      return Promise.resolve(statSync(at).isFile() ? readFileSync(at, 'utf8') : undefined);
    } catch {
      return Promise.resolve(undefined);
    }
  };
}

/**
 * The folder as the repo's tree at a commit (sandbox/repo-files.ts's RepoTree):
 * a path a service mounts, symlinks resolved within the folder; one that
 * leaves it is refused naming the field. Sizes are not checked.
 */
function folderTree(folder: string): {
  commit: string;
  resolve: (p: string, field: string) => Promise<RepoObject | undefined>;
} {
  const root = realpathSync(folder);
  const resolve = (repoPath: string, field: string): Promise<RepoObject | undefined> => {
    const at = path.resolve(root, repoPath);
    const outside = (p: string) => p !== root && !p.startsWith(root + path.sep);
    if (outside(at)) return Promise.reject(new RepoFileError(`${field}: "${repoPath}" is outside the repository`));
    if (!existsSync(at)) return Promise.resolve(undefined);
    const real = realpathSync(at);
    if (outside(real)) return Promise.reject(new RepoFileError(`${field}: "${repoPath}" is outside the repository`));
    const stat = statSync(real);
    const kind = stat.isDirectory() ? 'folder' : 'file';
    const mode = stat.mode & 0o111 ? 0o755 : 0o644;
    return Promise.resolve({
      kind,
      object: `folder:${path.relative(root, real)}`,
      path: path.relative(root, real),
      mode,
    });
  };
  return { commit: 'folder', resolve };
}

/**
 * The Dockerfile check a snapshot build makes before it hands the file to
 * the isolated builder (repo-image.ts's repoDockerfile: the file and context
 * in the repo, then dockerfileBases reading the images it starts from); every
 * image is taken as present. The builder builds the rest as it is written.
 */
async function checkDockerfile(folder: string, env: RepoEnvironment): Promise<string[]> {
  if (env.dockerfile === undefined) return [];
  const text = await reader(folder)(env.dockerfile);
  if (text === undefined) return [`${env.source}: Dockerfile ${env.dockerfile} is not in the repository`];
  const context = path.join(folder, env.context ?? '');
  if (!existsSync(context) || !statSync(context).isDirectory())
    return [`${env.source}: build context ${env.context || '.'} is not in the repository`];
  const bases = dockerfileBases(text, env.args);
  return 'problem' in bases ? [`${env.source}: ${env.dockerfile}, ${bases.problem}`] : [];
}

/** A compose refusal is several problems joined by "; ", each starting with its file. */
function problemsOf(err: unknown): string[] {
  if (err instanceof RepoFileError) return [err.message];
  if (!(err instanceof EnvironmentError)) return [`(crash) ${err instanceof Error ? err.message : String(err)}`];
  return err.message.split(/; (?=[\w./-]+\.(?:ya?ml|json)\b)/);
}

/** Runs the readers on one declared environment (undefined: drydock chooses from the files): problems, and notes. */
async function check(folder: string, declared?: RepoEnvironment): Promise<{ problems: string[]; notes?: string[] }> {
  const read = reader(folder);
  try {
    const env = declared ?? (await declaredEnvironment(undefined, undefined, read));
    const { environment, notes } = await declaredStack(read, env, undefined, folderTree(folder));
    const problems = environment ? await checkDockerfile(folder, environment) : [];
    return { problems, ...(notes.length ? { notes } : {}) };
  } catch (err) {
    return { problems: problemsOf(err) };
  }
}

/**
 * The service a dev container naming this compose file would make its own,
 * the one a developer works in: of the services building the repo's root, the
 * first that declares a port (not a one-off `migrate`), else the first; else
 * the first built service with a port, else the first built; else the first.
 */
function devServiceOf(text: string): string | undefined {
  let data: unknown;
  try {
    data = parseDocument(text, { merge: true }).toJS({ maxAliasCount: 100 });
  } catch {
    return undefined;
  }
  type Service = { build?: unknown; ports?: unknown; expose?: unknown } | null;
  const services = (data as { services?: Record<string, Service> } | null)?.services;
  if (!services || typeof services !== 'object') return undefined;
  const entries = Object.entries(services);
  const contextOf = (b: unknown) => (typeof b === 'string' ? b : (b as { context?: string } | null)?.context);
  const built = entries.filter(([, s]) => s?.build !== undefined);
  const root = built.filter(([, s]) => ['.', './', undefined].includes(contextOf(s!.build)));
  const listens = ([, s]: [string, Service]) => s?.ports !== undefined || s?.expose !== undefined;
  const pick = root.find(listens) ?? root[0] ?? built.find(listens) ?? built[0] ?? entries[0];
  return pick?.[0];
}

/** The files the folder's dev container names (its compose files), so a root compose file is not counted twice. */
function namedByDevcontainer(folder: string): Set<string> {
  try {
    const text = readFileSync(path.join(folder, DEVCONTAINER_FILE), 'utf8');
    const names = [...text.matchAll(/"\.\.\/([\w.-]+\.ya?ml)"/g)].map((m) => m[1]);
    return new Set(names);
  } catch {
    return new Set();
  }
}

export async function measure(folder: string): Promise<Outcome[]> {
  const repo = path.basename(folder);
  const out: Outcome[] = [];
  if (existsSync(path.join(folder, DEVCONTAINER_FILE))) {
    out.push({ repo, kind: 'devcontainer', file: DEVCONTAINER_FILE, ...(await check(folder)) });
  }
  const named = namedByDevcontainer(folder);
  const file = ROOT_COMPOSE.find((f) => existsSync(path.join(folder, f)));
  if (file && !named.has(file)) {
    const service = devServiceOf(readFileSync(path.join(folder, file), 'utf8')) ?? 'app';
    const override = file.replace(/\.(ya?ml)$/, '.override.$1');
    const files = [file, ...(existsSync(path.join(folder, override)) ? [override] : [])];
    const declared: RepoEnvironment = {
      source: `${file} (as a dev container's dockerComposeFile)`,
      compose: { files, service },
      args: {},
      containerEnv: {},
    };
    out.push({ repo, kind: 'compose', file, ...(await check(folder, declared)) });
  }
  return out;
}

/**
 * A refusal's reason: its field and why, without the file, service names,
 * quoted values, line numbers or image names, so the same rule counts once.
 */
export function reasonOf(problem: string): string {
  return problem
    .replace(/^\S+\.(?:ya?ml|json)(?: \(as a dev container's dockerComposeFile\))?:? /, '')
    .replace(/^[\w./-]*Dockerfile[\w.-]*, /i, 'Dockerfile ')
    .replace(/\bline \d+: /, '')
    .replace(/\bservices\.[\w-]+(?=[.:])/g, 'services.*')
    .replace(/\b(environment|args|volumes|secrets|configs|networks)\.[\w.-]+?(?=:)/g, '$1.*')
    .replace(/\.\d+(?=[.:])/g, '.*')
    .replace(/\$\{[^}]*\}/g, '${…}')
    .replace(/"[^"]*"/g, '"…"')
    .replace(/\b\d+\b/g, 'N')
    .replace(/\(([^()]*)\)/g, '(…)')
    .replace(/\bimage \S+/g, 'image …')
    .replace(/\s+/g, ' ')
    .slice(0, 140);
}

/** The fields a refusal may name first: devcontainer.json's properties and a compose file's top-level keys. */
const FIELDS = new Set(
  (
    'name image dockerFile context build appPort forwardPorts portsAttributes containerEnv remoteEnv containerUser ' +
    'remoteUser updateRemoteUserUID userEnvProbe overrideCommand shutdownAction init privileged capAdd securityOpt ' +
    'mounts features overrideFeatureInstallOrder customizations runArgs workspaceMount workspaceFolder ' +
    'dockerComposeFile service runServices initializeCommand onCreateCommand updateContentCommand postCreateCommand ' +
    'postStartCommand postAttachCommand waitFor hostRequirements version services networks volumes secrets configs ' +
    'include models (file)'
  ).split(' '),
);

/** Whether a problem names the field (a Dockerfile's line and instruction) it is about. */
export function namesField(problem: string): boolean {
  if (/Dockerfile[^,:]*, (?:line \d+: |no FROM)/i.test(problem)) return true;
  if (/\(named in \w+\)$/.test(problem)) return true;
  const rest = problem.replace(/^\S+\.(?:ya?ml|json)(?: \(as a dev container's dockerComposeFile\))?:? /, '');
  const first = /^[^\s:]+/.exec(rest)?.[0] ?? '';
  return FIELDS.has(first.split(/[.[]/)[0]) || first.startsWith('x-') || /^(?:Dockerfile|build context) /.test(rest);
}

/**
 * Refusals by design (docs/security.md): what a sandbox never gets, whatever
 * the repo says: root, privileges, capabilities, another seccomp or AppArmor
 * profile, host devices, namespaces, folders or network, the Docker socket,
 * the developer's machine's folders, and the features that ask for these.
 * Matched on drydock's own words, so a new message is counted as not by design
 * until it is added here.
 */
const BY_DESIGN = [
  /never run as root/,
  /without (?:extra )?privileges/,
  /without capabilities|with no capabilities/,
  /seccomp profile|security options/,
  /no host devices/,
  /no host namespaces/,
  /a folder of the host|mounts nothing of the host|of the host, which drydock never mounts/,
  /Docker socket/,
  /developer's machine, which a sandbox never mounts/,
  /no IP network|reach nothing but the sandbox's loopback|reaches only drydock's egress proxy/,
  /nothing of a sandbox is published on the host/,
  /which a sandbox never gets/,
  /never gets the host's network/,
  /cannot change kernel settings/,
  /use the runtime the sandbox uses/,
];

/**
 * Refusals of a file that does not work as published elsewhere either: what
 * Compose or the Dev Container CLI refuses too (a syntax error, a file or
 * Dockerfile it names that the repo does not hold, an env_file missing, a
 * required variable with no value, a service it names that is not there).
 */
const BROKEN_AS_PUBLISHED = [
  /not valid (?:JSON|YAML)/,
  /not in the repository \(named in dockerComposeFile\)/,
  /Dockerfile \S+ is not in the repository|build context \S+ is not in the repository/,
  /env_file[.\d]*: .* is not in the repository, nor an example of it/,
  /--env-file \S+ is not in the repository/,
  /is required: /,
  /has no value in the project's \.env/,
  /the dev container's service \(devcontainer\.json "service"\) is not in the file/,
  /: give image(?:, build\.dockerfile)? or (?:build|dockerComposeFile)/,
  /services: a map of services is required/,
];

/** Whether the file would not work as published with Compose or the Dev Container CLI either. */
export function isBrokenAsPublished(problem: string): boolean {
  return BROKEN_AS_PUBLISHED.some((re) => re.test(problem));
}

/** Whether drydock refuses this by design: see BY_DESIGN. */
export function isByDesign(problem: string): boolean {
  return BY_DESIGN.some((re) => re.test(problem));
}

function report(outcomes: Outcome[]): void {
  const pct = (n: number, m: number) => (m ? `${((100 * n) / m).toFixed(0)} %` : '-');
  for (const kind of ['devcontainer', 'compose', 'all'] as const) {
    const of = outcomes.filter((o) => kind === 'all' || o.kind === kind);
    const ok = of.filter((o) => !o.problems.length).length;
    console.log(`${kind.padEnd(13)} ${ok} accepted of ${of.length} (${pct(ok, of.length)})`);
  }
  const refused = outcomes.filter((o) => o.problems.length);
  const designOnly = refused.filter((o) => o.problems.every(isByDesign));
  const notDrydocks = refused.filter((o) => o.problems.every((p) => isByDesign(p) || isBrokenAsPublished(p)));
  const ok = outcomes.length - refused.length;
  const n = outcomes.length;
  console.log(
    `\nrefused only by design (docs/security.md) ${designOnly.length}; ` +
      `accepted or refused only by design ${ok + designOnly.length} of ${n} (${pct(ok + designOnly.length, n)})\n` +
      `refused only by design or for what Compose or the Dev Container CLI refuses too (broken as published) ` +
      `${notDrydocks.length}; accepted or so refused ${ok + notDrydocks.length} of ${n} (${pct(ok + notDrydocks.length, n)}); ` +
      `refused for a limit of drydock's ${refused.length - notDrydocks.length}`,
  );
  const byReason = new Map<string, { files: Set<string>; only: number }>();
  for (const o of refused) {
    const reasons = new Set(o.problems.map(reasonOf));
    for (const r of reasons) {
      const entry = byReason.get(r) ?? { files: new Set<string>(), only: 0 };
      entry.files.add(`${o.repo}/${o.file}`);
      if (reasons.size === 1) entry.only++;
      byReason.set(r, entry);
    }
  }
  console.log(`\nrefusals by reason (files refused for it; files it alone refuses), ${refused.length} files refused:`);
  const sorted = [...byReason.entries()].sort((a, b) => b[1].files.size - a[1].files.size);
  for (const [reason, { files, only }] of sorted) {
    console.log(`${String(files.size).padStart(4)} ${String(only).padStart(4)}  ${reason}`);
  }
  byRule(refused);
  liftingOrder(refused, outcomes.length);
  notesOf(outcomes.filter((o) => !o.problems.length));
  console.log(`\nrefused for a limit of drydock's: its problems neither by design nor broken as published:`);
  const limit = (p: string) => !isByDesign(p) && !isBrokenAsPublished(p);
  for (const o of refused.filter((o) => o.problems.some(limit)))
    for (const p of o.problems.filter(limit)) console.log(`  ${o.repo}: ${p.slice(0, 220)}`);
  const unnamed = refused.flatMap((o) => o.problems.filter((p) => !namesField(p)).map((p) => `${o.repo}: ${p}`));
  console.log(`\nrefusals naming no field (a syntax error names its position instead): ${unnamed.length}`);
  for (const u of unnamed) console.log(`  ${u.slice(0, 300)}`);
}

/** The accepted files' notes by reason: what was read as Compose or the CLI reads it, but said in the worker's log. */
function notesOf(accepted: Outcome[]): void {
  const byReason = new Map<string, number>();
  for (const o of accepted)
    for (const r of new Set((o.notes ?? []).map(reasonOf))) byReason.set(r, (byReason.get(r) ?? 0) + 1);
  const noted = accepted.filter((o) => o.notes?.length).length;
  console.log(`\naccepted with a note in the worker's log: ${noted} of ${accepted.length} (files, by note):`);
  for (const [reason, files] of [...byReason.entries()].sort((a, b) => b[1] - a[1]))
    console.log(`${String(files).padStart(4)}  ${reason}`);
}

/** A reason's rule: its field (Dockerfile reasons: the instruction), so one change to drydock lifts it. */
function ruleOf(reason: string): string {
  if (reason.startsWith('Dockerfile '))
    return `Dockerfile ${/# \w+=|\b[A-Z]{2,}\b/.exec(reason.slice(11))?.[0] ?? '(file or context missing)'}`;
  if (/^not valid (?:JSON|YAML)/.test(reason)) return '(syntax error)';
  if (/^not in the repository/.test(reason)) return 'dockerComposeFile (a file not in the repository)';
  return reason
    .split(/:? /)[0]
    .replace(/^x-[\w-]+\..*/, 'x-… (an extension field)')
    .replace(/\.environment\..*/, '.environment.*');
}

/** The files each rule refuses, and those it alone refuses. */
function byRule(refused: Outcome[]): void {
  const counts = new Map<string, { files: number; only: number }>();
  for (const o of refused) {
    const rules = new Set(o.problems.map((p) => ruleOf(reasonOf(p))));
    for (const r of rules) {
      const c = counts.get(r) ?? { files: 0, only: 0 };
      c.files++;
      if (rules.size === 1) c.only++;
      counts.set(r, c);
    }
  }
  console.log(`\nby rule (files refused for it; files it alone refuses):`);
  for (const [rule, c] of [...counts.entries()].sort((a, b) => b[1].files - a[1].files)) {
    console.log(`${String(c.files).padStart(4)} ${String(c.only).padStart(4)}  ${rule}`);
  }
}

/** Which rules, lifted one after another (the one accepting the most more files first), take acceptance where. */
function liftingOrder(refused: Outcome[], total: number): void {
  const left = refused.map((o) => new Set(o.problems.map((p) => ruleOf(reasonOf(p)))));
  let accepted = total - refused.length;
  const lifted = new Set<string>();
  console.log(`\nrules lifted in turn (each the one accepting the most more files), acceptance after each:`);
  for (let step = 0; step < 12; step++) {
    const gain = new Map<string, number>();
    for (const rules of left) {
      const open = [...rules].filter((r) => !lifted.has(r));
      if (open.length === 1) gain.set(open[0], (gain.get(open[0]) ?? 0) + 1);
    }
    const best = [...gain.entries()].sort((a, b) => b[1] - a[1])[0];
    if (!best) break;
    lifted.add(best[0]);
    accepted += best[1];
    console.log(
      `  + ${best[0].padEnd(34)} +${best[1]}  → ${accepted} of ${total} (${((100 * accepted) / total).toFixed(0)} %)`,
    );
  }
}

/** One repository of the corpus: where it is published, the commit read, the files measured. */
interface ManifestEntry {
  repo: string;
  commit: string;
  files: string[];
}

const MANIFEST = path.join(__dirname, 'environments-corpus.json');
/** A blob larger than this is written empty: only its presence matters to the readers. */
const LARGEST_BLOB = 1 << 20;

function git(gitDir: string, args: string[], input?: string): Buffer {
  return execFileSync('git', ['--git-dir', gitDir, ...args], { input, maxBuffer: 1 << 30 });
}

/** The git directory of a mirror (`<mirrors>/<owner>+<name>/repo`, bare or with a work tree). */
function gitDirOf(mirror: string): string | undefined {
  for (const at of [path.join(mirror, 'repo', '.git'), path.join(mirror, 'repo')]) {
    if (existsSync(path.join(at, 'HEAD'))) return at;
  }
  return undefined;
}

/** The files this measure reads first, as the commit holds them. */
function measuredFiles(gitDir: string, commit: string): string[] {
  const names = [DEVCONTAINER_FILE, ...ROOT_COMPOSE];
  const out = git(gitDir, ['ls-tree', '--name-only', commit, '--', ...names]).toString();
  return out.split('\n').filter(Boolean);
}

/**
 * Writes the commit's tree into `into` (blobs over LARGEST_BLOB, and those the
 * mirror lacks, as empty files; symlinks as symlinks; submodules as folders).
 */
function unpackTree(gitDir: string, commit: string, into: string): void {
  const listing = git(gitDir, ['ls-tree', '-r', '-z', '-l', commit]).toString().split('\0').filter(Boolean);
  const entries = listing.map((line) => {
    const [meta, file] = [line.slice(0, line.indexOf('\t')), line.slice(line.indexOf('\t') + 1)];
    const [mode, type, oid, size] = meta.split(/\s+/);
    return { mode, type, oid, size: Number(size), file };
  });
  const wanted = entries.filter((e) => e.type === 'blob' && e.size <= LARGEST_BLOB);
  const batch = git(gitDir, ['cat-file', '--batch'], wanted.map((e) => e.oid).join('\n') + '\n');
  const blobs = new Map<string, Buffer>();
  let at = 0;
  while (at < batch.length) {
    const eol = batch.indexOf(10, at);
    const [oid, kind, size] = batch.subarray(at, eol).toString().split(' ');
    at = eol + 1;
    if (kind === 'missing' || size === undefined) continue;
    blobs.set(oid, batch.subarray(at, at + Number(size)));
    at += Number(size) + 1;
  }
  for (const e of entries) {
    const target = path.join(into, e.file);
    if (!path.resolve(target).startsWith(path.resolve(into) + path.sep)) continue;
    mkdirSync(path.dirname(target), { recursive: true });
    if (e.type === 'commit') mkdirSync(target, { recursive: true });
    else if (e.mode === '120000') symlinkSync((blobs.get(e.oid) ?? Buffer.alloc(0)).toString(), target);
    else writeFileSync(target, blobs.get(e.oid) ?? Buffer.alloc(0), { mode: e.mode === '100755' ? 0o755 : 0o644 });
  }
}

/** `manifest <mirrors>`: the manifest of every mirror holding a measured file, at its HEAD. */
function writeManifest(mirrors: string): void {
  const entries: ManifestEntry[] = [];
  for (const name of readdirSync(mirrors).sort()) {
    const gitDir = gitDirOf(path.join(mirrors, name));
    if (!gitDir || !name.includes('+')) continue;
    const commit = git(gitDir, ['rev-parse', 'HEAD']).toString().trim();
    const files = measuredFiles(gitDir, commit);
    if (files.length) entries.push({ repo: name.replace('+', '/'), commit, files });
  }
  // Written as Prettier writes it, so the committed file stays as the check wants it.
  const entry = (e: ManifestEntry) =>
    `  {\n    "repo": ${JSON.stringify(e.repo)},\n    "commit": "${e.commit}",\n` +
    `    "files": [${e.files.map((f) => JSON.stringify(f)).join(', ')}]\n  }`;
  writeFileSync(MANIFEST, `[\n${entries.map(entry).join(',\n')}\n]\n`);
  console.log(`${entries.length} repositories in ${path.relative(process.cwd(), MANIFEST)}`);
}

/** `unpack <mirrors> <dir>`: each manifest entry's tree at its commit into `<dir>/<owner>+<name>`. */
function unpack(mirrors: string, dir: string): void {
  const entries = JSON.parse(readFileSync(MANIFEST, 'utf8')) as ManifestEntry[];
  const absent: string[] = [];
  for (const { repo, commit } of entries) {
    const name = repo.replace('/', '+');
    const gitDir = gitDirOf(path.join(mirrors, name));
    const into = path.join(dir, name);
    if (existsSync(into)) continue;
    try {
      if (!gitDir) throw new Error('no mirror');
      unpackTree(gitDir, commit, into);
    } catch (err) {
      absent.push(`${repo}: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
    }
  }
  console.log(`${entries.length - absent.length} of ${entries.length} unpacked into ${dir}`);
  for (const a of absent) console.log(`  not unpacked: ${a}`);
}

async function main(): Promise<void> {
  const [dir, flag, jsonOut] = process.argv.slice(2);
  if (dir === 'manifest' && flag) return writeManifest(flag);
  if (dir === 'unpack' && flag && jsonOut) return unpack(flag, jsonOut);
  if (!dir) throw new Error('usage: npx tsx bench/environments-corpus.ts <dir> [--json out.json]');
  const folders = readdirSync(dir)
    .map((d) => path.join(dir, d))
    .filter((d) => statSync(d).isDirectory())
    .sort();
  const outcomes: Outcome[] = [];
  for (const folder of folders) outcomes.push(...(await measure(folder)));
  report(outcomes);
  if (flag === '--json' && jsonOut) writeFileSync(jsonOut, JSON.stringify(outcomes, null, 2));
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
