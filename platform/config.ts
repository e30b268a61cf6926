/**
 * drydock's configuration: one zod schema over the environment, parsed once
 * at a process's start; a bad value stops the process with a message naming
 * the variable (docs/configuration.md lists them all).
 */
import { hostname } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { isRegistryName } from '../workflows/rules/images';
import { duration, triggerSessionSchema } from '../workflows/input';
import { durationMs, sizeBytes } from '../workflows/units';
import { loadTemporalSettings, TEMPORAL_VARIABLES, type TemporalSettings } from './temporal-connection';

/**
 * The wire protocols of the built-in loop's model endpoints: anthropic (Messages API), openai
 * (Responses API), openai-chat (OpenAI's chat completions), compatible (any OpenAI-compatible
 * chat-completions server: vLLM, Ollama, llama.cpp, gateways).
 */
export const MODEL_APIS = ['anthropic', 'openai', 'openai-chat', 'compatible'] as const;

/** The project folder; `data/` and `.tools/` live under it unless configured. */
export const projectRoot = path.resolve(__dirname, '..');

/** A comma-separated list; "none" is the empty list; an empty value is refused, so approvals fail closed. */
const list = z
  .string()
  .refine((v) => v.trim() !== '', 'empty: list the values, or write "none"')
  .transform((v) =>
    v.trim() === 'none'
      ? []
      : v
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean),
  );

/** A size in bytes: "512m", "48g" (k, m, g: powers of 1024). */
const size = z
  .string()
  .regex(/^\d+[kmg]$/i, 'a size such as 512m or 48g')
  .transform((v) => sizeBytes(v));

/** A JSON object in a variable. */
/** A key of DRYDOCK_GIT_CREDENTIALS: "git.example.com", "git.example.com:8443", "[::1]:8080". */
const GIT_HOST = /^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d+)?$/;

const json = <T extends z.ZodType>(schema: T) =>
  z
    .string()
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: 'custom', message: 'not valid JSON' });
        return z.NEVER;
      }
    })
    .pipe(schema);

