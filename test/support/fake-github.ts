/**
 * A local HTTP server speaking the subset of the GitHub REST API drydock uses:
 * repo lookup, pulls list/create/update/get/files and a review's comments, branches, collaborator
 * permission, issues and their comments, comment reactions, commit statuses,
 * commits and a pull request's commits, files and merge (from the repository
 * itself, with gitRoot: fake-github-git.ts), check runs and their annotations (created and updated by an App only, as on
 * GitHub, and validated like GitHub does), workflow-run jobs and job logs (a 302 to
 * the log, like GitHub), and a GitHub App's installation lookup and token
 * endpoint (JWT verified with the App's public key). It checks paths, bodies
 * and the Authorization header like GitHub does, and records every request.
 */
import { spawn } from 'node:child_process';
import { createPublicKey, createVerify, type KeyObject } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { gitRoutes } from './fake-github-git';

export interface PullRequest {
  number: number;
  head: string;
  /** "owner/name" of the head's repository; default: the repo itself. */
  headRepo?: string;
  /** The changed files, for GET .../pulls/<n>/files. */
  files?: { filename: string; status: string; additions: number; deletions: number }[];
  base: string;
  title: string;
  body: string;
  draft: boolean;
  html_url: string;
  /** Set by PUT .../pulls/<n>/merge (with gitRoot): a real merge commit on the base. */
  state?: string;
  merged?: boolean;
  merged_at?: string | null;
  merge_commit_sha?: string | null;
  mergedCommits?: string[];
}

export interface IssueComment {
  id: number;
  issue: number;
  body: string;
  user: { login: string; type: string };
  html_url: string;
  created_at: string;
}

export interface CommitStatus {
  id: number;
  sha: string;
  state: string;
  description: string | null;
  context: string;
  target_url: string | null;
  created_at: string;
}

/** A job of a workflow run; on GitHub it is also a check run with the same id. */
export interface Job {
  name: string;
  conclusion: string;
  steps: { name: string; number: number; conclusion: string }[];
  output?: { title: string; summary: string };
  annotations: {
    path: string;
    start_line: number;
    end_line: number;
    annotation_level: string;
    title: string;
    message: string;
  }[];
  log: string;
}

/** A check run an App created (POST /repos/{owner}/{repo}/check-runs). */
export interface CheckRun {
  id: number;
  name: string;
  head_sha: string;
  external_id: string | null;
  details_url: string | null;
  status: string;
  conclusion: string | null;
  output: { title: string | null; summary: string | null; annotations_count: number };
  annotations: {
    path: string;
    start_line: number;
    end_line: number;
    annotation_level: string;
    title?: string;
    message: string;
  }[];
  /** Each status and conclusion it went through, in order. */
  history: string[];
}

/** What the tests seed and read: the repo's state on the fake GitHub. */
export interface FakeRepoState {
  /** Branch name → head commit. */
  branches: Record<string, string>;
  /** Login → "admin" | "write" | "read" | "none" (unknown users: "none"). */
  permissions: Record<string, string>;
  issues: Record<number, { title: string; body: string | null }>;
  comments: IssueComment[];
  reactions: { comment: number; content: string; user: string }[];
  statuses: CommitStatus[];
  /** Job (= check run) id → job. */
  jobs: Record<number, Job>;
  /** Workflow run id → its job ids. */
  workflowRuns: Record<number, number[]>;
  checkRuns: CheckRun[];
  /** Line comments of submitted reviews, for GET .../pulls/<n>/reviews/<id>/comments. */
  reviewComments: { pull: number; review: number; id: number; path: string; line: number; body: string }[];
}

export interface RecordedRequest {
  method: string;
  path: string;
  authorization?: string;
  body?: unknown;
}

export interface FakeGitHub {
  url: string;
  /** The next N requests to the REST API get this status (a GitHub outage), then service resumes. */
  failNext(count: number, status: number): void;
  requests: RecordedRequest[];
  pulls: PullRequest[];
  state: FakeRepoState;
  /** Requests that changed something (POST, PATCH, PUT, DELETE), for "nothing changed" checks. */
  writes(): RecordedRequest[];
  /** Installation tokens minted so far (they are accepted like the static token). */
  minted: string[];
  close(): Promise<void>;
}

