/**
 * What of a repo's Dockerfile drydock builds, and from which images
 * (docs/snapshots.md, "The repo's environment"). A Dockerfile is repo
 * content, and an image build runs in the host's Docker engine: the engine
 * fetches FROM images, `ADD <url>`, `COPY --from` images and `# syntax=`
 * frontends on the host's network, and runs RUN as root with the engine's
 * default runtime, capabilities and no time limit. So drydock builds only
 * what makes an image without running or fetching anything:
 *
 * - one FROM, of an image already on the host that no repository made
 *   (never a snapshot, another repo's build or environment: their source,
 *   history and whatever setup wrote), pinned by its id;
 * - ARG, ENV, LABEL, WORKDIR, USER, COPY (from the build context, with
 *   --chown/--chmod), EXPOSE, CMD, ENTRYPOINT, SHELL, STOPSIGNAL;
 * - no RUN (what it would install belongs in setup, which runs in the
 *   sandbox as its user, behind the egress proxy, within limits), no ADD
 *   (URLs, archives unpacked on the host), no VOLUME, ONBUILD or HEALTHCHECK,
 *   no parser directive but `escape`.
 *
 * Pure: the environment activity and its tests share it.
 */
import { DockerfileParser, ModifiableInstruction, type Instruction } from 'dockerfile-ast';

/** The Dockerfile drydock builds, with its FROM still to pin (`dockerfileFrom`), or why it does not. */
export type DockerfilePlan = { from: string; pinned: (imageId: string) => string } | { problem: string };

/** Instructions after FROM that make an image without running or fetching anything. */
const ALLOWED = [
  'ARG',
  'ENV',
  'LABEL',
  'WORKDIR',
  'USER',
  'COPY',
  'EXPOSE',
  'CMD',
  'ENTRYPOINT',
  'SHELL',
  'STOPSIGNAL',
];

/** What to do instead of each instruction drydock does not build. */
const REFUSED: Record<string, string> = {
  RUN: "runs as root in the host's image builder: put what it does in setup (postCreateCommand or .drydock/config.yaml), which runs in the sandbox as its user, through the egress proxy",
  ADD: 'fetches URLs and unpacks archives on the host: use COPY',
  VOLUME: "makes storage outside the sandbox's disk limit",
  ONBUILD: 'runs in later builds',
  HEALTHCHECK: 'runs a command in the sandbox between steps',
  MAINTAINER: 'is deprecated: use LABEL',
};

/** `$NAME`, `${NAME}` and `${NAME:-default}` in `text`, from `values`; undefined names are a problem. */
function substitute(text: string, values: Record<string, string>): string | { problem: string } {
  let missing: string | undefined;
  const out = text.replace(
    /\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))/g,
    (_m, a, dflt, b) => {
      const name = (a ?? b) as string;
      const value = values[name] || (dflt as string | undefined);
      if (value === undefined) missing ??= name;
      return value ?? '';
    },
  );
  return missing ? { problem: `FROM names \${${missing}}, which no build argument or ARG default gives` } : out;
}

/** ARG defaults declared before FROM, overridden by the build arguments. */
function globalArgs(before: Instruction[], buildArgs: Record<string, string>): Record<string, string> {
  const values: Record<string, string> = {};
  for (const arg of before) {
    const [declared] = arg.getArguments().map((a) => a.getValue());
    const at = declared?.indexOf('=') ?? -1;
    const name = at === -1 ? declared : declared.slice(0, at);
    const value = at === -1 ? undefined : declared.slice(at + 1).replace(/^"(.*)"$/, '$1');
    if (name && value !== undefined) values[name] = value;
  }
  return { ...values, ...buildArgs };
}

/** The flags (`--chown`, `--from`...) of an instruction that takes them. */
const flagsOf = (i: Instruction): string[] =>
  i instanceof ModifiableInstruction ? i.getFlags().map((f) => f.getName()) : [];

