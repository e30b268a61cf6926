/**
 * Per-repo roles: the `roles` section of the identities file says who may
 * read a repo's sessions (`reader`), start them (`requester`) and approve,
 * reject or steer them (`approver`); each role includes the ones below it.
 * People are named as the file names them (`alice`), machines as
 * `machine:<name>`. Without the section people are not checked (a one-team
 * setup: every person may do everything), and machines (API tokens, handed to
 * CI and scripts) read and start sessions but do not approve, reject or steer
 * them unless a section grants it; development mode lets them
 * (`machinesDecide`, set by identity/identities.ts). Pure rules, shared by
 * every path of `drydock serve` (workers/access.ts applies them).
 *
 * ```yaml
 * roles:
 *   acme/shop:
 *     approver: [alice, bob]
 *     requester: [carol, machine:ci]
 *     reader: dave
 *   acme/*:                    # every registered repo of acme
 *     reader: [erin]
 *   "*":                       # every repo (quoted: a bare * is YAML syntax)
 *     reader: auditor
 *   acme/docs:
 *     approver: [alice]
 *     forbidSelfApproval: false  # default true: a requester may not approve their own session
 * ```
 */
import { z } from 'zod';
import { isPersonName } from './names';

export const ROLES = ['reader', 'requester', 'approver'] as const;
export type Role = (typeof ROLES)[number];

/** `owner/name`, `owner/*` or `*` (every repo, registered or not). */
export const REPO_PATTERN = /^(\*|[A-Za-z0-9_.-]+\/(\*|[A-Za-z0-9_.-]+))$/;

/** At most this many patterns, and names per role: the file is read into memory whole. */
const MAX_ENTRIES = 1_000;

const holders = z.union([z.string().min(1).max(200), z.array(z.string().min(1).max(200)).max(MAX_ENTRIES)]);

const entry = z.record(z.string(), z.unknown()).transform((raw, ctx) => {
  const out: Partial<Record<Role, string[]>> & { forbidSelfApproval?: boolean } = {};
  for (const [key, value] of Object.entries(raw)) {
    if (key === 'forbidSelfApproval') {
      if (typeof value === 'boolean') out.forbidSelfApproval = value;
      else ctx.addIssue({ code: 'custom', path: [key], message: 'true or false' });
    } else if ((ROLES as readonly string[]).includes(key)) {
      const parsed = holders.safeParse(value ?? []);
      if (parsed.success) out[key as Role] = [parsed.data].flat();
      else ctx.addIssue({ code: 'custom', path: [key], message: 'a name or a list of names' });
    } else {
      ctx.addIssue({
        code: 'custom',
        path: [key],
        message: `not a role: the roles are ${ROLES.join(', ')} (and the switch forbidSelfApproval)`,
      });
    }
  }
  return out;
});

/** The `roles` section as the file holds it; names are checked against `people` by checkHolders. */
export const rolesSection = z
  .record(z.string(), entry)
  .superRefine((roles, ctx) => {
    const patterns = Object.keys(roles);
    if (patterns.length > MAX_ENTRIES) ctx.addIssue({ code: 'custom', message: `at most ${MAX_ENTRIES} patterns` });
    for (const pattern of patterns) {
      if (!REPO_PATTERN.test(pattern)) {
        ctx.addIssue({ code: 'custom', path: [pattern], message: 'a repo pattern is owner/name, owner/* or "*"' });
      }
    }
  })
  .nullable()
  .transform((roles) => roles ?? {});

export type RolesSection = z.output<typeof rolesSection>;

/**
 * Problems with the names the section gives roles to: a person must be in
 * `people`; anything else must be a machine (`machine:<name>`), known when
 * `machines` is given. Each names its field.
 */
export function checkHolders(section: RolesSection, people: ReadonlySet<string>, machines?: ReadonlySet<string>) {
  const problems: string[] = [];
  for (const [pattern, grant] of Object.entries(section)) {
    for (const role of ROLES) {
      for (const name of grant[role] ?? []) {
        const field = `roles.${pattern}.${role}`;
        if (name.startsWith('machine:')) {
          if (machines && !machines.has(name)) {
            problems.push(`${field}: ${name} has no API token (DRYDOCK_API_TOKENS or DRYDOCK_API_TOKENS_FILE)`);
          }
        } else if (!isPersonName(name)) {
          problems.push(`${field}: ${name} is neither a person of people nor machine:<name>`);
        } else if (!people.has(name)) {
          problems.push(`${field}: ${name} is not in people`);
        }
      }
    }
  }
  return problems;
}

/** Whether `pattern` covers the repo named `repo` (undefined: a repo the registry does not name; only `*` covers it). */
export function covers(pattern: string, repo: string | undefined): boolean {
  if (pattern === '*') return true;
  if (repo === undefined) return false;
  const p = pattern.toLowerCase();
  const r = repo.toLowerCase();
  return p.endsWith('/*') ? r.startsWith(p.slice(0, -1)) && !r.slice(p.length - 1).includes('/') : p === r;
}

