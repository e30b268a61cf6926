/**
 * Webhook secrets per project (docs/forges.md): a registered repo may have its
 * own (`drydock repo add --webhook-secret <NAME>`, the value in serve's
 * DRYDOCK_SECRET_<NAME>). A delivery that names such a project is checked
 * against that project's secrets only, so neither the forge-wide secret nor
 * another project's can forge it; a project without its own falls back to the
 * forge-wide secrets. The project is read from the body before it is verified,
 * only to choose which secret must have signed it.
 */

/** The projects' own secrets, as serve knows them (the registry's names, the values of its environment). */
export interface ProjectSecrets {
  /**
   * The project's own secrets (values, current first); undefined when it has
   * none; `missing` names a secret the registry names but serve does not hold.
   */
  of(project: string): Promise<{ secrets: string[] } | { missing: string } | undefined>;
  /** Every project's own secrets: a token that is none of these nor the forge's is refused before the body is read. */
  all(): Promise<string[]>;
}

/** No project has its own secret: every delivery is checked against the forge's. */
export const NO_PROJECT_SECRETS: ProjectSecrets = { of: async () => undefined, all: async () => [] };

/** Characters of a project's name read from a delivery (GitLab allows 20 levels of groups). */
const PROJECT_NAME_LIMIT = 1_000;

/** The project a delivery names (`path`, e.g. ["repository", "full_name"]), from its unverified body. */
export function projectNamed(body: Buffer, path: readonly string[]): string | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  for (const key of path) {
    if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
    value = (value as Record<string, unknown>)[key];
  }
  return typeof value === 'string' && value.length <= PROJECT_NAME_LIMIT ? value : undefined;
}

export type SecretsChoice =
  { ok: true; secrets: string[]; project?: string } | { ok: false; status: 401 | 503; problem: string };

/**
 * Which secrets must have signed this delivery: the named project's own when it
 * has some (and only those), else the forge's. 503 when the project's secret is
 * not set on this server or the forge has none to fall back to.
 */
export async function secretsForDelivery(
  forge: string[],
  projects: ProjectSecrets,
  body: Buffer,
  path: readonly string[],
  variable: string,
): Promise<SecretsChoice> {
  const project = projectNamed(body, path);
  const own = project === undefined ? undefined : await projects.of(project);
  if (own && 'missing' in own) {
    return {
      ok: false,
      status: 503,
      problem: `${project}'s webhook secret is not set on this server (DRYDOCK_SECRET_${own.missing})`,
    };
  }
  if (own) return { ok: true, secrets: own.secrets, project };
  if (forge.length === 0) {
    return {
      ok: false,
      status: 401,
      problem: `no webhook secret for this project (it has none; ${variable} is unset)`,
    };
  }
  return { ok: true, secrets: forge };
}

/**
 * The projects' own secrets from the registry's names and serve's secrets
 * (DRYDOCK_SECRET_<NAME>). `list` is the registry's repos (name and secret names).
 */
export function projectSecretsOf(
  list: () => Promise<{ name: string; webhookSecrets?: string[] }[]>,
  values: Record<string, string>,
): ProjectSecrets {
  return {
    async of(project) {
      const repo = (await list()).find((r) => r.name.toLowerCase() === project.toLowerCase());
      const names = repo?.webhookSecrets ?? [];
      if (names.length === 0) return undefined;
      const missing = names.find((n) => !values[n]);
      return missing ? { missing } : { secrets: names.map((n) => values[n]!) };
    },
    async all() {
      return (await list()).flatMap((r) =>
        (r.webhookSecrets ?? []).map((n) => values[n]).filter((v): v is string => !!v),
      );
    },
  };
}

/** Why a signature was refused: naming the project when its own secret was the one required. */
export function signatureProblem(project: string | undefined): string {
  return project ? `signature does not match (${project} has its own webhook secret)` : 'signature does not match';
}
