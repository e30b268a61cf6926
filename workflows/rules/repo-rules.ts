/**
 * Precedence of a session's settings, narrowing only (docs/configuration.md):
 * the operator's limits for the repo (registry) bound everything; the repo's
 * file (.drydock/config.yaml) gives defaults within them; the session input
 * overrides those, within the same limits. Anything beyond is refused, naming
 * the field, the value and the limit. Pure: the caller hands in the address
 * classifier (sandbox/egress.ts) so this stays free of Node.
 */
import { parseSessionInput, type SessionInput } from '../input';
import { durationMs, sizeBytes } from '../units';
import { REPO_CONFIG_FILE, type RepoConfig, type RepoGrant, type RepoMaxima } from '../repo-config';
import type { AppSpec } from '../services';
import type { EgressRule } from './egress';

/** Why a host is an address only operator rules may name (loopback, private, link-local…), or undefined. */
export type RestrictedHost = (host: string) => string | undefined;

export type SettledInput = { ok: true; input: SessionInput } | { ok: false; problems: string[] };

/**
 * The session input with the repo file's defaults, checked against the
 * operator's limits; a browser check without a start command of its own
 * starts the repo's `app`.
 */
export function settleSessionInput(args: {
  grant: RepoGrant;
  file?: RepoConfig;
  raw: unknown;
  restricted: RestrictedHost;
  app?: AppSpec;
}): SettledInput {
  const { grant, file, raw, restricted } = args;
  const problems = file ? fileBeyondLimits(grant, file, restricted).map((p) => `${REPO_CONFIG_FILE}: ${p}`) : [];
  const parsed = parseSessionInput(withRepoDefaults(raw, file));
  if (!parsed.ok) return { ok: false, problems: [...problems, ...parsed.problems] };
  const input = parsed.input;
  const given = (...path: string[]) => valueAt(raw, path) !== undefined;
  problems.push(...settleBrowser(input, args.app));
  if (given('agent', 'egress')) problems.push(...egressBeyond(grant, input.agent.egress, 'agent.egress', restricted));
  if (given('agent', 'secrets')) problems.push(...secretsBeyond(grant, input.agent.secrets, 'agent.secrets'));
  for (const key of Object.keys(grant.limits.maxima) as (keyof RepoMaxima)[]) {
    const limits = input.limits as Record<string, unknown>;
    const max = grant.limits.maxima[key];
    if (max === undefined || limits[key] === undefined || !beyond(key, limits[key], max)) continue;
    if (given('limits', key)) problems.push(`limits.${key}: ${overMax(grant, key, limits[key], max)}`);
    else if (file?.limits?.[key as keyof RepoConfig['limits']] === undefined) limits[key] = max; // a default: lowered to the maximum
  }
  return problems.length ? { ok: false, problems } : { ok: true, input };
}

const NO_APP =
  "verify.browser.start: give the command that starts the app, or declare the app (app: in .drydock/config.yaml, or a dev container's postStartCommand with forwardPorts)";

/**
 * The browser check's app, session first: its own start command (and URL),
 * else the repo's app: its start command, its port and ready path as the
 * URL, its ready timeout (unless the check gives one).
 */
function settleBrowser(input: SessionInput, app: AppSpec | undefined): string[] {
  const browser = input.verify.browser;
  if (!browser) return [];
  if (browser.start === undefined) {
    if (!app) return [NO_APP];
    browser.start = app.start;
    browser.url ??= `http://localhost:${app.port}${app.readyPath}`;
    browser.readyTimeout ??= app.readyTimeoutMs;
  }
  if (browser.url === undefined) return ['verify.browser.url: give where the app answers, http://localhost:<port>/'];
  browser.readyTimeout ??= '60s';
  return [];
}

/** What the repo file asks beyond the operator's limits. */
function fileBeyondLimits(grant: RepoGrant, file: RepoConfig, restricted: RestrictedHost): string[] {
  const problems = [
    ...egressBeyond(grant, file.egress ?? [], 'egress', restricted),
    ...secretsBeyond(grant, file.agent?.secrets ?? [], 'agent.secrets'),
  ];
  for (const [key, value] of Object.entries(file.limits ?? {})) {
    const max = grant.limits.maxima[key as keyof RepoMaxima];
    if (value !== undefined && max !== undefined && beyond(key, value, max)) {
      problems.push(`limits.${key}: ${overMax(grant, key, value, max)}`);
    }
  }
  return problems;
}