/** How specific a pattern is: a name beats owner/*, which beats *. */
const specificity = (pattern: string) => (pattern === '*' ? 0 : pattern.endsWith('/*') ? 1 : 2);

/** What a person or machine wants to do, for the refusal's words. */
const DOING: Record<Role, string> = {
  reader: 'read sessions of',
  requester: 'start sessions of',
  approver: 'approve, reject or steer sessions of',
};

export class Roles {
  constructor(
    /** undefined: the file has no `roles` section: people are not checked, machines are requesters. */
    readonly section?: RolesSection,
    /** Without a section, machines hold every role too (development mode: one developer's scripts). */
    private readonly machinesDecide = false,
  ) {}

  get configured(): boolean {
    return this.section !== undefined;
  }

  /** The highest role `who` holds on `repo` over every pattern that covers it; undefined: none. */
  roleOf(who: string, repo: string | undefined): Role | undefined {
    let best = -1;
    for (const [pattern, grant] of Object.entries(this.section ?? {})) {
      if (!covers(pattern, repo)) continue;
      ROLES.forEach((role, rank) => {
        if (rank > best && grant[role]?.includes(who)) best = rank;
      });
    }
    return best < 0 ? undefined : ROLES[best];
  }

  /** Whether `who` holds `role` (or a higher one) on `repo`; without a `roles` section, see unchecked. */
  holds(who: string, repo: string | undefined, role: Role): boolean {
    if (!this.configured) return this.unchecked(who, role);
    const held = this.roleOf(who, repo);
    return held !== undefined && ROLES.indexOf(held) >= ROLES.indexOf(role);
  }

  /** Without a `roles` section: a person holds every role, a machine (an API token) at most requester. */
  private unchecked(who: string, role: Role): boolean {
    return role !== 'approver' || this.machinesDecide || !who.startsWith('machine:');
  }

  /** Why `who` may not act as `role` on `repo` (named by `shown`), or undefined when they may. */
  refusal(who: string, repo: string | undefined, role: Role, shown = repo ?? 'this repo'): string | undefined {
    if (this.holds(who, repo, role)) return undefined;
    if (!this.configured) {
      return `${who} may not ${DOING[role]} ${shown}: a machine's token does not decide without a roles section; give ${who} the ${role} role in the identities file's roles`;
    }
    const held = this.roleOf(who, repo);
    return `${who} may not ${DOING[role]} ${shown}: that needs the ${role} role (${held ? `${who} is a ${held}` : `${who} has no role there`})`;
  }

  /** Whether `who` reads every repo, registered or not (the figures, reports and pilots span them all): a role on `*`. */
  readsEverything(who: string): boolean {
    return this.holds(who, undefined, 'reader');
  }

  /**
   * Whether a session's requester may not approve it: with roles, forbidden
   * unless the most specific pattern covering the repo that sets
   * `forbidSelfApproval` sets it false; without roles, allowed (the approval
   * policy's own forbidSelfApproval still applies in the workflow).
   */
  forbidsSelfApproval(repo: string | undefined): boolean {
    if (!this.configured) return false;
    const set = Object.entries(this.section!)
      .filter(([p, g]) => covers(p, repo) && g.forbidSelfApproval !== undefined)
      .sort(([a], [b]) => specificity(b) - specificity(a));
    return set[0]?.[1].forbidSelfApproval ?? true;
  }
}

/** A session as the rules see it: its repo's registered name (undefined: unregistered), how to name it, its requester. */
export interface SessionRef {
  repo: string | undefined;
  shown?: string;
  requestedBy?: string;
  /** The requester could not be read (no worker answered for the session): a self-approval cannot be ruled out. */
  requesterUnknown?: boolean;
}

/** The refusal when a self-approval cannot be ruled out: not a lack of rights, so the caller may try again. */
export const REQUESTER_UNKNOWN =
  "this session's requester cannot be read now (no worker answered for it), and self-approval is forbidden here: try again in a moment";

/**
 * Why `who` may not decide on this session, or undefined: the approver role
 * on its repo, and for an approval (a pick is one) not their own request
 * unless the repo allows that.
 */
export function decisionRefusal(
  roles: Roles,
  who: string,
  session: SessionRef,
  decision: 'approve' | 'reject',
): string | undefined {
  const refused = roles.refusal(who, session.repo, 'approver', session.shown);
  if (refused) return refused;
  if (decision !== 'approve' || !roles.forbidsSelfApproval(session.repo)) return undefined;
  if (session.requesterUnknown) return REQUESTER_UNKNOWN;
  if (session.requestedBy === who) {
    return `${who} requested this session and may not approve it: self-approval is forbidden on ${session.shown ?? session.repo ?? 'this repo'} (the roles' forbidSelfApproval)`;
  }
  return undefined;
}

/**
 * Why `who` may not send a follow-up or attach: an approver of the repo may,
 * and so may the session's own requester while they hold the requester role
 * (steering their own request is not approving it).
 */
export function steeringRefusal(roles: Roles, who: string, session: SessionRef): string | undefined {
  if (session.requestedBy === who && roles.holds(who, session.repo, 'requester')) return undefined;
  return roles.refusal(who, session.repo, 'approver', session.shown);
}
