/**
 * Who is calling `drydock serve`, and who a Slack, Linear or GitHub account
 * is: the identities file (people and their accounts), the machines' API
 * tokens, people's personal tokens, and OpenID Connect sign-in. One object,
 * built once per server.
 */
import type { Pool } from 'pg';
import type { Config } from '../platform/config';
import { loadDirectory, type Directory } from './directory';
import { checkHolders, Roles } from './roles';
import { loadMachineTokens, type MachineTokens } from './machine-tokens';
import type { Principal } from './names';
import { OidcSignIn } from './oidc';
import { PersonalTokens } from './personal-tokens';

/** How long a console sign-in lasts, and a CLI token that the console issues. */
export const CONSOLE_SESSION_MS = 12 * 3600_000;
export const CLI_TOKEN_MS = 30 * 24 * 3600_000;

export class Identities {
  constructor(
    readonly directory: Directory,
    readonly machines: MachineTokens,
    /** Without a database, only machine tokens work. */
    readonly personal?: PersonalTokens,
    /** Unset: the console signs in with tokens only. */
    readonly oidc?: OidcSignIn,
    /** The roles as serve applies them; default: the identities file's. */
    private readonly applied?: Roles,
  ) {}

  /** Who reads, requests and approves on which repo (the identities file's `roles`). */
  get roles(): Roles {
    return this.applied ?? this.directory.roles;
  }

  /** The caller a bearer token or console cookie names, if it is live. */
  async identify(token: string | undefined): Promise<Principal | undefined> {
    if (!token) return undefined;
    const machine = this.machines.identify(token);
    if (machine) return { name: machine, kind: 'machine' };
    const found = await this.personal?.identify(token);
    // Someone removed from the identities file is nobody any more, whatever tokens they hold.
    if (!found || (this.directory.configured && !this.directory.people.has(found.person))) return undefined;
    return { name: found.person, kind: 'person' };
  }
}

export function loadIdentities(
  config: Pick<
    Config,
    | 'DRYDOCK_API_TOKENS'
    | 'DRYDOCK_API_TOKENS_FILE'
    | 'DRYDOCK_IDENTITIES_FILE'
    | 'DRYDOCK_OIDC_ISSUER'
    | 'DRYDOCK_OIDC_CLIENT_ID'
    | 'DRYDOCK_OIDC_CLIENT_SECRET'
    | 'DRYDOCK_OIDC_CLAIM'
  > &
    Partial<Pick<Config, 'DRYDOCK_DEV_MODE'>>,
  consoleUrl: () => string,
  pool?: Pool,
): Identities {
  const oidc =
    config.DRYDOCK_OIDC_ISSUER && config.DRYDOCK_OIDC_CLIENT_ID && config.DRYDOCK_OIDC_CLIENT_SECRET
      ? new OidcSignIn({
          issuer: config.DRYDOCK_OIDC_ISSUER,
          clientId: config.DRYDOCK_OIDC_CLIENT_ID,
          clientSecret: config.DRYDOCK_OIDC_CLIENT_SECRET,
          claim: config.DRYDOCK_OIDC_CLAIM,
          redirectUri: () => `${consoleUrl()}/auth/callback`,
        })
      : undefined;
  const directory = loadDirectory(config.DRYDOCK_IDENTITIES_FILE);
  const machines = loadMachineTokens(config);
  // A role given to a machine without a token would never be used: say so at start.
  const unknown = checkHolders(directory.roles.section ?? {}, directory.people, machines.names);
  if (unknown.length) throw new Error(`DRYDOCK_IDENTITIES_FILE: ${unknown.join('; ')}`);
  // Without a roles section, machines decide only in development mode (one developer's scripts and tests).
  const applied = !directory.roles.configured && config.DRYDOCK_DEV_MODE ? new Roles(undefined, true) : undefined;
  return new Identities(directory, machines, pool ? new PersonalTokens(pool) : undefined, oidc, applied);
}
