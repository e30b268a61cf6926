/**
 * A local HTTP server speaking the subset of GitLab's REST API (v4) drydock
 * uses, as GitLab answers it: the current user and user lookup, a project
 * (by its URL-encoded path or id) and its members with inherited access
 * levels, merge requests (list by source branch, create — 409 for a second
 * open one of a branch, as GitLab —, update, show, diffs), issues, notes on
 * issues and merge requests, award emoji on notes (a second of the same name
 * by the same user refused), branches, commit statuses (a status set again to
 * the state it is in refused, as GitLab does) and a pipeline's jobs and job
 * logs. It checks the PRIVATE-TOKEN header and records every request.
 */
import { createServer, type Server } from 'node:http';

export interface FakeMergeRequest {
  iid: number;
  source_branch: string;
  target_branch: string;
  title: string;
  description: string;
  state: 'opened' | 'closed' | 'merged';
  web_url: string;
  /** Default: the project itself. */
  source_project_id?: number;
}

export interface FakeNote {
  id: number;
  body: string;
  system: boolean;
  created_at: string;
  author: { id: number; username: string };
  awards: { name: string; user: { id: number; username: string } }[];
}

export interface FakeGitLab {
  url: string;
  /** The project's numeric id. */
  projectId: number;
  /** The token's bot user. */
  bot: { id: number; username: string };
  requests: { method: string; path: string; token?: string; body: any }[];
  writes(): { method: string; path: string; body: any }[];
  state: {
    branches: Record<string, string>;
    /** username → access level (30 Developer…). */
    members: Record<string, number>;
    issues: Record<number, { title: string; description: string }>;
    /** "issues/<iid>" or "merge_requests/<iid>" → notes. */
    notes: Record<string, FakeNote[]>;
    mergeRequests: FakeMergeRequest[];
    statuses: { id: number; sha: string; status: string; name: string; description?: string; target_url?: string }[];
    jobs: Record<number, { pipeline: number; name: string; stage: string; status: string; log: string }>;
  };
  close(): Promise<void>;
}

const TRANSITIONS = ['pending', 'running', 'success', 'failed', 'canceled'];

