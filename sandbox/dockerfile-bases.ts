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
  instruction: 'FROM' | 'COPY --from' | 'ADD --from';
  line: number;
}

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
    }
  }
  if (!seenFrom) return { problem: 'no FROM instruction' };
  return bases;
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
