/**
 * The images a Dockerfile starts from, as the worker reads them to hand each
 * one, checked and pinned, to the isolated builder (sandbox/builder.ts):
 * every FROM and every `COPY --from` / `ADD --from` that names no stage, with
 * the global ARGs (and the build's args) substituted. This reading decides
 * nothing else: the builder builds the file as it is, and holds only the
 * images given here, so a line read differently here and by buildah (a bare
 * `\r`, say) can make a build fail, never reach an image not given.
 */

/** An image the Dockerfile names, the instruction and the line (1-based) that name it. */
export interface BaseImage {
  ref: string;
  instruction: 'FROM' | 'COPY --from' | 'ADD --from' | 'RUN --mount from';
  line: number;
}

/** What a RUN --mount type the builder cannot honour needs, and what to do. */
const REFUSED_MOUNTS: Record<string, string> = {
  secret:
    'RUN --mount=type=secret: the isolated builder is given no secrets; give what needs one in setup, or remove the mount',
  ssh: 'RUN --mount=type=ssh: the isolated builder has no SSH agent; fetch over https through the egress proxy instead',
};

/** The external images of a Dockerfile, or the problem that stops reading it. */
export function dockerfileBases(text: string, buildArgs: Record<string, string>): BaseImage[] | { problem: string } {
  const args = new Map<string, string>();
  const stages = new Set<string>();
  const bases: BaseImage[] = [];
  let seenFrom = false;
  for (const { words, line } of instructions(text)) {
    const [instruction, ...rest] = words;
    const keyword = instruction.toUpperCase();
    if (keyword === 'ARG' && !seenFrom) {
      for (const spec of rest) {
        const [name, ...value] = spec.split('=');
        const given = buildArgs[name] ?? (value.length ? value.join('=') : undefined);
        if (given !== undefined) args.set(name, unquote(given));
      }
    } else if (keyword === 'FROM') {
      seenFrom = true;
      const plain = rest.filter((w) => !w.startsWith('--'));
      if (!plain.length) return { problem: `line ${line}: FROM names no image` };
      const ref = substitute(plain[0], args);
      if (typeof ref !== 'string') return { problem: `line ${line}: ${ref.problem}` };
      if (!stages.has(ref.toLowerCase()) && ref.toLowerCase() !== 'scratch')
        bases.push({ ref, instruction: 'FROM', line });
      if (plain.length >= 3 && plain[1].toUpperCase() === 'AS') stages.add(plain[2].toLowerCase());
      stages.add(String(stages.size));
    } else if (keyword === 'COPY' || keyword === 'ADD') {
      const from = rest.find((w) => w.toLowerCase().startsWith('--from='));
      if (!from) continue;
      const ref = substitute(from.slice('--from='.length), args);
      if (typeof ref !== 'string') return { problem: `line ${line}: ${ref.problem}` };
      if (!stages.has(ref.toLowerCase()) && !/^\d+$/.test(ref))
        bases.push({ ref, instruction: `${keyword} --from`, line });
    } else if (keyword === 'RUN') {
      const mounts = runMounts(rest, line, args, stages);
      if ('problem' in mounts) return mounts;
      bases.push(...mounts);
    }
  }
  if (!seenFrom) return { problem: 'no FROM instruction' };
  return bases;
}

/**
 * A RUN's `--mount`s: the images a bind or cache mount reads `from` (not a
 * stage), or the mount the builder cannot honour (a secret, an SSH agent).
 * A cache mount is buildah's own, kept for the build only; bind and tmpfs
 * mounts are buildah's as BuildKit's.
 */
function runMounts(
  words: string[],
  line: number,
  args: Map<string, string>,
  stages: Set<string>,
): BaseImage[] | { problem: string } {
  const out: BaseImage[] = [];
  for (const word of words) {
    if (!word.startsWith('--')) break;
    if (!word.toLowerCase().startsWith('--mount=')) continue;
    const options = new Map(
      word
        .slice('--mount='.length)
        .split(',')
        .map((o) => [o.split('=')[0].toLowerCase(), o.split('=').slice(1).join('=')] as const),
    );
    const type = options.get('type') ?? 'bind';
    if (Object.hasOwn(REFUSED_MOUNTS, type)) return { problem: `line ${line}: ${REFUSED_MOUNTS[type]}` };
    const from = options.get('from');
    if (from === undefined) continue;
    const ref = substitute(from, args);
    if (typeof ref !== 'string') return { problem: `line ${line}: ${ref.problem}` };
    if (!stages.has(ref.toLowerCase()) && !/^\d+$/.test(ref)) out.push({ ref, instruction: 'RUN --mount from', line });
  }
  return out;
}

/**
 * The Dockerfile with BuildKit's `--link` (`--link=true|false`) taken off
 * its COPY and ADD instructions: buildah 1.39 refuses it, and a linked COPY
 * makes the same files as a plain one (it only lets BuildKit rebase the
 * layer). Everything else is left as written, lines and all.
 */
export function withoutCopyLink(text: string): string {
  const escape = /^\s*#\s*escape\s*=\s*`/im.test(text.split(/\r\n|\r|\n/, 8).join('\n')) ? '`' : '\\';
  const lines = text.split(/(\r\n|\r|\n)/);
  let continuing = false; // the line goes on a COPY or ADD of the lines above
  for (let i = 0; i < lines.length; i += 2) {
    const line = lines[i];
    const comment = /^\s*#/.test(line);
    const copy: boolean = continuing || /^\s*(copy|add)\s/i.test(line);
    if (copy && !comment) lines[i] = line.replace(/(^|\s)--link(?:=(?:true|false))?(?=\s|$)/gi, '');
    continuing = copy && (comment || line.trimEnd().endsWith(escape));
  }
  return lines.join('');
}

/** The instructions of a Dockerfile: words and first line, continuation lines joined, comments skipped. */
function* instructions(text: string): Generator<{ words: string[]; line: number }> {
  // Every line break a builder might see: \r\n, \r and \n.
  const lines = text.split(/\r\n|\r|\n/);
  for (let i = 0; i < lines.length; i++) {
    const start = i;
    let joined = lines[i];
    if (/^\s*(#|$)/.test(joined)) continue;
    while (joined.endsWith('\\') && i + 1 < lines.length) {
      i++;
      if (/^\s*#/.test(lines[i])) continue;
      joined = joined.slice(0, -1) + ' ' + lines[i];
    }
    const words = joined.trim().split(/\s+/);
    if (words[0]) yield { words, line: start + 1 };
  }
}

function unquote(value: string): string {
  return /^(["']).*\1$/.test(value) ? value.slice(1, -1) : value;
}

/** `$NAME`, `${NAME}`, `${NAME:-default}` from the global ARGs; an unknown one is a problem. */
function substitute(word: string, args: Map<string, string>): string | { problem: string } {
  let missing: string | undefined;
  const value = word.replace(
    /\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))/g,
    (_, braced: string | undefined, fallback: string | undefined, bare: string | undefined) => {
      const name = (braced ?? bare)!;
      const found = args.get(name) || fallback;
      if (found === undefined) missing ??= name;
      return found ?? '';
    },
  );
  if (missing) return { problem: `${word}: the ARG ${missing} has no value before the first FROM; give it a default` };
  return value;
}