/** Why `instruction` (after FROM) is not built, if it is not. */
function refusal(instruction: Instruction): string | undefined {
  const keyword = instruction.getKeyword().toUpperCase();
  if (keyword === 'FROM') return 'a second FROM: drydock builds one stage';
  if (REFUSED[keyword]) return `${keyword} ${REFUSED[keyword]}`;
  if (!ALLOWED.includes(keyword)) return `${keyword} is not an instruction drydock builds`;
  if (keyword !== 'COPY') return undefined;
  const flags = flagsOf(instruction);
  const other = flags.find((f) => f !== 'chown' && f !== 'chmod');
  if (other) return `COPY --${other}: drydock copies only from the build context (--chown and --chmod allowed)`;
  if (instruction.getArguments().some((a) => a.getValue().startsWith('<<'))) {
    return 'COPY with a here-document needs BuildKit: put the file in the repository';
  }
  return undefined;
}

/**
 * The plan of a repo's Dockerfile `text` with its build arguments: the image
 * its FROM names, and the Dockerfile to build once that image's id is known
 * (the FROM replaced by the id, so no ARG or tag can name another image at
 * build time). Every problem names the line.
 */
export function planDockerfile(text: string, buildArgs: Record<string, string>): DockerfilePlan {
  const dockerfile = DockerfileParser.parse(text);
  const problem = (line: number, why: string) => ({ problem: `line ${line + 1}: ${why}` });
  const directive = dockerfile.getDirectives().find((d) => d.getName().toLowerCase() !== 'escape');
  if (directive) {
    return problem(
      directive.getRange().start.line,
      `# ${directive.getName()}= is a BuildKit directive (a frontend pulled from a registry)`,
    );
  }
  const instructions = dockerfile.getInstructions();
  const fromAt = instructions.findIndex((i) => i.getKeyword().toUpperCase() === 'FROM');
  if (fromAt === -1) return { problem: 'no FROM' };
  const before = instructions.slice(0, fromAt);
  const stray = before.find((i) => i.getKeyword().toUpperCase() !== 'ARG');
  if (stray) return problem(stray.getRange().start.line, `${stray.getKeyword()} before FROM`);
  const from = instructions[fromAt];
  const fromLine = from.getRange().start.line;
  const fromArgs = from.getArguments().map((a) => a.getValue());
  const flags = flagsOf(from);
  if (flags.length || fromArgs.length === 0 || (fromArgs.length !== 1 && fromArgs[1]?.toUpperCase() !== 'AS')) {
    return problem(fromLine, 'FROM takes one image (and AS name), no flags');
  }
  for (const later of instructions.slice(fromAt + 1)) {
    const why = refusal(later);
    if (why) return problem(later.getRange().start.line, why);
  }
  const image = substitute(fromArgs[0], globalArgs(before, buildArgs));
  if (typeof image !== 'string') return problem(fromLine, image.problem);
  const lines = text.split('\n');
  const end = from.getRange().end.line;
  return {
    from: image,
    pinned: (imageId) => [...lines.slice(0, fromLine), `FROM ${imageId}`, ...lines.slice(end + 1)].join('\n'),
  };
}

/** Images drydock makes from a repository's content, by their `drydock.image` label (the snapshots': sandbox/snapshots.ts). */
const REPO_MADE: Record<string, string> = {
  snapshot: 'a snapshot',
  repo: "a repository's Dockerfile build",
  environment: "a repository's environment",
};

/**
 * Why a repo may not start from the host's image with these labels, if it
 * may not: drydock made it from a repository (a snapshot, a repo's Dockerfile
 * build, an environment), so it holds that repository's source, history and
 * whatever its setup wrote. Labels are inherited: an image built on one carries them.
 */
export function repoMadeImage(image: string, labels: Record<string, string>): string | undefined {
  const snapshot = Object.keys(labels).some((l) => l.startsWith('drydock.snapshot.'));
  const kind = labels['drydock.image'] ?? '';
  const made = snapshot ? REPO_MADE.snapshot : Object.hasOwn(REPO_MADE, kind) ? REPO_MADE[kind] : undefined;
  if (!made) return undefined;
  return (
    `image ${image} was made by drydock from a repository (${made}): it holds that repository's source and setup, ` +
    'so no repository may start from it; name an image the operator put on the host'
  );
}