/** Rules that name a restricted address no operator rule names, or reach beyond the operator's rules. */
export function egressBeyond(
  grant: RepoGrant,
  rules: EgressRule[],
  field: string,
  restricted: RestrictedHost,
): string[] {
  const operator = grant.limits.egress;
  return rules.flatMap((rule, i) => {
    const host = normalizeHost(rule.host);
    const why = restricted(host);
    const named = operator !== 'any-public' && operator.some((o) => normalizeHost(o.host) === host);
    if (why && !named) {
      return [
        `${field}.${i}.host: ${rule.host} is a ${why} address; only the operator's rules for ${grant.name} may name it`,
      ];
    }
    if (operator === 'any-public' || operator.some((o) => ruleWithin(rule, o))) return [];
    const allowed = operator.map(describeRule).join(', ') || 'none';
    return [
      `${field}.${i}: ${describeRule(rule)} is beyond the operator's egress rules for ${grant.name} (${allowed})`,
    ];
  });
}

function secretsBeyond(grant: RepoGrant, names: string[], field: string): string[] {
  const grantable = grant.limits.secrets;
  if (grantable === 'any') return [];
  return names
    .filter((n) => !grantable.includes(n))
    .map(
      (n) =>
        `${field}: ${n} is not a secret the operator grants to ${grant.name} (grantable: ${grantable.join(', ') || 'none'})`,
    );
}

/** Whether `rule` allows nothing that `outer` does not: same host or under its wildcard, its ports, its methods. */
export function ruleWithin(rule: EgressRule, outer: EgressRule): boolean {
  const host = normalizeHost(rule.host);
  const pattern = normalizeHost(outer.host);
  const hostOk =
    host === pattern || (pattern.startsWith('*.') && host.endsWith(pattern.slice(1)) && host.length >= pattern.length);
  const portOk =
    outer.port === undefined
      ? rule.port === undefined || rule.port === 80 || rule.port === 443
      : rule.port === outer.port;
  const methodsOk = !outer.methods || (rule.methods?.every((m) => outer.methods!.includes(m)) ?? false);
  return hostOk && portOk && methodsOk;
}

function normalizeHost(host: string): string {
  return host
    .toLowerCase()
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '');
}

function describeRule(rule: EgressRule): string {
  const host = rule.host.includes(':') && !rule.host.startsWith('[') ? `[${rule.host}]` : rule.host;
  return `${host}${rule.port ? `:${rule.port}` : ''}${rule.methods ? ` (${rule.methods.join(', ')})` : ''}`;
}

/** Whether a limit's value exceeds its maximum, each in its own unit (count, bytes, ms). */
function beyond(key: string, value: unknown, max: unknown): boolean {
  const measure = (v: unknown): number =>
    key === 'wallTime'
      ? durationMs(v as number | string)
      : key === 'cpus' || key === 'pids'
        ? Number(v)
        : sizeBytes(v as number | string);
  return measure(value) > measure(max);
}

function overMax(grant: RepoGrant, key: string, value: unknown, max: unknown): string {
  return `${String(value)} is more than the operator's maximum ${key} for ${grant.name} (${String(max)})`;
}

/**
 * The raw input with the repo file's values where the session gave none.
 * Agent defaults apply to sessions of the same agent kind: a file's CLI
 * command means nothing to a scripted session.
 */
function withRepoDefaults(raw: unknown, file: RepoConfig | undefined): unknown {
  if (!file || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  const r = raw as Record<string, Record<string, unknown> | undefined>;
  const agentRaw = r.agent ?? {};
  const kind = agentRaw.kind ?? file.agent?.kind ?? 'script';
  const { kind: fileKind, command, version, model, baseUrl, secrets } = file.agent ?? {};
  const sameKind = (fileKind ?? kind) === kind;
  const agentDefaults = {
    ...(fileKind && sameKind ? { kind: fileKind } : {}),
    ...(sameKind && kind === 'cli' ? { command, version, model, secrets, egress: file.egress } : {}),
    ...(sameKind && kind === 'openai' ? { model, baseUrl } : {}),
  };
  const defined = (o: object | undefined) =>
    Object.fromEntries(Object.entries(o ?? {}).filter(([, v]) => v !== undefined));
  // The repo's plan default: for a model or CLI agent (a script's plan needs its planSteps), never for parallel attempts or a child.
  const plansByDefault =
    file.plan !== undefined && kind !== 'script' && r.attempts === undefined && !r.attemptOf && !r.childOf;
  return {
    ...r,
    ...(plansByDefault && r.plan === undefined ? { plan: file.plan } : {}),
    agent: { ...defined(agentDefaults), ...agentRaw },
    verify: { ...defined(file.verify), ...r.verify },
    limits: { ...defined(file.limits), ...r.limits },
  };
}

function valueAt(o: unknown, path: string[]): unknown {
  return path.reduce<unknown>(
    (v, k) => (v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined),
    o,
  );
}
