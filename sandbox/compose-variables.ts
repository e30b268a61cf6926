/**
 * Compose's variables without a host: the project's `.env` and a service's
 * `env_file` read as Compose reads them (`KEY=value`, `export KEY=value`,
 * single quotes literal, double quotes with escapes, ` #` comments after an
 * unquoted value, values spanning lines inside quotes), and `${VAR}`
 * substitution with every form of the Compose Specification: `${VAR:-default}`,
 * `${VAR-default}`, `${VAR:?error}`, `${VAR?error}`, `${VAR:+other}`,
 * `${VAR+other}`, nested defaults and `$$`.
 *
 * Why not the `dotenv` and `dotenv-expand` packages: dotenv does not expand
 * variables, dotenv-expand has neither `?` nor `+` forms and reads
 * `process.env`; and drydock must never read the worker's environment. The
 * values come only from files of the repo; a variable that has none there is
 * a problem naming the field, never an empty string taken in silence.
 */

/** Names to values, in the order they were read. */
export type Variables = Map<string, string>;

const NAME = /^[A-Za-z_][A-Za-z0-9_.-]*$/;

/**
 * A `.env` or `env_file` of the repo (`file` names it in problems). Values
 * that are not single-quoted are substituted with the variables read before
 * them in the file, then `outer` (the project's `.env` for an env_file).
 */
export function parseEnvFile(text: string, file: string, problems: string[], outer?: Variables): Variables {
  const out: Variables = new Map();
  const lookup = (name: string) => out.get(name) ?? outer?.get(name);
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].replace(/^\s*export\s+/, '');
    if (!line.trim() || line.trim().startsWith('#')) continue;
    const at = /^\s*([^=\s]+)\s*=\s?/.exec(line);
    if (!at) {
      problems.push(
        `${file}:${i + 1}: "${line.trim().slice(0, 40)}" has no value, and drydock does not read the host's environment: write NAME=value`,
      );
      continue;
    }
    const name = at[1];
    if (!NAME.test(name)) {
      problems.push(`${file}:${i + 1}: "${name}" is not a variable's name`);
      continue;
    }
    let rest = line.slice(at[0].length).trimStart();
    const quote = rest[0] === '"' || rest[0] === "'" ? rest[0] : undefined;
    if (!quote) {
      const value = rest.replace(/\s+#.*$/, '').trim();
      out.set(name, substitute(value, lookup, `${file}:${i + 1}`, problems));
      continue;
    }
    // A quoted value ends at its closing quote, on this line or a later one.
    let body = rest.slice(1);
    const first = i + 1;
    while (!closes(body, quote) && i + 1 < lines.length) body += `\n${lines[++i]}`;
    const end = closingIndex(body, quote);
    if (end < 0) {
      problems.push(`${file}:${first}: ${name}'s value has no closing ${quote}`);
      continue;
    }
    rest = body.slice(0, end);
    out.set(
      name,
      quote === "'" ? rest : substitute(unescape(rest), lookup, `${file}:${first}`, problems, { escaped: true }),
    );
  }
  return out;
}

function closingIndex(body: string, quote: string): number {
  for (let i = 0; i < body.length; i++) {
    if (quote === '"' && body[i] === '\\') i++;
    else if (body[i] === quote) return i;
  }
  return -1;
}
const closes = (body: string, quote: string) => closingIndex(body, quote) >= 0;

function unescape(text: string): string {
  const map: Record<string, string> = { n: '\n', t: '\t', r: '\r', '"': '"', '\\': '\\' };
  // A `\$` stays escaped for substitute (which turns it into a `$`).
  return text.replace(/\\([ntr"\\])/g, (_, c: string) => map[c]);
}

export interface SubstituteOptions {
  /** A value of a `.env` in double quotes: `\$` is a `$`. */
  escaped?: boolean;
  /**
   * Given: a `${VAR}` or `$VAR` with no value is empty, as Compose makes it
   * (with a warning), and this is told; else it is a problem naming the field.
   */
  unset?: (name: string, field: string) => void;
}

/**
 * `text` with its variables substituted from `lookup` (Compose's rules; see
 * the module's header). `field` names where it is, for problems.
 */
export function substitute(
  text: string,
  lookup: (name: string) => string | undefined,
  field: string,
  problems: string[],
  opts: SubstituteOptions = {},
): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (opts.escaped && c === '\\' && text[i + 1] === '$') {
      out += '$';
      i += 2;
    } else if (c !== '$') {
      out += c;
      i++;
    } else if (text[i + 1] === '$') {
      out += '$';
      i += 2;
    } else if (text[i + 1] === '{') {
      const end = matchingBrace(text, i + 1);
      if (end < 0) {
        problems.push(`${field}: "${text.slice(i, i + 40)}" has no closing }`);
        return out;
      }
      out += expression(text.slice(i + 2, end), lookup, field, problems, opts);
      i = end + 1;
    } else {
      const bare = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i + 1));
      if (!bare) {
        out += '$';
        i++;
        continue;
      }
      out += valueOf(bare[0], lookup, field, problems, opts);
      i += 1 + bare[0].length;
    }
  }
  return out;
}

function matchingBrace(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return i;
  }
  return -1;
}

/** The inside of `${…}`. */
function expression(
  inner: string,
  lookup: (name: string) => string | undefined,
  field: string,
  problems: string[],
  opts: SubstituteOptions,
): string {
  const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?+])([\s\S]*))?$/.exec(inner);
  if (!m) {
    problems.push(`${field}: \${${inner}} is not a variable Compose substitutes`);
    return '';
  }
  const [, name, colon, op, arg = ''] = m;
  if (!op) return valueOf(name, lookup, field, problems, opts);
  const value = lookup(name);
  const set = colon ? value !== undefined && value !== '' : value !== undefined;
  const nested = () => substitute(arg, lookup, field, problems, { unset: opts.unset });
  if (op === '-') return set ? value! : nested();
  if (op === '+') return set ? nested() : '';
  if (!set) problems.push(`${field}: \${${name}} is required: ${nested() || 'it has no value'} (set it in .env)`);
  return value ?? '';
}

function valueOf(
  name: string,
  lookup: (name: string) => string | undefined,
  field: string,
  problems: string[],
  opts: SubstituteOptions,
) {
  const value = lookup(name);
  if (value !== undefined) return value;
  if (opts.unset) {
    opts.unset(name, field);
    return '';
  }
  problems.push(
    `${field}: \${${name}} has no value in the project's .env, and drydock does not read the host's environment: set it in .env, or write \${${name}:-value}`,
  );
  return '';
}
