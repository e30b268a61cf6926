/**
 * Gitea (and Forgejo, which keeps its API) as a forge (forge/forge.ts): the
 * seam's verbs over Gitea's REST API (/api/v1) through gitea-js, with one
 * access token of the account drydock acts as. Gitea has no App-style tokens
 * minted per repository, so every purpose uses that token: give its account
 * write access to the repositories drydock serves and nothing more.
 * Writes are idempotent: a change request is found again by its branch, a
 * comment by its hidden marker, a status posted only when it changes.
 */
import { giteaApi, type Api } from 'gitea-js';
import { CONTEXT_LIMITS, cut, type ContextSection } from '../forge/context';
import {
  marker,
  type ChangeRequestInfo,
  type CommitReport,
  type Forge,
  type ForgeFailure,
  type ForgePurpose,
  type ForgeRepo,
  type GitEnv,
} from '../forge/forge';
import type { TriggerOrigin } from '../workflows/input';

export interface GiteaSettings {
  /** The server's web origin, e.g. https://git.example.com (its API is at /api/v1). */
  url: string;
  /** An access token of drydock's account (scopes write:repository, write:issue, read:user). */
  token: string;
}

/** The parts of gitea-js drydock calls. */
type GiteaClient = { repos: Api<unknown>['repos'] };

/** The context of drydock's commit statuses. */
export const STATUS_CONTEXT = 'drydock';
/** Gitea's draft: a title with its work-in-progress prefix (WORK_IN_PROGRESS_PREFIXES, default "WIP:"). */
const WIP = 'WIP: ';

/** Gitea's answer to a call that failed: its status, and its message (gitea-js throws the bare response). */
export class GiteaApiError extends Error {
  name = 'GiteaApiError';
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function toError(err: unknown): never {
  const res = err as { status?: unknown; statusText?: string; error?: { message?: string } | null };
  if (typeof res?.status !== 'number') throw err;
  const detail = typeof res.error?.message === 'string' ? res.error.message.slice(0, 300) : res.statusText;
  throw new GiteaApiError(res.status, `Gitea answered ${res.status}${detail ? `: ${detail}` : ''}`);
}

/** The client's calls of one group (repos), each failing with a GiteaApiError rather than a Response. */
function withErrors<T extends object>(group: T): T {
  return new Proxy(group, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => (value.apply(target, args) as Promise<unknown>).catch(toError);
    },
  });
}

export function giteaForge(settings: GiteaSettings): Forge {
  const origin = new URL(settings.url).origin;
  const client = giteaApi(origin, {
    token: settings.token,
    customFetch: (...a: Parameters<typeof fetch>) => fetch(...a),
  });
  const api = { repos: withErrors(client.repos) };
  return {
    kind: 'gitea',
    name: 'Gitea',
    capabilities: { annotations: false, reviews: false },
    owns: (url) => url.startsWith(`${origin}/`),
    async gitCredentials(url): Promise<GitEnv> {
      if (!url.startsWith(`${origin}/`)) return {};
      // Gitea takes an access token as the password of HTTP basic auth (the user name is not read).
      return {
        GIT_CONFIG_COUNT: '1',
        GIT_CONFIG_KEY_0: `http.${origin}/.extraHeader`,
        GIT_CONFIG_VALUE_0: `Authorization: Basic ${Buffer.from(`drydock:${settings.token}`).toString('base64')}`,
      };
    },
    repo: (path) => giteaRepo(api, path),
    failure: (err, context) => giteaFailure(err, context),
  };
}

function ownerAndName(path: string): [string, string] {
  const [owner, name] = path.split('/');
  return [owner, name];
}

const notFound = (err: unknown) => (err as { status?: number })?.status === 404;

