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
 * Where Docker's Dockerfile parser and dockerfile-ast (the checker) could
 * split `text` into different instructions, if anywhere (T4-H1): a carriage
 * return not before a line feed (a line break to the checker only), control
 * characters, and whitespace outside ASCII (Docker trims it at line starts;
 * the checker does not). Refused, so both read the same lines.
 */
function ambiguity(text: string): { line: number; why: string } | undefined {
  const rules: [RegExp, string][] = [
    [/\r(?!\n)/, 'a carriage return not followed by a line feed: save the file with \\n (or \\r\\n) line ends'],
    [/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/, 'a control character: remove it'],
    [
      /[\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]|(?!^)\ufeff/,
      'whitespace outside ASCII: use spaces',
    ],
  ];
  for (const [pattern, why] of rules) {
    const at = text.search(pattern);
    if (at !== -1) return { line: text.slice(0, at).split('\n').length - 1, why };
  }
  return undefined;
}

/** Docker's reading of the parser directives at the top: the escape character, or why they are refused. */
function escapeOf(text: string): string | { line: number; why: string } {
  const directive = /^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$/; // Docker's own pattern
  const lines = text.replace(/^\ufeff/, '').split('\n');
  let escape = '\\';
  for (let at = 0; at < lines.length; at++) {
    const found = directive.exec(lines[at].replace(/\r$/, ''));
    if (!found) break;
    const [, name, value] = found;
    if (at !== 0 || name.toLowerCase() !== 'escape' || !['\\', '`'].includes(value)) {
      const kind =
        name.toLowerCase() === 'syntax'
          ? 'a BuildKit directive (a frontend pulled from a registry)'
          : 'a parser directive drydock does not build';
      return { line: at, why: `# ${name}= is ${kind} (only # escape= on line 1)` };
    }
    escape = value;
  }
  return escape;
}

/**
 * One instruction's text as one line, joined as Docker joins continuation
 * lines: the escape and trailing blanks go, comment and blank lines inside
 * are skipped, the rest is appended as it is.
 */
function oneLine(raw: string, escape: string): string {
  const marker = new RegExp(`${escape === '`' ? '`' : '\\\\'}[ \\t]*$`);
  let joined = '';
  for (const [at, line] of raw.replace(/\r\n/g, '\n').split('\n').entries()) {
    if (at > 0 && /^[ \t]*(#|$)/.test(line)) continue;
    if (!marker.test(line)) return joined + line;
    joined += line.replace(marker, '');
  }
  return joined;
}

/** An instruction as the checker sees it: keyword and argument values. */
const reading = (i: Instruction): string =>
  JSON.stringify([i.getKeyword().toUpperCase(), ...i.getArguments().map((a) => a.getValue())]);

/**
 * The Dockerfile handed to the builder: emitted from the checked instructions
 * (one line each, the FROM replaced by the pinned image id), never the repo's
 * text edited in place, and read back to hold exactly the checked list.
 */
function emitted(escape: string, instructions: Instruction[], fromAt: number, imageId: string): string {
  const lines = instructions.map((i, at) => (at === fromAt ? `FROM ${imageId}` : oneLine(i.getTextContent(), escape)));
  const text = [...(escape === '`' ? ['# escape=`'] : []), ...lines, ''].join('\n');
  const expected = instructions.map((i, at) => (at === fromAt ? JSON.stringify(['FROM', imageId]) : reading(i)));
  const back = DockerfileParser.parse(text).getInstructions().map(reading);
  if (JSON.stringify(back) !== JSON.stringify(expected)) {
    throw new Error('the Dockerfile drydock would build does not read back as the checked instructions');
  }
  return text;
}

/**
 * The plan of a repo's Dockerfile `text` with its build arguments: the image
 * its FROM names, and the Dockerfile to build once that image's id is known
 * (the FROM replaced by the id, so no ARG or tag can name another image at
 * build time). Every problem names the line.
 */
export function planDockerfile(text: string, buildArgs: Record<string, string>): DockerfilePlan {
  const problem = (line: number, why: string) => ({ problem: `line ${line + 1}: ${why}` });
  const unclear = ambiguity(text);
  if (unclear) return problem(unclear.line, unclear.why);
  const escape = escapeOf(text);
  if (typeof escape !== 'string') return problem(escape.line, escape.why);
  const dockerfile = DockerfileParser.parse(text);
  if (dockerfile.getEscapeCharacter() !== escape)
    return problem(0, 'the # escape= directive is unclear: write it as `# escape=\\` or `# escape=`` on line 1');
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
  return { from: image, pinned: (imageId) => emitted(escape, instructions, fromAt, imageId) };
}

/** Images drydock makes from a repository's content, by their `drydock.image` label (the snapshots': sandbox/snapshots.ts). */
const REPO_MADE: Record<string, string> = {
  snapshot: 'a snapshot',
  repo: "a repository's Dockerfile build",
  environment: "a repository's environment",
  'service-build': "a repository's compose service build",
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
