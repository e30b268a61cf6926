/**
 * GitLab as a forge (forge/forge.ts), gitlab.com or self-managed, through
 * @gitbeaker/rest: merge requests for change requests, notes and award emoji,
 * commit statuses named `drydock`, a pipeline's failed jobs and their log
 * tails as context, and project membership (inherited from groups
 * included) for who may trigger. Writes look before they write, so a retry
 * adds nothing.
 */
import { GitbeakerRequestError } from '@gitbeaker/rest';
import { CONTEXT_LIMITS, cut, logTail, type ContextSection } from '../forge/context';
import type { ChangeRequestInfo, CommitState, Forge, ForgeFailure, ForgeRepo, Thread } from '../forge/forge';
import { marker } from '../forge/forge';
import type { TriggerOrigin } from '../workflows/input';
import {
  GitLabCredentialsError,
  gitlabClient,
  gitlabGitCredentials,
  originOf,
  type GitLabApi,
  type GitLabSettings,
} from './client';

/** GitLab's access levels (project or inherited from a group). */
export const ACCESS_LEVELS: Record<number, string> = {
  0: 'no access',
  5: 'Minimal Access',
  10: 'Guest',
  15: 'Planner',
  20: 'Reporter',
  30: 'Developer',
  40: 'Maintainer',
  50: 'Owner',
};
/** drydock's writer (who may start or steer a session): Developer and above, who may push to a branch. */
export const WRITER_LEVEL = 30;

/** The status context drydock keeps on a session's commit. */
const STATUS_NAME = 'drydock';

/** drydock's commit states as GitLab's (a status cannot be set again to the state it is in). */
const STATES: Record<CommitState, 'running' | 'success' | 'failed' | 'canceled'> = {
  pending: 'running',
  success: 'success',
  failure: 'failed',
  error: 'canceled',
};

export function gitlabForge(settings: GitLabSettings): Forge {
  const origin = originOf(settings);
  return {
    kind: 'gitlab',
    name: 'GitLab',
    capabilities: { annotations: false, reviews: false },
    owns: (url) => url.startsWith(`${origin}/`),
    gitCredentials: async (url) => gitlabGitCredentials(settings, url),
    repo: (path) => gitlabRepo(settings, path),
    failure: gitlabFailure,
  };
}

const status = (err: unknown) => (err as GitbeakerRequestError)?.cause?.response?.status;

/** Pages of the project, for comment links. */
function pageOf(settings: GitLabSettings, path: string, on: Thread, note?: number): string {
  const kind = on.changeRequest ? 'merge_requests' : 'issues';
  return `${settings.url.replace(/\/+$/, '')}/${path}/-/${kind}/${on.number}${note ? `#note_${note}` : ''}`;
}

interface Note {
  id: number;
  body: string;
  system?: boolean;
  created_at: string;
  author?: { username?: string };
}

function gitlabRepo(settings: GitLabSettings, path: string): ForgeRepo {
  let client: GitLabApi | undefined;
  const api = () => (client ??= gitlabClient(settings));
  const notesOf = (on: Thread) =>
    (on.changeRequest
      ? api().MergeRequestNotes.all(path, on.number, { perPage: 100, maxPages: 5, sort: 'asc' })
      : api().IssueNotes.all(path, on.number, { perPage: 100, maxPages: 5, sort: 'asc' })) as Promise<Note[]>;
  return {
    path,
    async upsertChangeRequest(spec) {
      const open = (await api().MergeRequests.all({ projectId: path, sourceBranch: spec.head, state: 'opened' })) as {
        iid: number;
        web_url: string;
      }[];
      if (open.length > 0) {
        const mr = open[0];
        await api().MergeRequests.edit(path, mr.iid, { title: spec.title, description: spec.body });
        return { number: mr.iid, url: mr.web_url, created: false };
      }
      const base = spec.base ?? ((await api().Projects.show(path)) as { default_branch: string }).default_branch;
      const mr = (await api().MergeRequests.create(
        path,
        spec.head,
        base,
        spec.draft ? `Draft: ${spec.title}` : spec.title,
        { description: spec.body },
      )) as { iid: number; web_url: string };
      return { number: mr.iid, url: mr.web_url, created: true };
    },
    async changeRequest(number): Promise<ChangeRequestInfo> {
      const mr = (await api().MergeRequests.show(path, number)) as {
        web_url: string;
        source_branch: string;
        source_project_id: number;
        target_project_id: number;
        state: string;
      };
      return {
        number,
        url: mr.web_url,
        headBranch: mr.source_branch,
        fromThisRepo: mr.source_project_id === mr.target_project_id,
        state: mr.state === 'merged' ? 'merged' : mr.state === 'opened' ? 'open' : 'closed',
      };
    },
    async branchHead(branch) {
      try {
        return ((await api().Branches.show(path, branch)) as { commit: { id: string } }).commit.id;
      } catch (err) {
        if (status(err) === 404) return undefined;
        throw err;
      }
    },
    async commentOnce(on, key, body) {
      const tag = marker(key);
      const found = (await notesOf(on)).find((n) => n.body?.includes(tag));
      if (found) return { url: pageOf(settings, path, on, found.id), created: false };
      const text = `${body}\n\n${tag}`;
      const note = (await (on.changeRequest
        ? api().MergeRequestNotes.create(path, on.number, text)
        : api().IssueNotes.create(path, on.number, text))) as { id: number };
      return { url: pageOf(settings, path, on, note.id), created: true };
    },
    async react(on, emoji) {
      const awards = on.changeRequest ? api().MergeRequestNoteAwardEmojis : api().IssueNoteAwardEmojis;
      const me = (await api().Users.showCurrentUser()) as { id: number };
      const given = (await awards.all(path, on.number, on.comment)) as { name: string; user: { id: number } }[];
      if (given.some((a) => a.name === emoji && a.user?.id === me.id)) return;
      await awards.award(path, on.number, on.comment, emoji);
    },
    async reportCommit(sha, report) {
      const state = STATES[report.state];
      const statuses = (await api().Commits.allStatuses(path, sha, { name: STATUS_NAME })) as {
        id: number;
        name: string;
        status: string;
      }[];
      const newest = statuses.filter((s) => s.name === STATUS_NAME).sort((a, b) => b.id - a.id)[0];
      // GitLab refuses to set a status to the state it is in; the newest one already says it.
      if (newest?.status === state) return;
      await api().Commits.editStatus(path, sha, state, {
        name: STATUS_NAME,
        targetUrl: report.link,
        description: report.description.slice(0, 140),
      });
    },
    async readContext(origin) {
      return readContext(api(), path, origin, notesOf);
    },
    async writerRefusal(user) {
      const [found] = (await api().Users.all({ username: user })) as { id: number }[];
      if (!found) return `${user} is not a user of this GitLab`;
      let level = 0;
      try {
        level = (
          (await api().ProjectMembers.show(path, found.id, { includeInherited: true })) as {
            access_level: number;
          }
        ).access_level;
      } catch (err) {
        if (status(err) !== 404) throw err;
      }
      if (level >= WRITER_LEVEL) return undefined;
      return `${user} has the ${ACCESS_LEVELS[level] ?? `level ${level}`} role on ${path}, not Developer or above`;
    },
  };
}