export async function startFakeGitHub(opts: {
  owner: string;
  repo: string;
  /** Accepted as `token <t>` / `Bearer <t>`. */
  token?: string;
  /** Enables the App endpoints: JWTs must verify with this key and name this App id. */
  app?: { appId: string; publicKeyPem: string; installationId: number };
  /**
   * Serves git over smart HTTP at /<owner>/<repo>.git from this folder (bare
   * repos named <owner>/<repo>.git), with GitHub's Basic x-access-token auth.
   */
  gitRoot?: string;
}): Promise<FakeGitHub> {
  const requests: RecordedRequest[] = [];
  const pulls: PullRequest[] = [];
  const minted: string[] = [];
  const state: FakeRepoState = {
    branches: {},
    permissions: {},
    issues: {},
    comments: [],
    reactions: [],
    statuses: [],
    jobs: {},
    workflowRuns: {},
    checkRuns: [],
    reviewComments: [],
  };
  const appKey: KeyObject | undefined = opts.app ? createPublicKey(opts.app.publicKeyPem) : undefined;
  const full = `${opts.owner}/${opts.repo}`;
  let url = '';
  let failing = { count: 0, status: 503 };

  const validJwt = (jwt: string): boolean => {
    const [header, payload, signature] = jwt.split('.');
    if (!appKey || !signature) return false;
    const verify = createVerify('RSA-SHA256').update(`${header}.${payload}`);
    if (!verify.verify(appKey, Buffer.from(signature, 'base64url'))) return false;
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    return String(claims.iss) === opts.app!.appId && claims.exp > Date.now() / 1000;
  };

  const server: Server = createServer(async (req, res) => {
    if (opts.gitRoot && req.url!.startsWith(`/${full}.git/`)) return serveGit(req, res);
    const body = await readJson(req);
    const path = new URL(req.url!, 'http://x').pathname;
    const query = new URL(req.url!, 'http://x').searchParams;
    requests.push({ method: req.method!, path: req.url!, authorization: req.headers.authorization, body });
    const send = (status: number, data: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
      res.end(JSON.stringify(data));
    };
    const credential = /^(?:token|bearer) (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    if (failing.count > 0) {
      failing.count--;
      return send(failing.status, { message: 'Service Unavailable' });
    }

    if (path.startsWith('/app/') || (req.method === 'GET' && path === `/repos/${full}/installation`)) {
      if (!credential || !validJwt(credential)) return send(401, { message: 'A JSON web token could not be decoded' });
      if (path === `/repos/${full}/installation`) return send(200, { id: opts.app!.installationId });
      if (req.method === 'POST' && path === `/app/installations/${opts.app!.installationId}/access_tokens`) {
        const token = `ghs_fakeInstallation${minted.length}x${Date.now()}`;
        minted.push(token);
        return send(201, { token, expires_at: new Date(Date.now() + 3600_000).toISOString(), permissions: body });
      }
      return send(404, { message: 'Not Found' });
    }
    // The log download GitHub redirects to is a signed URL: no credentials.
    const logs = /^\/_logs\/(\d+)$/.exec(path);
    if (logs && req.method === 'GET' && state.jobs[Number(logs[1])]) {
      res.writeHead(200, { 'content-type': 'text/plain' });
      return void res.end(state.jobs[Number(logs[1])].log);
    }
    if (!credential || (credential !== opts.token && !minted.includes(credential))) {
      return send(401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' });
    }
    if (req.method === 'GET' && path === `/repos/${full}`) {
      return send(200, { id: 1, full_name: full, default_branch: 'main' });
    }
    if (path === `/repos/${full}/pulls` && req.method === 'GET') {
      const head = query.get('head');
      return send(
        200,
        pulls.filter((p) => !head || `${opts.owner}:${p.head}` === head),
      );
    }
    if (path === `/repos/${full}/pulls` && req.method === 'POST') {
      const b = body as Partial<PullRequest>;
      if (!b.head || !b.base || !b.title) return send(422, { message: 'Validation Failed' });
      if (pulls.some((p) => p.head === b.head)) {
        return send(422, { message: `Validation Failed: A pull request already exists for ${opts.owner}:${b.head}.` });
      }
      const number = pulls.length + 1;
      const pr: PullRequest = {
        number,
        head: b.head,
        base: b.base,
        title: b.title,
        body: b.body ?? '',
        draft: !!b.draft,
        html_url: `${url}/${full}/pull/${number}`,
      };
      pulls.push(pr);
      return send(201, pr);
    }
    const sub = path.slice(`/repos/${full}`.length);
    if (
      path.startsWith(`/repos/${full}/`) &&
      checkRunRoutes(req.method!, sub, query, body, send, minted.includes(credential))
    ) {
      return;
    }
    const bare = opts.gitRoot && join(opts.gitRoot, `${full}.git`);
    if (bare && path.startsWith(`/repos/${full}/`) && gitRoutes(bare, req.method!, sub, query, body, pulls, send)) {
      return;
    }
    const routed = repoRoutes(req.method!, sub, body, send, res);
    if (path.startsWith(`/repos/${full}/`) && routed) return;
    const update = new RegExp(`^/repos/${full}/pulls/(\\d+)$`).exec(path);
    if (update && req.method === 'PATCH') {
      const pr = pulls.find((p) => p.number === Number(update[1]));
      if (!pr) return send(404, { message: 'Not Found' });
      Object.assign(pr, body);
      return send(200, pr);
    }
    send(404, { message: 'Not Found' });
  });
  /**
   * Check runs as GitHub's Checks API has them: written by an App's
   * installation token only (a personal token gets 403), validated (name,
   * head_sha, status and conclusion, at most 50 annotations a request, each
   * complete), annotations appended on every update. False: not one of these.
   */
  function checkRunRoutes(
    method: string,
    sub: string,
    query: URLSearchParams,
    body: any,
    send: (status: number, data: unknown) => void,
    byApp: boolean,
  ): boolean {
    const at = (pattern: string, verb: string) => (method === verb ? new RegExp(`^${pattern}$`).exec(sub) : null);
    const shown = (run: CheckRun) => {
      const rest: Partial<CheckRun> = { ...run, output: { ...run.output } };
      delete rest.annotations;
      delete rest.history;
      return rest;
    };
    let m: RegExpExecArray | null;
    if ((m = at('/commits/([^/]+)/check-runs', 'GET'))) {
      const name = query.get('check_name');
      const runs = state.checkRuns.filter((r) => r.head_sha === m![1] && (!name || r.name === name)).reverse();
      send(200, { total_count: runs.length, check_runs: runs.map(shown) });
      return true;
    }
    if ((m = at('/check-runs/(\\d+)/annotations', 'GET'))) {
      const run = state.checkRuns.find((r) => r.id === Number(m![1]));
      if (!run) return false;
      send(200, run.annotations);
      return true;
    }
    const create = at('/check-runs', 'POST');
    const update = at('/check-runs/(\\d+)', 'PATCH');
    if (!create && !update) return false;
    if (!byApp) {
      send(403, {
        message: 'You must authenticate via a GitHub App.',
        documentation_url: 'https://docs.github.com/rest/checks/runs',
      });
      return true;
    }
    const problem = checkRunProblem(body, Boolean(create));
    if (problem) {
      send(422, { message: 'Validation Failed', errors: [problem] });
      return true;
    }
    let run = update ? state.checkRuns.find((r) => r.id === Number(update[1])) : undefined;
    if (update && !run) {
      send(404, { message: 'Not Found' });
      return true;
    }
    if (!run) {
      run = {
        id: 5000 + state.checkRuns.length,
        name: body.name,
        head_sha: body.head_sha,
        external_id: body.external_id ?? null,
        details_url: body.details_url ?? null,
        status: 'queued',
        conclusion: null,
        output: { title: null, summary: null, annotations_count: 0 },
        annotations: [],
        history: [],
      };
      state.checkRuns.push(run);
    }
    if (body.conclusion) Object.assign(run, { status: 'completed', conclusion: body.conclusion });
    else if (body.status) run.status = body.status;
    if (body.details_url) run.details_url = body.details_url;
    if (body.output) {
      run.output.title = body.output.title;
      run.output.summary = body.output.summary;
      run.annotations.push(...(body.output.annotations ?? []));
      run.output.annotations_count = run.annotations.length;
    }
    run.history.push(run.conclusion ?? run.status);
    send(create ? 201 : 200, shown(run));
    return true;
  }

  /**
   * The endpoints of a session's trigger: checks, context and reports.
   * `sub` is the path under /repos/<owner>/<repo>. False: not one of these.
   */
  function repoRoutes(
    method: string,
    sub: string,
    body: any,
    send: (status: number, data: unknown) => void,
    res: ServerResponse,
  ): boolean {
    const at = (pattern: string, verb = 'GET') => (method === verb ? new RegExp(`^${pattern}$`).exec(sub) : null);
    const now = () => new Date().toISOString();
    const notFound = () => {
      send(404, { message: 'Not Found' });
      return true;
    };
    let m: RegExpExecArray | null;
    if ((m = at('/branches/([^/]+)'))) {
      const sha = state.branches[decodeURIComponent(m[1])];
      send(sha ? 200 : 404, sha ? { name: m[1], commit: { sha } } : { message: 'Branch not found' });
    } else if ((m = at('/collaborators/([^/]+)/permission'))) {
      const permission = state.permissions[m[1]] ?? 'none';
      send(200, { permission, role_name: permission, user: { login: m[1] } });
    } else if ((m = at('/pulls/(\\d+)'))) {
      const pr = pulls.find((p) => p.number === Number(m![1]));
      if (!pr) return notFound();
      const repo = { full_name: pr.headRepo ?? full };
      send(200, { ...pr, head: { ref: pr.head, repo }, base: { ref: pr.base, repo: { full_name: full } } });
    } else if ((m = at('/pulls/(\\d+)/reviews/(\\d+)/comments'))) {
      const [pull, review] = [Number(m[1]), Number(m[2])];
      const found = state.reviewComments.filter((c) => c.pull === pull && c.review === review);
      send(
        200,
        found.map((c) => ({ ...c, pull_request_review_id: review, original_line: c.line })),
      );
    } else if ((m = at('/pulls/(\\d+)/files'))) {
      send(200, pulls.find((p) => p.number === Number(m![1]))?.files ?? []);
    } else if ((m = at('/issues/(\\d+)'))) {
      const issue = state.issues[Number(m[1])];
      send(issue ? 200 : 404, issue ? { number: Number(m[1]), ...issue } : { message: 'Not Found' });
    } else if ((m = at('/issues/(\\d+)/comments'))) {
      send(
        200,
        state.comments.filter((c) => c.issue === Number(m![1])),
      );
    } else if ((m = at('/issues/(\\d+)/comments', 'POST'))) {
      if (typeof body?.body !== 'string') {
        send(422, { message: 'Validation Failed' });
        return true;
      }
      const id = 9000 + state.comments.length;
      const issue = Number(m[1]);
      const html_url = `${url}/${full}/issues/${issue}#issuecomment-${id}`;
      const comment = {
        id,
        issue,
        body: body.body,
        user: { login: 'drydock[bot]', type: 'Bot' },
        html_url,
        created_at: now(),
      };
      state.comments.push(comment);
      send(201, comment);
    } else if ((m = at('/issues/comments/(\\d+)/reactions', 'POST'))) {
      const found = state.reactions.find((r) => r.comment === Number(m![1]) && r.content === body?.content);
      const reaction = { comment: Number(m[1]), content: body?.content, user: 'drydock[bot]' };
      if (!found) state.reactions.push(reaction);
      send(found ? 200 : 201, { id: 1, content: reaction.content, user: { login: reaction.user } });
    } else if ((m = at('/commits/([^/]+)/statuses'))) {
      send(200, state.statuses.filter((s) => s.sha === m![1]).reverse());
    } else if ((m = at('/statuses/([0-9a-f]{40})', 'POST'))) {
      const status: CommitStatus = {
        id: state.statuses.length + 1,
        sha: m[1],
        state: body.state,
        description: body.description ?? null,
        context: body.context ?? 'default',
        target_url: body.target_url ?? null,
        created_at: now(),
      };
      state.statuses.push(status);
      send(201, status);
    } else if ((m = at('/check-runs/(\\d+)'))) {
      const job = state.jobs[Number(m[1])];
      if (!job) return notFound();
      send(200, { id: Number(m[1]), name: job.name, conclusion: job.conclusion, output: job.output ?? null });
    } else if ((m = at('/check-runs/(\\d+)/annotations'))) {
      send(200, state.jobs[Number(m[1])]?.annotations ?? []);
    } else if ((m = at('/actions/runs/(\\d+)/jobs'))) {
      const jobs = (state.workflowRuns[Number(m[1])] ?? []).map((id) => ({ id, ...state.jobs[id], log: undefined }));
      send(200, { total_count: jobs.length, jobs });
    } else if ((m = at('/actions/jobs/(\\d+)/logs'))) {
      if (!state.jobs[Number(m[1])]) return notFound();
      res.writeHead(302, { location: `${url}/_logs/${m[1]}` });
      res.end();
    } else {
      return false;
    }
    return true;
  }

  /** git http-backend as CGI, after checking the Basic credentials GitHub accepts. */
  function serveGit(req: IncomingMessage, res: ServerResponse): void {
    const basic = /^Basic (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const [user, password] = basic ? Buffer.from(basic, 'base64').toString().split(':') : [];
    requests.push({ method: req.method!, path: req.url!, authorization: req.headers.authorization });
    if (user !== 'x-access-token' || !password || (password !== opts.token && !minted.includes(password))) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="GitHub"' });
      res.end();
      return;
    }
    const u = new URL(req.url!, 'http://x');
    const cgi = spawn('git', ['http-backend'], {
      env: {
        ...process.env,
        GIT_PROJECT_ROOT: opts.gitRoot,
        GIT_HTTP_EXPORT_ALL: '1',
        REMOTE_USER: user,
        REQUEST_METHOD: req.method,
        PATH_INFO: u.pathname,
        QUERY_STRING: u.search.slice(1),
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        HTTP_CONTENT_ENCODING: req.headers['content-encoding'] ?? '',
        GIT_HTTP_MAX_REQUEST_BUFFER: '100M',
      },
    });
    req.pipe(cgi.stdin);
    const chunks: Buffer[] = [];
    cgi.stdout.on('data', (c: Buffer) => chunks.push(c));
    cgi.on('close', () => {
      const out = Buffer.concat(chunks);
      const split = out.indexOf('\r\n\r\n');
      const headers = out.subarray(0, split).toString().split('\r\n');
      let status = 200;
      const fields: Record<string, string> = {};
      for (const line of headers) {
        const [name, ...rest] = line.split(':');
        if (name.toLowerCase() === 'status') status = parseInt(rest.join(':'), 10);
        else fields[name] = rest.join(':').trim();
      }
      res.writeHead(status, fields);
      res.end(out.subarray(split + 4));
    });
  }

  // The client closes idle connections, never the server: a server closing one as the client
  // reused it (its 5 s keep-alive timeout, on a busy machine) failed a request with ECONNRESET.
  server.keepAliveTimeout = 0;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url,
    requests,
    pulls,
    state,
    writes: () => requests.filter((r) => r.method !== 'GET' && r.method !== 'HEAD'),
    minted,
    failNext: (count, status) => {
      failing = { count, status };
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString();
  return text ? JSON.parse(text) : undefined;
}

const CHECK_STATUSES = ['queued', 'in_progress', 'completed'];
const CONCLUSIONS = ['action_required', 'cancelled', 'failure', 'neutral', 'success', 'skipped', 'stale', 'timed_out'];
const LEVELS = ['notice', 'warning', 'failure'];

/** What GitHub would refuse in a check run's body, or undefined. */
function checkRunProblem(body: any, creating: boolean): string | undefined {
  if (creating && (typeof body?.name !== 'string' || !body.name)) return 'name is missing';
  if (creating && !/^[0-9a-f]{40}$/.test(body?.head_sha ?? '')) return 'head_sha is not a commit sha';
  if (body.status !== undefined && !CHECK_STATUSES.includes(body.status))
    return `status ${body.status} is not one of ${CHECK_STATUSES}`;
  if (body.conclusion !== undefined && !CONCLUSIONS.includes(body.conclusion))
    return `conclusion ${body.conclusion} is not valid`;
  if (body.status === 'completed' && !body.conclusion) return 'a completed check run needs a conclusion';
  if (body.output !== undefined) {
    if (typeof body.output.title !== 'string' || typeof body.output.summary !== 'string')
      return 'output needs title and summary';
    const annotations = body.output.annotations ?? [];
    if (!Array.isArray(annotations) || annotations.length > 50) return 'at most 50 annotations per request';
    for (const a of annotations) {
      if (typeof a.path !== 'string' || !a.path || a.path.startsWith('/'))
        return 'annotation path must be relative to the repo';
      if (
        !Number.isInteger(a.start_line) ||
        !Number.isInteger(a.end_line) ||
        a.start_line < 1 ||
        a.end_line < a.start_line
      ) {
        return 'annotation start_line and end_line must be lines, start_line <= end_line';
      }
      if (!LEVELS.includes(a.annotation_level)) return `annotation_level ${a.annotation_level} is not valid`;
      if (typeof a.message !== 'string' || !a.message) return 'annotation message is missing';
    }
  }
  return undefined;
}