function giteaRepo(api: GiteaClient, path: string): ForgeRepo {
  const [owner, name] = ownerAndName(path);
  const r = api.repos;
  return {
    path,
    async upsertChangeRequest(spec) {
      const base = spec.base ?? (await r.repoGet(owner, name)).data.default_branch!;
      const title = spec.draft ? `${WIP}${spec.title}` : spec.title;
      const open = await r
        .repoGetPullRequestByBaseHead(owner, name, base, spec.head)
        .then((res) => (res.data.state === 'open' ? res.data : undefined))
        .catch((err) => {
          if (notFound(err)) return undefined;
          throw err;
        });
      if (open) {
        const { data } = await r.repoEditPullRequest(owner, name, open.number!, { title, body: spec.body });
        return { number: data.number!, url: data.html_url!, created: false };
      }
      const { data } = await r.repoCreatePullRequest(owner, name, { head: spec.head, base, title, body: spec.body });
      return { number: data.number!, url: data.html_url!, created: true };
    },
    async changeRequest(number): Promise<ChangeRequestInfo> {
      const { data: pr } = await r.repoGetPullRequest(owner, name, number);
      const headRepo = pr.head?.repo?.full_name;
      return {
        number,
        url: pr.html_url!,
        headBranch: pr.head!.ref!,
        fromThisRepo: headRepo === path,
        headRepo,
        state: pr.merged ? 'merged' : pr.state === 'closed' ? 'closed' : 'open',
      };
    },
    async branchHead(branch) {
      try {
        return (await r.repoGetBranch(owner, name, branch)).data.commit?.id;
      } catch (err) {
        if (notFound(err)) return undefined;
        throw err;
      }
    },
    // Issues and pull requests share Gitea's numbers and its comments API.
    async commentOnce(on, key, body) {
      const { data: comments } = await r.issueGetComments(owner, name, on.number);
      const found = comments.find((c) => c.body?.includes(marker(key)));
      if (found) return { url: found.html_url!, created: false };
      const { data } = await r.issueCreateComment(owner, name, on.number, { body: `${body}\n\n${marker(key)}` });
      return { url: data.html_url!, created: true };
    },
    async react(on, emoji) {
      // Gitea answers 200 for a reaction that is there already, 201 for a new one.
      await r.issuePostCommentReaction(owner, name, on.comment, { content: emoji });
    },
    async reportCommit(sha, report) {
      await statusOnce(api, owner, name, sha, report);
    },
    readContext: (origin) => readContext(api, origin),
    async writerRefusal(user) {
      try {
        const { data } = await r.repoGetRepoPermissions(owner, name, user);
        if (data.permission === 'write' || data.permission === 'admin' || data.permission === 'owner') return undefined;
        return `${user} may not write to ${path} (Gitea says '${data.permission ?? 'none'}'); drydock takes requests from writers`;
      } catch (err) {
        if (notFound(err)) return `${user} is not a user of this Gitea with access to ${path}`;
        if ((err as GiteaApiError).status === 403) {
          // Gitea shows another user's permission to site and repository administrators only.
          throw new GiteaApiError(
            403,
            `Gitea answered 403 to reading ${user}'s permission on ${path}: drydock's account needs the Administrator permission on the repository`,
          );
        }
        throw err;
      }
    },
  };
}

/** A commit status in context "drydock", unless the newest one there says the same. */
async function statusOnce(api: GiteaClient, owner: string, name: string, sha: string, report: CommitReport) {
  const description = report.description.slice(0, 140);
  const { data: statuses } = await api.repos.repoListStatuses(owner, name, sha, { sort: 'recentupdate', limit: 50 });
  const newest = statuses.find((s) => s.context === STATUS_CONTEXT);
  if (newest && newest.status === report.state && newest.description === description) return;
  await api.repos.repoCreateStatus(owner, name, sha, {
    state: report.state,
    context: STATUS_CONTEXT,
    description,
    target_url: report.link,
  });
}

/** What Gitea holds about where a session came from: the issue or pull request, and its latest comments. */
async function readContext(api: GiteaClient, origin: TriggerOrigin): Promise<ContextSection[]> {
  const [owner, name] = ownerAndName(origin.repo);
  const number = origin.issue;
  if (!number) return [];
  const what = origin.pullRequest ? 'pull request' : 'issue';
  const { data: issue } = await api.repos.issueGetIssue(owner, name, number);
  const { data: comments } = await api.repos.issueGetComments(owner, name, number);
  // drydock's own comments (acknowledgements, links) are not context.
  const latest = comments.filter((c) => !c.body?.includes('<!-- drydock:')).slice(-CONTEXT_LIMITS.comments);
  const sections: ContextSection[] = [
    { label: `${what} #${number}: title`, text: cut(issue.title, CONTEXT_LIMITS.title) },
    { label: `${what} #${number}: description`, text: cut(issue.body, CONTEXT_LIMITS.body) },
  ];
  if (origin.pullRequest) {
    const { data: files } = await api.repos.repoGetPullRequestFiles(owner, name, number, {
      limit: CONTEXT_LIMITS.files,
    });
    const summary = files.map((f) => `${f.status} ${f.filename} (+${f.additions} -${f.deletions})`);
    sections.push({ label: `${what} #${number}: changed files`, text: summary.join('\n') || '(none)' });
  }
  for (const c of latest) {
    sections.push({
      label: `comment by ${c.user?.login ?? 'someone'} at ${c.created_at}`,
      text: cut(c.body, CONTEXT_LIMITS.comment),
    });
  }
  return sections;
}

/**
 * Gitea's answers that a retry cannot change (GiteaApiError, with its
 * status). Publishing: 401/403 (the token), 404/409/422 (the request);
 * progress and context: any 4xx but 429. 5xx and network errors are retried.
 */
function giteaFailure(
  err: unknown,
  { purpose, repo }: { purpose: ForgePurpose; repo: string },
): ForgeFailure | undefined {
  if (!(err instanceof GiteaApiError)) return undefined;
  const e = err;
  if (e.status < 400 || e.status >= 500 || e.status === 429) return undefined;
  const what = `${e.message} (${repo})`;
  if (e.status === 401 || e.status === 403) return { kind: 'auth', message: `${what} (check drydock's Gitea token)` };
  if (purpose !== 'publish' || [404, 409, 422].includes(e.status)) return { kind: 'request', message: what };
  return undefined;
}
