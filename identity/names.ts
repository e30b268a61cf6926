/**
 * The names drydock records for whoever acts: approvals, requests, follow-ups
 * and the audit trail. A person is a bare name from the identities file
 * (`alice`); everything else carries its namespace, so a machine token or an
 * unmapped GitHub login can never pass for a person: `machine:ci`,
 * `github:octocat`. Pure functions, shared by serve and the CLI.
 */

/** A person's name: what the identities file lists, and approver lists name. No ':' (that is a namespace). */
export const PERSON_NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$/;

/** Accounts on other services that map to a person. */
export const ACCOUNT_KINDS = ['oidc', 'github', 'gitlab', 'gitea', 'slack', 'linear'] as const;
export type AccountKind = (typeof ACCOUNT_KINDS)[number];

/** A machine's API token: its own namespace. */
export const machineName = (name: string) => `machine:${name}`;

/** A GitHub login that no person claims: recorded as itself, in GitHub's namespace. */
export const githubName = (login: string) => `github:${login}`;

export const isPersonName = (name: string) => PERSON_NAME.test(name);

/** Who is calling: a person (signed in, or with a personal token) or a machine (an API token). */
export interface Principal {
  /** What approvals, requests and the audit trail record. */
  name: string;
  kind: 'person' | 'machine';
}