export async function startFakeGitLab(opts: {
  path: string;
  token: string;
  projectId?: number;
  /** Branches pushed to a real repository (the tests' git remote), besides state.branches. */
  branchHead?: (name: string) => string | undefined;
}): Promise<FakeGitLab> {
  const projectId = opts.projectId ?? 7;
  const bot = { id: 900, username: `project_${projectId}_bot_0a1b2c` };
  const users = new Map<string, number>([[bot.username, bot.id]]);
  const userId = (name: string) => users.get(name) ?? (users.set(name, 1000 + users.size), users.get(name)!);
  const requests: FakeGitLab['requests'] = [];
  const state: FakeGitLab['state'] = {
    branches: {},
    members: {},
    issues: {},
    notes: {},
    mergeRequests: [],
    statuses: [],
    jobs: {},
  };
  let url = '';
  let nextId = 5000;
  const projectRef = `/api/v4/projects/(?:${encodeURIComponent(opts.path).replace(/%/g, '%')}|${projectId})`;

  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString();
    const body = text
      ? req.headers['content-type']?.includes('json')
        ? JSON.parse(text)
        : Object.fromEntries(new URLSearchParams(text))
      : {};
    const u = new URL(req.url!, 'http://x');
    const token = req.headers['private-token'] as string | undefined;
    requests.push({ method: req.method!, path: req.url!, token, body });
    const send = (status: number, data: unknown, type = 'application/json') => {
      res.writeHead(status, { 'content-type': type });
      res.end(typeof data === 'string' && type !== 'application/json' ? data : JSON.stringify(data));
    };
    if (token !== opts.token) return send(401, { message: '401 Unauthorized' });
    const raw = u.pathname;
    const route = (verb: string, pattern: string) =>
      req.method === verb ? new RegExp(`^${projectRef}${pattern}$`).exec(raw) : null;
    let m: RegExpExecArray | null;

    if (req.method === 'GET' && raw === '/api/v4/user') return send(200, bot);
    if (req.method === 'GET' && raw === '/api/v4/users') {
      const name = u.searchParams.get('username') ?? '';
      return send(200, users.has(name) || name in state.members ? [{ id: userId(name), username: name }] : []);
    }
    const project = {
      id: projectId,
      path_with_namespace: opts.path,
      default_branch: 'main',
      web_url: `${url}/${opts.path}`,
    };
    if (route('GET', '')) return send(200, project);
    if ((m = route('GET', '/members/all/(\\d+)'))) {
      const name = [...users].find(([, id]) => id === Number(m![1]))?.[0];
      const level = name ? state.members[name] : undefined;
      if (level === undefined) return send(404, { message: '404 Not found' });
      return send(200, { id: Number(m[1]), username: name, access_level: level });
    }
    if (route('GET', '/merge_requests')) {
      const branch = u.searchParams.get('source_branch');
      const wanted = u.searchParams.get('state');
      return send(
        200,
        state.mergeRequests
          .filter((mr) => (!branch || mr.source_branch === branch) && (!wanted || mr.state === wanted))
          .map(mrJson),
      );
    }
    if (route('POST', '/merge_requests')) {
      const { source_branch, target_branch, title } = body;
      if (!source_branch || !target_branch || !title) return send(400, { message: '400 Bad request - missing field' });
      if (!headOf(source_branch)) return send(404, { message: '404 Source branch not found' });
      if (state.mergeRequests.some((mr) => mr.source_branch === source_branch && mr.state === 'opened')) {
        return send(409, { message: ['Another open merge request already exists for this source branch'] });
      }
      const iid = state.mergeRequests.length + 1;
      const mr: FakeMergeRequest = {
        iid,
        source_branch,
        target_branch,
        title,
        description: body.description ?? '',
        state: 'opened',
        web_url: `${url}/${opts.path}/-/merge_requests/${iid}`,
      };
      state.mergeRequests.push(mr);
      return send(201, mrJson(mr));
    }
    if ((m = route('PUT', '/merge_requests/(\\d+)'))) {
      const mr = state.mergeRequests.find((x) => x.iid === Number(m![1]));
      if (!mr) return send(404, { message: '404 Not found' });
      Object.assign(
        mr,
        body.title ? { title: body.title } : {},
        body.description ? { description: body.description } : {},
      );
      return send(200, mrJson(mr));
    }
    if ((m = route('GET', '/merge_requests/(\\d+)'))) {
      const mr = state.mergeRequests.find((x) => x.iid === Number(m![1]));
      return mr ? send(200, mrJson(mr)) : send(404, { message: '404 Not found' });
    }
    if ((m = route('GET', '/merge_requests/(\\d+)/diffs'))) {
      return send(200, [{ new_path: 'README.md', old_path: 'README.md', new_file: false, deleted_file: false }]);
    }
    if ((m = route('GET', '/issues/(\\d+)'))) {
      const issue = state.issues[Number(m[1])];
      if (!issue) return send(404, { message: '404 Not found' });
      return send(200, { iid: Number(m[1]), project_id: projectId, ...issue });
    }
    if ((m = route('GET', '/(issues|merge_requests)/(\\d+)/notes')))
      return send(200, state.notes[`${m[1]}/${m[2]}`] ?? []);
    if ((m = route('POST', '/(issues|merge_requests)/(\\d+)/notes'))) {
      if (typeof body.body !== 'string' || !body.body)
        return send(400, { message: '400 Bad request - body is missing' });
      const note: FakeNote = {
        id: nextId++,
        body: body.body,
        system: false,
        created_at: new Date().toISOString(),
        author: bot,
        awards: [],
      };
      (state.notes[`${m[1]}/${m[2]}`] ??= []).push(note);
      return send(201, note);
    }
    const award = (verb: string) => route(verb, '/(issues|merge_requests)/(\\d+)/notes/(\\d+)/award_emoji');
    if ((m = award('GET') ?? award('POST'))) {
      const note = state.notes[`${m[1]}/${m[2]}`]?.find((n) => n.id === Number(m![3]));
      if (!note) return send(404, { message: '404 Note Not Found' });
      if (req.method === 'GET')
        return send(
          200,
          note.awards.map((a, i) => ({ id: i + 1, ...a })),
        );
      if (note.awards.some((a) => a.name === body.name && a.user.id === bot.id)) {
        return send(404, { message: '404 Award Emoji Name has already been taken' });
      }
      note.awards.push({ name: body.name, user: bot });
      return send(201, { id: note.awards.length, name: body.name, user: bot });
    }
    if ((m = route('GET', '/repository/branches/(.+)'))) {
      const name = decodeURIComponent(m[1]);
      return headOf(name)
        ? send(200, { name, commit: { id: headOf(name) } })
        : send(404, { message: '404 Branch Not Found' });
    }
    if ((m = route('GET', '/repository/commits/([0-9a-f]{40})/statuses'))) {
      const name = u.searchParams.get('name');
      return send(
        200,
        state.statuses.filter((s) => s.sha === m![1] && (!name || s.name === name)),
      );
    }
    if ((m = route('POST', '/statuses/([0-9a-f]{40})'))) {
      if (!TRANSITIONS.includes(body.state)) return send(400, { message: `state does not have a valid value` });
      const name = body.name ?? body.context ?? 'default';
      const current = state.statuses.filter((s) => s.sha === m![1] && s.name === name).at(-1);
      if (current?.status === body.state) {
        return send(400, { message: `Cannot transition status via :${body.state} from :${body.state}` });
      }
      const status = {
        id: nextId++,
        sha: m[1],
        status: body.state,
        name,
        description: body.description,
        target_url: body.target_url,
      };
      state.statuses.push(status);
      return send(201, status);
    }
    if ((m = route('GET', '/pipelines/(\\d+)/jobs'))) {
      const scope = u.searchParams.getAll('scope[]');
      const jobs = Object.entries(state.jobs)
        .filter(([, j]) => j.pipeline === Number(m![1]) && (!scope.length || scope.includes(j.status)))
        .map(([id, j]) => ({ id: Number(id), name: j.name, stage: j.stage, status: j.status }));
      return send(200, jobs);
    }
    if ((m = route('GET', '/jobs/(\\d+)/trace'))) {
      const job = state.jobs[Number(m[1])];
      return job ? send(200, job.log, 'text/plain') : send(404, { message: '404 Not found' });
    }
    return send(404, { message: `404 ${req.method} ${raw} is not in the stand-in` });
  });

  function headOf(branch: string): string | undefined {
    return state.branches[branch] ?? opts.branchHead?.(branch);
  }

  function mrJson(mr: FakeMergeRequest) {
    return {
      id: 10_000 + mr.iid,
      ...mr,
      project_id: projectId,
      source_project_id: mr.source_project_id ?? projectId,
      target_project_id: projectId,
    };
  }

  server.keepAliveTimeout = 0;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    get url() {
      return url;
    },
    projectId,
    bot,
    requests,
    writes: () => requests.filter((r) => r.method !== 'GET'),
    state,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
