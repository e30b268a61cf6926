/**
 * A local HTTP server speaking the subset of the GitHub REST API drydock uses:
 * repo lookup, pulls list/create/update, and a GitHub App's installation
 * lookup and token endpoint (JWT verified with the App's public key). It
 * checks paths, bodies and the Authorization header like GitHub does, and
 * records every request.
 */
import { spawn } from 'node:child_process';
import { createPublicKey, createVerify, type KeyObject } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

export interface PullRequest {
  number: number;
  head: string;
  base: string;
  title: string;
  body: string;
  draft: boolean;
  html_url: string;
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
    const update = new RegExp(`^/repos/${full}/pulls/(\\d+)$`).exec(path);
    if (update && req.method === 'PATCH') {
      const pr = pulls.find((p) => p.number === Number(update[1]));
      if (!pr) return send(404, { message: 'Not Found' });
      Object.assign(pr, body);
      return send(200, pr);
    }
    send(404, { message: 'Not Found' });
  });
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

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url,
    requests,
    pulls,
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