/** What GitLab holds about where a session came from: the issue and its notes, a merge request, a failed pipeline. */
async function readContext(
  api: GitLabApi,
  path: string,
  origin: TriggerOrigin,
  notesOf: (on: Thread) => Promise<Note[]>,
): Promise<ContextSection[]> {
  if (origin.kind === 'workflow_run') return failedPipeline(api, path, origin.run!);
  const on = { number: origin.issue!, changeRequest: origin.pullRequest };
  const sections: ContextSection[] = [];
  if (on.changeRequest) {
    const mr = (await api.MergeRequests.show(path, on.number)) as { title: string; description: string | null };
    const diffs = (await api.MergeRequests.allDiffs(path, on.number, { perPage: 100, maxPages: 1 })) as {
      new_path: string;
      new_file: boolean;
      deleted_file: boolean;
    }[];
    const files = diffs
      .slice(0, CONTEXT_LIMITS.files)
      .map((d) => `${d.new_file ? 'added' : d.deleted_file ? 'removed' : 'modified'} ${d.new_path}`);
    sections.push(
      { label: `merge request !${on.number}: title`, text: cut(mr.title, CONTEXT_LIMITS.title) },
      { label: `merge request !${on.number}: description`, text: cut(mr.description, CONTEXT_LIMITS.body) },
      { label: `merge request !${on.number}: changed files`, text: files.join('\n') || '(none)' },
    );
  } else {
    const issue = (await api.Issues.show(on.number, { projectId: path })) as {
      title: string;
      description: string | null;
    };
    sections.push(
      { label: `issue #${on.number}: title`, text: cut(issue.title, CONTEXT_LIMITS.title) },
      { label: `issue #${on.number}: description`, text: cut(issue.description, CONTEXT_LIMITS.body) },
    );
  }
  // drydock's own notes and GitLab's system notes ("added label") are not context.
  const notes = (await notesOf(on)).filter((n) => !n.system && !n.body?.includes('<!-- drydock:'));
  for (const n of notes.slice(-CONTEXT_LIMITS.comments)) {
    sections.push({
      label: `comment by ${n.author?.username ?? 'someone'} at ${n.created_at}`,
      text: cut(n.body, CONTEXT_LIMITS.comment),
    });
  }
  return sections;
}

/** GitLab's job logs carry ANSI colours and collapsible-section markers. */
export function plainJobLog(log: string): string {
  return log
    .replace(/section_(?:start|end):\d+:[^\r\n]*?\r?\x1b\[0K/g, '')
    .replace(/\x1b\[[0-9;]*[A-Za-z]/g, '')
    .replace(/\r\n?/g, '\n');
}

async function failedPipeline(api: GitLabApi, path: string, pipeline: number): Promise<ContextSection[]> {
  const jobs = (await api.Jobs.all(path, { pipelineId: pipeline, scope: ['failed'] as never })) as {
    id: number;
    name: string;
    stage: string;
    status: string;
  }[];
  const sections: ContextSection[] = [];
  for (const job of jobs.filter((j) => j.status === 'failed').slice(0, 3)) {
    sections.push({ label: `failed job ${job.id}`, text: `${job.name}: failed, in stage "${job.stage}"` });
    try {
      const log = (await api.Jobs.showLog(path, job.id)) as unknown as string;
      sections.push({ label: `end of the log of job ${job.id}`, text: logTail(plainJobLog(String(log))) });
    } catch (err) {
      if (status(err) !== 404) throw err; // a log GitLab has not kept is skipped
    }
  }
  return sections.length ? sections : [{ label: 'failed pipeline', text: `pipeline ${pipeline}: no failed job found` }];
}

/** GitLab's answers a retry cannot change: credentials (401/403), and other 4xx but 429. */
function gitlabFailure(err: unknown, { repo }: { repo: string }): ForgeFailure | undefined {
  if (err instanceof GitLabCredentialsError) return { kind: 'auth', message: err.message };
  const code = status(err);
  if (!code || code < 400 || code >= 500 || code === 429) return undefined;
  const what = `GitLab answered ${code} for ${repo}: ${(err as Error).message}`;
  if (code === 401 || code === 403) return { kind: 'auth', message: `${what} (check the worker's GitLab token)` };
  return { kind: 'request', message: what };
}