const configSchema = z.object({
  DRYDOCK_TASK_QUEUE: z.string().min(1).default('drydock'),
  /** Local state: Temporal's database file, artifacts, git mirrors. */
  DRYDOCK_DATA_DIR: z.string().min(1).default(path.join(projectRoot, 'data')),
  /** Names this Docker host; sandbox activities of a session run on `<queue>@<host id>`. */
  DRYDOCK_HOST_ID: z
    .string()
    .regex(/^[A-Za-z0-9._-]+$/, 'letters, digits, ".", "_" and "-" only')
    .default(hostname()),
  /**
   * How long a sandbox activity may wait in this host's queue before the
   * session counts the host as lost and re-provisions elsewhere from its last
   * checkpoint. Longer than a worker restart, shorter than anyone's patience.
   */
  DRYDOCK_HOST_TIMEOUT: duration.default('2m').transform(durationMs),
  /**
   * This host's sandbox slots: sessions beyond it wait in the `queued` phase
   * until a sandbox of this host (or another) is torn down. Nothing running is
   * ever evicted (docs/operations.md, admission).
   */
  DRYDOCK_MAX_SANDBOXES: z.coerce.number().int().positive().default(16),
  /**
   * The sum of this host's sandboxes' memory limits (their services' shares
   * included), e.g. "48g"; beyond it sessions queue. Default: the engine's memory.
   */
  DRYDOCK_HOST_MEMORY: size.optional(),
  /** The sum of this host's sandboxes' CPU limits; beyond it sessions queue. Default: no bound (CPU is shared, not held). */
  DRYDOCK_HOST_CPUS: z.coerce.number().positive().optional(),
  /** Free space a host keeps on its sandbox storage: below it, new sandboxes wait in the queue. */
  DRYDOCK_HOST_DISK_FREE: size.default(2 * 1024 ** 3),
  /**
   * The HTTP API's bound on queued sessions per repo: a start beyond it is
   * refused with 429 and Retry-After instead of queueing without end. 0: no bound.
   */
  DRYDOCK_MAX_QUEUED_PER_REPO: z.coerce.number().int().min(0).default(20),
  /** On SIGTERM (or a first Ctrl-C) the worker stops polling and lets running activities finish within this. */
  DRYDOCK_SHUTDOWN_GRACE: duration.default('5m').transform(durationMs),
  /**
   * The isolated builder's time limit for one build (a repo's environment, a
   * service's `build:`): then the builder is killed and the snapshot fails
   * naming this setting. Within the 40 minutes of the activities that build
   * (startSnapshotBuild, provisionSandbox), so a build past it fails named
   * instead of being retried whole.
   */
  DRYDOCK_BUILD_TIMEOUT: duration
    .default('8m')
    .transform(durationMs)
    .refine((ms) => ms >= 60_000 && ms <= 30 * 60_000, 'between 1m and 30m (the activities that build have 40m)'),
  /** Sandbox base image; by default the tag built from sandbox-images/base. */
  DRYDOCK_BASE_IMAGE: z.string().min(1).optional(),
  /** Base URL of the Temporal Web UI, for links printed by the CLI. */
  DRYDOCK_TEMPORAL_UI: z.string().url().default('http://localhost:8233'),
  /** Who the CLI acts as when approving or rejecting (default: the OS user). */
  DRYDOCK_USER: z.string().min(1).optional(),
  /**
   * Server approval policy. Sessions may add actions, narrow approvers and
   * forbid self-approval, never the reverse.
   */
  DRYDOCK_APPROVAL_REQUIRED: list
    .pipe(z.array(z.enum(['push', 'pull_request', 'deploy'])))
    .default(['push', 'pull_request', 'deploy']),
  /** Who may approve any session (empty: each session's own list, or anyone). */
  DRYDOCK_APPROVERS: list.default([]),
  /**
   * How long a change may wait at an approval gate with its sandbox running:
   * then the session parks (its sandbox and services go, its checkpoint stays)
   * and anything that runs in the sandbox later brings one back from the
   * checkpoint. "never" (or 0) keeps the sandbox for the whole wait.
   */
  DRYDOCK_PARK_AFTER: z
    .string()
    .default('15m')
    .refine(
      (v) => v === 'never' || v === '0' || /^\d+(ms|s|m|h|d)$/.test(v),
      'DRYDOCK_PARK_AFTER: expected a duration like "15m", or "never"',
    )
    .transform((v) => (v === '0' ? 'never' : v)),
  /**
   * "true": a session's requester may not approve it. Unset: forbidden, except
   * in development mode (`drydock up`), where one developer is the only
   * approver there is (selfApprovalForbidden below).
   */
  DRYDOCK_FORBID_SELF_APPROVAL: z
    .enum(['true', 'false'])
    .optional()
    .transform((v) => (v === undefined ? undefined : v === 'true')),
  /**
   * "true": pushing a change waits for its own approval even when its pull
   * request's approval would cover it. Default: one review per change.
   */
  DRYDOCK_SEPARATE_APPROVALS: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  /**
   * "true": a session may push to the repository's default branch
   * (`publish.branch`). Default: refused at the push, approved or not.
   */
  DRYDOCK_ALLOW_DEFAULT_BRANCH_PUSH: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  /** The `deploy` action: a shell command the worker runs (env DRYDOCK_REPO_URL, DRYDOCK_BRANCH, DRYDOCK_COMMIT). */
  DRYDOCK_DEPLOY_COMMAND: z.string().min(1).optional(),
  /**
   * Names of the worker's variables the deploy command also gets, besides
   * PATH, HOME, USER, SHELL, LANG, LC_*, TZ and TMPDIR: nothing else of the
   * worker's environment (database URL, model keys, tokens) reaches it.
   */
  DRYDOCK_DEPLOY_ENV: list.pipe(z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'variable names'))).default([]),
  /**
   * Follow-up rounds a session gets, per pull request, from CI failing on it
   * (docs/webhooks.md); 0: CI failures on drydock's pull requests are not sent to their sessions.
   */
  DRYDOCK_CI_FIX_ROUNDS: z.coerce.number().int().min(0).max(10).default(2),
  /** Parallel attempts of one task at most (a session's `attempts`; the schema's own bound is 8). */
  DRYDOCK_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(8).default(4),
  /**
   * Child sessions one session's agent may start at most (docs/agents.md,
   * Child sessions), whatever the session's `children.max` asks (the schema's
   * own bound is 8); 0: agents start none.
   */
  DRYDOCK_MAX_CHILDREN: z.coerce.number().int().min(0).max(8).default(8),
  /** A pilot's sessions working at once at most, whatever its `concurrency` asks. */
  DRYDOCK_PILOT_CONCURRENCY: z.coerce.number().int().min(1).max(32).default(4),
  /** USD per sandbox minute, in the cost per accepted (or merged) change of the reports. */
  DRYDOCK_SANDBOX_MINUTE_PRICE: z.coerce.number().min(0).default(0),
  /** How long after its merge a drydock change is watched for a revert or a fix of its lines (escaped defects). */
  DRYDOCK_DEFECT_WINDOW: duration.default('14d').transform(durationMs),
  /**
   * A pilot's credentials_rotated fault runs this on the worker: a shell command that rotates the
   * worker's credentials (e.g. writes a new token to GITHUB_TOKEN_FILE and revokes the old one).
   */
  DRYDOCK_ROTATE_COMMAND: z.string().min(1).optional(),
  /** GitHub REST API base URL (GitHub Enterprise: https://<host>/api/v3). */
  GITHUB_API_URL: z.string().url().default('https://api.github.com'),
  /** A token with contents and pull-requests write; or use a GitHub App below. */
  GITHUB_TOKEN: z.string().min(1).optional(),
  /** The token from a file, read at each use: rotated by rewriting the file, without a restart. */
  GITHUB_TOKEN_FILE: z.string().min(1).optional(),
  GITHUB_APP_ID: z.string().min(1).optional(),
  /** GitLab's URL (https://gitlab.com, or a self-managed instance): sets up GitLab as a forge (docs/forges.md). */
  GITLAB_URL: z.string().url().optional(),
  /** A project (or group) access token with the api scope and the Developer role; or GITLAB_TOKEN_FILE. */
  GITLAB_TOKEN: z.string().min(1).optional(),
  /** GitLab's token from a file, read at each use: rotated by rewriting the file. */
  GITLAB_TOKEN_FILE: z.string().min(1).optional(),
  /** PEM file of the App's private key; installation tokens are minted per repository. */
  GITHUB_APP_PRIVATE_KEY_FILE: z.string().min(1).optional(),
  /** A Gitea (or Forgejo) server drydock publishes to: its web origin, e.g. https://git.example.com (docs/forge-gitea.md). */
  DRYDOCK_GITEA_URL: z.string().url().optional(),
  /** An access token of drydock's Gitea account (write:repository, write:issue, read:user). */
  DRYDOCK_GITEA_TOKEN: z.string().min(1).optional(),
  /** Gitea webhook secrets, comma-separated: the current one first, then an old one while rotating. */
  DRYDOCK_GITEA_WEBHOOK_SECRETS: list.optional(),
  /**
   * git credentials for hosts other than the configured GitHub, "user:token" by host:
   * {"git.example.com": "oauth2:glpat-..."}. Sent as an Authorization header over
   * HTTPS (plain HTTP to loopback only); repo URLs carry no credentials.
   */
  DRYDOCK_GIT_CREDENTIALS: json(
    z.record(z.string(), z.string().regex(/^[^:\s]+:\S+$/, 'expected "user:token"')).superRefine((hosts, ctx) => {
      for (const host of Object.keys(hosts).filter((h) => !GIT_HOST.test(h))) {
        ctx.addIssue({ code: 'custom', path: [host], message: 'expected a host or host:port, without a scheme' });
      }
    }),
  ).default({}),
  /** A Postgres server (audit trail, snapshot registry, metrics); unset: embedded PGlite in the data dir. */
  DATABASE_URL: z.string().url().optional(),
  /**
   * The audit chain's HMAC key, the same for every worker, `drydock serve` and
   * `drydock audit verify`; kept out of the database and its backups.
   */
  DRYDOCK_AUDIT_KEY: z.string().min(32, 'at least 32 characters (openssl rand -hex 32)').optional(),
  /**
   * The same, from a file. With neither, `<data dir>/audit-key`, which only
   * development mode creates; elsewhere a missing key stops the process.
   */
  DRYDOCK_AUDIT_KEY_FILE: z.string().min(1).optional(),
  /** The model API sessions use when they name no agent.baseUrl. */
  DRYDOCK_MODEL_BASE_URL: z.string().url().default('https://api.openai.com/v1'),
  /** Its protocol: anthropic (Messages), openai (Responses), openai-chat, compatible (any chat-completions server). */
  DRYDOCK_MODEL_API: z.enum(MODEL_APIS).default('openai'),
  /** Key for DRYDOCK_MODEL_BASE_URL only (never sent to another endpoint). */
  DRYDOCK_MODEL_API_KEY: z.string().min(1).optional(),
  /**
   * Other endpoints sessions may use: a key (a compatible server), or API and key:
   * {"http://localhost:11434/v1": "", "https://api.anthropic.com/v1": {"api": "anthropic", "key": "sk-ant-..."}}.
   */
  DRYDOCK_MODEL_ENDPOINTS: json(
    z.record(
      z.string().url(),
      z.union([z.string(), z.strictObject({ api: z.enum(MODEL_APIS), key: z.string().optional() })]),
    ),
  ).default({}),
  /**
   * USD per million tokens, per model: {"gpt-4.1": {"input": 2, "output": 8, "cachedInput": 0.5}};
   * cached prompt tokens (cachedInput) and Anthropic's cache writes (cacheWrite) cost `input` unless given.
   */
  DRYDOCK_MODEL_PRICES: json(
    z.record(
      z.string(),
      z.strictObject({
        input: z.number().min(0),
        output: z.number().min(0),
        cachedInput: z.number().min(0).optional(),
        cacheWrite: z.number().min(0).optional(),
      }),
    ),
  ).default({}),
  /** A worker's Prometheus endpoint (GET /metrics: drydock's and the Temporal SDK's metrics); unset: none. */
  DRYDOCK_METRICS_PORT: z.coerce.number().int().min(0).max(65535).optional(),
  DRYDOCK_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  /** An OpenTelemetry collector (OTLP over HTTP): traces of workflows and activities go there; unset: no tracing. */
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().url().optional(),
  OTEL_SERVICE_NAME: z.string().min(1).default('drydock'),
  /** The Anthropic Messages API that Claude Code sessions reach through the model gateway (sandbox/model-gateway.ts). */
  DRYDOCK_ANTHROPIC_BASE_URL: z.string().url().default('https://api.anthropic.com'),
  /** Key for DRYDOCK_ANTHROPIC_BASE_URL only; added by the gateway on the worker, never in a sandbox. */
  DRYDOCK_ANTHROPIC_API_KEY: z.string().min(1).optional(),
  /**
   * Host folder of the agent CLIs (Claude Code, Codex, opencode), each pinned
   * version installed once per host and mounted read-only in every sandbox at
   * /opt/drydock-agents. Default: <project>/.tools/agents.
   */
  DRYDOCK_AGENTS_DIR: z
    .string()
    .min(1)
    .default(path.join(projectRoot, '.tools', 'agents')),
  /**
   * Host folder of code-server (VS Code in the browser, built by infra/code-server.sh), mounted
   * read-only in every sandbox at /opt/drydock-editor when it holds bin/code-server (docs/editor.md).
   */
  DRYDOCK_EDITOR_DIR: z
    .string()
    .min(1)
    .default(path.join(projectRoot, '.tools', 'code-server', '4.100.3')),
  /** No request nor message of a person's reaching an open editor for this long stops it (docs/editor.md). */
  DRYDOCK_EDITOR_IDLE: duration.default('15m').transform(durationMs),
  /** `drydock serve`: where the HTTP server (webhooks, API, review console) listens. */
  DRYDOCK_HTTP_HOST: z.string().min(1).default('127.0.0.1'),
  DRYDOCK_HTTP_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  /** Base URL of the review console, for links (default: http://<host>:<port>). */
  DRYDOCK_CONSOLE_URL: z.string().url().optional(),
  /**
   * Base URL of the app previews (docs/preview.md): each session's app is at
   * `<label>.<its host>`, so its DNS needs a wildcard to serve (default:
   * http://preview.localhost:<port>, which browsers resolve to loopback).
   */
  DRYDOCK_PREVIEW_URL: z.string().url().optional(),
  /**
   * GitHub webhook secrets, comma-separated: the current one first; during a
   * rotation also the old one, and a delivery signed with either is accepted.
   */
  DRYDOCK_WEBHOOK_SECRETS: list.optional(),
  /** GitLab webhooks' secret tokens (X-Gitlab-Token), comma-separated: the current one first, then one being rotated out. */
  DRYDOCK_GITLAB_WEBHOOK_TOKENS: list.optional(),
  /** HMAC secret of the generic CI trigger (POST /webhooks/ci). */
  DRYDOCK_CI_SECRET: z.string().min(16, 'at least 16 characters').optional(),
  /** Largest webhook or API body read, in bytes (GitHub's own cap is 25 MB). */
  DRYDOCK_HTTP_MAX_BODY: z.coerce
    .number()
    .int()
    .positive()
    .default(5 * 1024 ** 2),
  /** Machines' API tokens: `ci=<token>,prometheus=<token>`; recorded as `machine:<name>`. */
  DRYDOCK_API_TOKENS: z.string().min(1).optional(),
  /** The same, one `name=token` a line, from a file (kept out of the environment). */
  DRYDOCK_API_TOKENS_FILE: z.string().min(1).optional(),
  /** People and their accounts on OpenID Connect, GitHub, Slack and Linear (identity/directory.ts; docs/identity.md). */
  DRYDOCK_IDENTITIES_FILE: z.string().min(1).optional(),
  /** The console's OpenID Connect provider (its issuer URL); unset: the console signs in with tokens only. */
  DRYDOCK_OIDC_ISSUER: z.string().url().optional(),
  DRYDOCK_OIDC_CLIENT_ID: z.string().min(1).optional(),
  DRYDOCK_OIDC_CLIENT_SECRET: z.string().min(1).optional(),
  /** The ID token claim that the identities file's `oidc:` entries name. */
  DRYDOCK_OIDC_CLAIM: z.string().min(1).default('email'),
  /** The Slack app's signing secret: requests to /slack/* must be signed with it (docs/slack.md). */
  DRYDOCK_SLACK_SIGNING_SECRET: z.string().min(16, 'at least 16 characters').optional(),
  /** The Slack app's bot token (xoxb-…): serve and the workers post and update the thread messages. */
  DRYDOCK_SLACK_BOT_TOKEN: z.string().min(1).optional(),
  /** Slack's Web API base URL. */
  DRYDOCK_SLACK_API_URL: z.string().url().default('https://slack.com/api/'),
  /** Channels bound to a repo: `<channel id>=owner/name`, comma-separated (a message may name another). */
  DRYDOCK_SLACK_CHANNELS: list.optional(),
  /** Linear's webhook signing secret: deliveries to /webhooks/linear must carry its Linear-Signature. */
  DRYDOCK_LINEAR_WEBHOOK_SECRET: z.string().min(16, 'at least 16 characters').optional(),
  /** A Linear API key (lin_api_…) for comments on issues; on the workers. */
  DRYDOCK_LINEAR_API_KEY: z.string().min(1).optional(),
  /** Linear's GraphQL endpoint. */
  DRYDOCK_LINEAR_API_URL: z.string().url().default('https://api.linear.app/graphql'),
  /** Linear teams bound to a repo: `<team key>=owner/name`, comma-separated. */
  DRYDOCK_LINEAR_TEAMS: list.optional(),
  /** The label that hands a Linear issue to drydock. */
  DRYDOCK_LINEAR_LABEL: z.string().min(1).default('drydock'),
  /** drydock's Linear user id: assigning an issue to it starts a session too. */
  DRYDOCK_LINEAR_ASSIGNEE: z.string().min(1).optional(),
  /**
   * Seeds the repo registry (`drydock repo add` is the other way in):
   * `owner/name=<clone URL>`, comma-separated. A repo already registered keeps
   * its limits. Webhooks, the API and sessions use only registered repos.
   */
  DRYDOCK_REPOS: list.optional(),
  /**
   * Image registries ("host" or "host:port") every repo's images may be pulled
   * from, at a snapshot build only (docs/services.md); each repo may add its own
   * (`drydock repo add --allow-registry`). Empty: only images already on the host.
   */
  DRYDOCK_ALLOWED_REGISTRIES: list
    .pipe(z.array(z.string().refine(isRegistryName, 'a registry is "host" or "host:port"')))
    .default([]),
  /**
   * What sessions started by a webhook run until repos carry their own
   * configuration: JSON with `agent` and optionally `verify`, `publish`,
   * `approval`, as in the session input. Unset: webhooks start nothing (422).
   */
  DRYDOCK_TRIGGER_SESSION: json(triggerSessionSchema).optional(),
  /** How old a signed CI trigger (X-Drydock-Timestamp) may be; older ones are replays and refused. */
  DRYDOCK_CI_REPLAY_WINDOW: duration.default('5m').transform(durationMs),
  /**
   * The console's Approve counts only for a change pending at least this long:
   * a change that a live redraw put under the approver's cursor seconds
   * before is refused ("0s": no wait). API tokens name their change as sent.
   */
  DRYDOCK_APPROVAL_SETTLE: duration.default('10s').transform(durationMs),
  /**
   * Development mode ("1"/"true"; `drydock up` turns it on): sessions may
   * clone repos that are not registered (file:// included), under the
   * development limits of docs/configuration.md. Off in production.
   */
  DRYDOCK_DEV_MODE: z
    .enum(['0', '1', 'true', 'false'])
    .default('0')
    .transform((v) => v === '1' || v === 'true'),
  /**
   * What runs the sandboxes: "docker" (a container per sandbox on this
   * host's Docker engine) or "kubernetes" (a pod per sandbox on this
   * worker's node, through the cluster's API alone: docs/kubernetes.md).
   */
  DRYDOCK_SANDBOX_PROVIDER: z.enum(['docker', 'kubernetes']).default('docker'),
  /** kubernetes: a kubeconfig file; unset: $KUBECONFIG, ~/.kube/config, or the pod's service account. */
  DRYDOCK_K8S_KUBECONFIG: z.string().min(1).optional(),
  /** kubernetes: the namespace of the sandboxes' pods (the worker may create, exec in and delete pods there). */
  DRYDOCK_K8S_NAMESPACE: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'a namespace name (a DNS label)')
    .default('drydock-sandboxes'),
  /** kubernetes: the node this worker runs on, where its sandboxes' pods go. Default: DRYDOCK_HOST_ID. */
  DRYDOCK_K8S_NODE: z.string().min(1).optional(),
  /** kubernetes: the sandbox pods' imagePullPolicy ("Never": images are loaded onto the nodes). */
  DRYDOCK_K8S_IMAGE_PULL_POLICY: z.enum(['Always', 'IfNotPresent', 'Never']).default('IfNotPresent'),
  /**
   * kubernetes: how long a sandbox's pod may take to run, its scheduling and
   * image pull included; then it is deleted and the session fails naming why
   * (at most 8m: a pod that has not run by then is stuck, and the session should say so in minutes).
   */
  DRYDOCK_K8S_START_TIMEOUT: duration
    .default('5m')
    .transform(durationMs)
    .refine((ms) => ms <= 8 * 60_000, 'at most 8m (a pod not running by then is stuck)'),
  /**
   * kubernetes: the registry (and path) the cluster's nodes pull from, where
   * this worker pushes each repo's environment built by the isolated builder
   * on its Docker engine (DOCKER_HOST); pods run it by digest
   * (docs/kubernetes.md). Unset: a repo that declares an environment is refused.
   */
  DRYDOCK_K8S_BUILD_REGISTRY: z
    .string()
    .regex(
      /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?(\/[a-z0-9]+([._-][a-z0-9]+)*)*$/,
      'host[:port][/path], lower case',
    )
    .optional(),
  /** kubernetes: the RuntimeClass of sandbox pods (e.g. one for gVisor); default: the cluster's. */
  DRYDOCK_K8S_RUNTIME_CLASS: z
    .string()
    .regex(/^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$/, 'a RuntimeClass name')
    .optional(),
  /**
   * Docker runtime of sandboxes, e.g. "runsc" for gVisor (a user-space kernel:
   * a kernel exploit in the sandbox meets gVisor, not the host's kernel).
   * Default: the engine's default runtime (runc).
   */
  DRYDOCK_DOCKER_RUNTIME: z
    .string()
    .regex(/^[A-Za-z0-9._-]+$/, 'a runtime name as in `docker info`')
    .optional(),
  /**
   * "false" keeps the sandbox's root filesystem writable (for root only) with
   * /workspace in the container's copy-on-write layer: much faster to start
   * from a snapshot image holding many files, since Docker fills a volume by
   * copying (see docs/security.md for the numbers). Default: read-only.
   */
  DRYDOCK_READONLY_ROOTFS: z
    .enum(['true', 'false'])
    .default('true')
    .transform((v) => v === 'true'),
  /**
   * Host folder of the egress proxies' sockets (one short sub-folder per
   * sandbox, mounted read-only at /run/drydock). Default: <data dir>/egress.
   * Unix socket paths are limited to 107 bytes: keep it short.
   */
  DRYDOCK_EGRESS_DIR: z.string().min(1).optional(),
  /**
   * A PEM file of extra CA certificates (a network that intercepts TLS)
   * trusted by Node.js, npm, corepack, git, curl, pip and OpenSSL in every
   * sandbox and snapshot build (sandbox/ca.ts). Mounted, never put in an image.
   */
  DRYDOCK_EXTRA_CA_CERTS: z.string().min(1).optional(),
  /** Author and committer of the commits drydock pushes (the agent is named in a trailer). */
  DRYDOCK_COMMIT_NAME: z
    .string()
    .trim()
    .min(1)
    .max(200)
    .regex(/^[^<>\n]+$/, 'no "<", ">" or newline')
    .default('drydock'),
  DRYDOCK_COMMIT_EMAIL: z
    .string()
    .trim()
    .regex(/^[^\s<>@]+@[^\s<>@]+$/, 'an email address')
    .default('drydock@localhost'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** `auto`: readable lines on a terminal, JSON otherwise; `json` or `pretty` always. */
  LOG_FORMAT: z.enum(['auto', 'json', 'pretty']).default('auto'),
});

/** TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and how to authenticate there come from platform/temporal-connection.ts. */
export type Config = z.infer<typeof configSchema> &
  TemporalSettings & {
    /**
     * Secrets a session may grant to a step by name: `DRYDOCK_SECRET_<NAME>`
     * becomes `<NAME>` in that step's environment, and only there.
     */
    secrets: Record<string, string>;
  };

const SECRET_PREFIX = 'DRYDOCK_SECRET_';

function secretsOf(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env)
      .filter(([k, v]) => k.startsWith(SECRET_PREFIX) && k.length > SECRET_PREFIX.length && v)
      .map(([k, v]) => [k.slice(SECRET_PREFIX.length), v!]),
  );
}

/** Whether a requester may not approve their own session: DRYDOCK_FORBID_SELF_APPROVAL, else outside development mode. */
export function selfApprovalForbidden(
  config: Pick<Config, 'DRYDOCK_FORBID_SELF_APPROVAL' | 'DRYDOCK_DEV_MODE'>,
): boolean {
  return config.DRYDOCK_FORBID_SELF_APPROVAL ?? !config.DRYDOCK_DEV_MODE;
}

export class ConfigError extends Error {}

/** Parses the environment once; a bad value names the variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = configSchema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid environment: ${problems.join('; ')}`);
  }
  let temporal: TemporalSettings;
  try {
    temporal = loadTemporalSettings(env);
  } catch (err) {
    throw new ConfigError(`invalid environment: ${(err as Error).message}`);
  }
  return { ...parsed.data, ...temporal, secrets: secretsOf(env) };
}

/**
 * The variables the schema reads (besides `DRYDOCK_SECRET_<NAME>`), for
 * checks that deployment files set nothing drydock would silently ignore.
 */
export function configVariables(): string[] {
  return [...Object.keys(configSchema.shape), ...TEMPORAL_VARIABLES];
}
