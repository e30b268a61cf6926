/**
 * The identities file (DRYDOCK_IDENTITIES_FILE): one entry per person, and the
 * accounts on other services that are theirs. Serve maps a Slack user, a
 * Linear user, a GitHub login or an OpenID Connect sign-in to that one name,
 * which approvals, requests and the audit trail record. Per-repo roles hang
 * off the same names (identity/roles.ts).
 *
 * ```yaml
 * people:
 *   alice:
 *     oidc: alice@example.com     # the sign-in's DRYDOCK_OIDC_CLAIM (default: email)
 *     github: alice-gh
 *     slack: U024BE7LH            # Slack member id
 *     linear: 2f8a6b1e-…          # Linear user id
 * roles:                          # optional: who reads, requests and approves per repo
 *   acme/shop: {approver: [alice], reader: [machine:grafana]}
 * ```
 */
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { z } from 'zod';
import { ACCOUNT_KINDS, githubName, PERSON_NAME, type AccountKind } from './names';
import { checkHolders, Roles, rolesSection } from './roles';

const accounts = z.union([z.string().min(1).max(200), z.array(z.string().min(1).max(200)).min(1).max(20)]);

const person = z.strictObject(
  Object.fromEntries(ACCOUNT_KINDS.map((k) => [k, accounts.optional()])) as Record<
    AccountKind,
    z.ZodOptional<typeof accounts>
  >,
);

const fileSchema = z.strictObject({
  people: z.record(z.string(), person).superRefine((people, ctx) => {
    for (const name of Object.keys(people)) {
      if (!PERSON_NAME.test(name)) {
        ctx.addIssue({
          code: 'custom',
          path: [name],
          message: 'a person: letters, digits, ".", "_", "@" and "-" (no ":")',
        });
      }
    }
  }),
  roles: rolesSection.optional(),
});

/** GitHub logins and e-mail addresses are case-insensitive; Slack and Linear ids are compared as given. */
const normal = (kind: AccountKind, account: string) =>
  kind === 'slack' || kind === 'linear' ? account : account.toLowerCase();

export class Directory {
  private readonly byAccount = new Map<string, string>();

  constructor(
    readonly people: ReadonlySet<string>,
    entries: [AccountKind, string, string][] = [],
    /** Who holds which role on which repo (no `roles` section: nobody is checked). */
    readonly roles = new Roles(),
  ) {
    for (const [kind, account, person] of entries) {
      const key = `${kind}:${normal(kind, account)}`;
      const other = this.byAccount.get(key);
      if (other && other !== person) throw new Error(`${kind} account ${account} is both ${other}'s and ${person}'s`);
      this.byAccount.set(key, person);
    }
  }

  /** The person an account belongs to, if the file names one. */
  personOf(kind: AccountKind, account: string): string | undefined {
    return this.byAccount.get(`${kind}:${normal(kind, account)}`);
  }

  /** Who a GitHub login acts as: its person, else the login in GitHub's namespace. */
  githubActor(login: string): string {
    return this.personOf('github', login) ?? githubName(login);
  }

  /** Who a forge's login acts as: its person, else the login in the forge's namespace (`gitlab:alice`). */
  forgeActor(forge: 'github' | 'gitlab' | 'gitea', login: string): string {
    return this.personOf(forge, login) ?? `${forge}:${login}`;
  }

  /** Whether the file lists people at all (without one, any name a personal token carries is a person). */
  get configured(): boolean {
    return this.people.size > 0;
  }
}

/** Parses the file's text; a mistake names the entry. */
export function parseDirectory(text: string, source = 'DRYDOCK_IDENTITIES_FILE'): Directory {
  const parsed = fileSchema.safeParse(parse(text) ?? { people: {} });
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`${source}: ${problems.join('; ')}`);
  }
  const entries: [AccountKind, string, string][] = [];
  for (const [person, linked] of Object.entries(parsed.data.people)) {
    for (const kind of ACCOUNT_KINDS) {
      for (const account of [linked[kind] ?? []].flat()) entries.push([kind, account, person]);
    }
  }
  const people = new Set(Object.keys(parsed.data.people));
  const roles = parsed.data.roles;
  const unknown = roles ? checkHolders(roles, people) : [];
  if (unknown.length) throw new Error(`${source}: ${unknown.join('; ')}`);
  try {
    return new Directory(people, entries, new Roles(roles));
  } catch (err) {
    throw new Error(`${source}: ${(err as Error).message}`);
  }
}

/** The configured file, or an empty directory (nobody is mapped: GitHub logins stay github:<login>). */
export function loadDirectory(file: string | undefined): Directory {
  return file ? parseDirectory(readFileSync(file, 'utf8')) : new Directory(new Set());
}
