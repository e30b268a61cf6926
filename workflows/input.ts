/**
 * The input of `agentSession`: one JSON object, validated with zod. Shared by
 * the workflow, the CLI, the HTTP server and the generated JSON Schema
 * (workflows/session-input.schema.json, for pasting into the Temporal UI).
 * No transforms, so the schema stays representable: durations and sizes are
 * kept as written and converted by the pure functions of units.ts. Workflow
 * code imports only types from here: the activity repoPolicy validates a
 * session's input (see session/workflow.ts).
 */
import { z } from 'zod';
import { ACTIONS } from './api';
import { EXACT_VERSION } from './rules/agent-clis';
import { egressRule } from './rules/egress';
import { githubRepoOf, hasUrlCredentials, REPO_PATH, URL_CREDENTIALS_REFUSED } from './rules/repo-url';
import { durationMs, sizeBytes } from './units';

/** A duration: milliseconds as a number, or a string like "90s", "10m", "24h", "2d". */
export const duration = z.union([
  z.number().int().positive(),
  z.string().regex(/^\d+(ms|s|m|h|d)$/, 'expected a duration like "30s", "10m", "24h" or a number of ms'),
]);

/** Parallel attempts of one task at most (the operator's DRYDOCK_MAX_ATTEMPTS may allow fewer). */
export const MAX_ATTEMPTS = 8;

/** Child sessions of one session at most, and how deep they may go (docs/agents.md, Child sessions). */
export const MAX_CHILDREN = 8;
export const MAX_CHILD_DEPTH = 3;

/** The longest a published session stays open for follow-ups after its last round. */
export const MAX_OPEN_FOR_MS = 30 * 86_400_000;

/** A size in bytes, or a string like "512m", "2g". */
export const size = z.union([
  z.number().int().positive(),
  z.string().regex(/^\d+(k|m|g)$/i, 'expected a size like "512m" or "2g", or a number of bytes'),
]);

// zod runs refinements even when the format check failed: only judge well-formed values.
const wellFormedDuration = (d: unknown) => typeof d === 'number' || /^\d+(ms|s|m|h|d)$/.test(String(d));
const wellFormedSize = (s: unknown) => typeof s === 'number' || /^\d+[kmg]$/i.test(String(s));

/**
 * A duration of at most `max` (written like "24h"): the server's bound, so a
 * session cannot hold a sandbox or a worker slot for years.
 */
export const durationUpTo = (max: string) =>
  duration.refine((d) => !wellFormedDuration(d) || durationMs(d) <= durationMs(max), `at most ${max}`);

/** A size between `min` and `max` (written like "64m", "64g"). */
export const sizeBetween = (min: string, max: string, tooSmall = `at least ${min}`) =>
  size
    .refine((s) => !wellFormedSize(s) || sizeBytes(s) >= sizeBytes(min), tooSmall)
    .refine((s) => !wellFormedSize(s) || sizeBytes(s) <= sizeBytes(max), `at most ${max}`);

/** A git branch name (git check-ref-format's rules). */
const branchName = z
  .string()
  .regex(/^[A-Za-z0-9._/-]+$/, 'letters, digits and . _ / - only')
  .refine(
    (b) => !/(^[/.-])|\/[./]|\.\.|\.lock(\/|$)|[/.]$/.test(b),
    'not a valid branch name (no "..", "//", ".lock", no leading "/", "." or "-", no trailing "/" or ".")',
  );

/** A path inside /workspace: relative, without "..". */
export const workspacePath = z
  .string()
  .min(1)
  .refine((p) => !p.startsWith('/') && !p.split('/').includes('..'), 'must be relative to the repo, without ".."');

export const browserCheck = z.strictObject({
  start: z
    .string()
    .min(1)
    .optional()
    .describe('Shell command that starts the app in the sandbox, e.g. "npm start"; default: the repo\'s app'),
  url: z
    .string()
    .regex(
      /^http:\/\/(localhost|127\.0\.0\.1)(:\d+)?(\/.*)?$/,
      'must be http://localhost:<port>/...: the sandbox has no network',
    )
    .optional()
    .describe("Where the app answers inside the sandbox; default: the repo's app's port and ready path"),
  readyTimeout: durationUpTo('10m')
    .optional()
    .describe("How long the app may take to answer; at most 10m; default: the repo's app's, else 60s"),
  checks: z
    .array(
      z
        .strictObject({
          path: z.string().startsWith('/').default('/'),
          expectText: z.string().min(1).optional(),
          expectSelector: z.string().min(1).optional(),
        })
        .refine(
          (c) => c.expectText !== undefined || c.expectSelector !== undefined,
          'give expectText or expectSelector',
        ),
    )
    .default([]),
  screenshots: z.array(z.string().startsWith('/')).default([]).describe('Pages to screenshot for the reviewer'),
});

const runStep = z.strictObject({
  run: z.string().min(1).describe('Shell command, run with sh -c in /workspace'),
  timeout: durationUpTo('6h').default('10m').describe('At most 6h'),
  children: z
    .boolean()
    .optional()
    .describe('true: the command may start child sessions with drydock-child "<task>" (docs/agents.md)'),
});
const writeStep = z.strictObject({
  write: z.strictObject({ path: workspacePath, content: z.string() }),
});
const patchStep = z.strictObject({
  patch: z.string().min(1).describe('A unified diff, applied with git apply in /workspace'),
});
export const scriptStep = z.union([runStep, writeStep, patchStep]);

/** One to `max` script steps (a follow-up's). */
export const scriptSteps = (max: number) => z.array(scriptStep).min(1).max(max);

/** An agent CLI: a pinned CLI drydock runs for real (workflows/rules/agent-clis.ts), or argv with "{prompt}" as one element. */
export const agentCommand = z
  .union([z.enum(['opencode', 'claude', 'codex']), z.array(z.string().min(1)).min(1)])
  .describe(
    'cli: "claude", "codex" or "opencode" (installed per host, model calls through the worker\'s gateway), or argv with "{prompt}" as one element (passed literally, no shell)',
  );

/** An exact npm version of an agent CLI, e.g. "2.1.332": nothing floats. */
export const agentCliVersion = z
  .string()
  .regex(EXACT_VERSION, 'an exact version like 2.1.332')
  .describe('cli: the version of "claude", "codex" or "opencode"; default the one this drydock pins');

/** The name of a worker secret: the worker's DRYDOCK_SECRET_<NAME> becomes <NAME>. */
export const secretName = z.string().regex(/^[A-Z][A-Z0-9_]*$/, 'a name like MODEL_KEY');

const budget = z
  .strictObject({
    maxTurns: z.number().int().positive().default(50).describe('Model calls in the whole session'),
    maxTokens: z.number().int().positive().optional().describe('Prompt + completion tokens in the whole session'),
    maxCost: z
      .number()
      .positive()
      .optional()
      .describe("US dollars, priced by the worker's DRYDOCK_MODEL_PRICES; a model without a price cannot run"),
    maxWallTime: durationUpTo('24h')
      .default('1h')
      .describe(
        'From the start of the agent phase, feedback rounds included; limits each run of an agent CLI too; at most 24h',
      ),
    onExceeded: z
      .enum(['verify', 'fail'])
      .default('verify')
      .describe('verify: go on to verification and approval with what was done; fail: end the session'),
  })
  .prefault({});

const agent = z
  .strictObject({
    name: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9 ._:/-]{0,59}$/, 'letters, digits, space and . _ : / -, at most 60')
      .optional()
      .describe('Names this agent configuration in the figures; default its kind and model (e.g. "openai gpt-5")'),
    kind: z
      .enum(['script', 'openai', 'cli'])
      .default('script')
      .describe('script: the steps; openai: the built-in tool loop; cli: an agent CLI in the sandbox'),
    steps: z.array(scriptStep).default([]).describe('script: run in order'),
    planSteps: z
      .array(scriptStep)
      .max(20)
      .default([])
      .describe(
        'script, with plan: the steps that write the plan (what they print is the plan); ' +
          'the work steps get the approved plan in $DRYDOCK_PLAN (docs/agents.md)',
      ),
    baseUrl: z
      .string()
      .regex(/^https?:\/\/[^\s]+$/, 'an http(s) URL')
      .optional()
      .describe("openai: the model API's base URL (one the worker lists); default the worker's DRYDOCK_MODEL_BASE_URL"),
    model: z
      .string()
      .min(1)
      .max(200)
      .optional()
      .describe('openai: the model name (required); cli: the model of "claude", "codex" or "opencode"'),
    temperature: z.number().min(0).max(2).optional(),
    maxOutputTokens: z
      .number()
      .int()
      .min(16)
      .max(200_000)
      .default(8192)
      .describe('openai: the limit of one answer (max_tokens), lowered to what the token and cost budgets leave'),
    contextWindow: z
      .number()
      .int()
      .min(4000)
      .max(2_000_000)
      .default(128_000)
      .describe(
        "openai: the model's context window in tokens; older tool outputs are compacted to keep the prompt within 3/4 of it",
      ),
    toolOutputLimit: z
      .number()
      .int()
      .min(1000)
      .max(200_000)
      .default(10_000)
      .describe('openai: characters of a tool result the model sees; the rest is cut, and it is told so'),
    runTimeout: durationUpTo('1h').default('5m').describe('openai: limit of one `run` tool call; at most 1h'),
    continueAsNewEvery: z
      .number()
      .int()
      .min(1)
      .default(20)
      .describe('openai: start a fresh workflow run (same session) after this many turns'),
    command: agentCommand.optional(),
    version: agentCliVersion.optional(),
    egress: z
      .array(egressRule)
      .default([])
      .describe(
        "cli: hosts the CLI may reach through the egress proxy (its model API), within the operator's rules for the repo",
      ),
    secrets: z
      .array(secretName)
      .default([])
      .describe(
        'cli: worker secrets the CLI gets, by name (DRYDOCK_SECRET_<NAME> becomes <NAME>); only those the operator grants the repo',
      ),
    budget,
  })
  .prefault({});

/** The forges drydock publishes to (forge/forge.ts). */
const forgeKind = z.enum(['github', 'gitlab', 'gitea']);

/**
 * Where a webhook-started session came from on its forge: the worker reads
 * the task's context from it (issue, comments, change request, failed run)
 * and reports the session's progress back to it.
 */
export const triggerOrigin = z.strictObject({
  forge: forgeKind.optional().describe('The forge the webhook came from; default: GitHub'),
  repo: z.string().regex(REPO_PATH, 'expected "owner/name"'),
  kind: z.enum(['issue', 'comment', 'check_run', 'workflow_run']),
  issue: z.number().int().positive().optional().describe('The issue or pull request number'),
  pullRequest: z.boolean().default(false).describe('Whether `issue` is a pull request'),
  comment: z.number().int().positive().optional().describe('The /drydock comment'),
  run: z.number().int().positive().optional().describe('The failed check run or workflow run'),
  commit: z
    .string()
    .regex(/^[0-9a-f]{40}$/, 'a commit sha')
    .optional()
    .describe('The commit of the failed run'),
});

/**
 * Where a session started from Slack or Linear reports how it goes (set by
 * drydock serve): a Slack message updated in place at every phase, comments
 * on a Linear issue at its milestones.
 */
export const notifyTargets = z.strictObject({
  slack: z
    .strictObject({
      channel: z.string().regex(/^[A-Z0-9]{1,30}$/, 'a Slack channel id'),
      thread: z
        .string()
        .regex(/^\d{1,12}\.\d{1,8}$/, 'a Slack message ts')
        .optional()
        .describe('The message in whose thread the status goes (an app mention); unset: a new message in the channel'),
    })
    .optional(),
  linear: z
    .strictObject({
      issue: z.string().min(1).max(100).describe('The Linear issue id'),
      identifier: z.string().min(1).max(40).describe('Its key, e.g. ENG-123'),
    })
    .optional(),
});

export const sessionInputSchema = z.strictObject({
  repo: z.strictObject({
    url: z
      .string()
      .min(1)
      .refine((url) => !hasUrlCredentials(url), URL_CREDENTIALS_REFUSED)
      .describe('A registered repo (drydock repo add); in development mode any URL git can clone, file:// included'),
    ref: z.string().min(1).optional().describe("Branch, tag or commit; default: the remote's default branch"),
  }),
  task: z.string().min(1).describe('What the agent should do, in words'),
  requestedBy: z.string().min(1).optional().describe('Who asked for the session (the CLI sets your user name)'),
  agent,
  verify: z
    .strictObject({
      test: z.string().min(1).optional().describe("The repo's test command; its exit code decides"),
      timeout: durationUpTo('6h').default('10m').describe('Of the test command; at most 6h'),
      junit: z
        .array(workspacePath)
        .optional()
        .describe('JUnit XML files the test command writes; default: XML reports it wrote in the usual places'),
      browser: browserCheck.optional(),
      maxRounds: z
        .number()
        .int()
        .min(0)
        .max(10)
        .default(2)
        .describe('openai/cli: times a failed verification goes back to the agent'),
    })
    .prefault({}),
  publish: z
    .strictObject({
      branch: branchName.optional().describe('Default: drydock/<session id>'),
      pullRequest: z
        .union([
          z.boolean(),
          z.strictObject({
            repo: z
              .string()
              .regex(REPO_PATH, 'expected "owner/name"')
              .optional()
              .describe('The repository on its forge; default: from a GitHub repo.url'),
            forge: forgeKind.optional().describe('Its forge; default: by repo.url, else GitHub'),
            base: z.string().min(1).optional().describe("Default: the repository's default branch"),
            draft: z.boolean().default(false),
          }),
        ])
        .default(false)
        .describe('Open (or update) a pull request for the branch after the push'),
      deploy: z.boolean().default(false).describe("Run the worker's configured deploy command after the push"),
      push: z
        .boolean()
        .default(true)
        .describe(
          "false: nothing is published; the change still waits at the push gate for a person's decision, which is recorded (a pilot's evaluation)",
        ),
      openFor: duration
        .default('7d')
        .refine((d) => durationMs(d) <= MAX_OPEN_FOR_MS, 'at most 30d')
        .describe(
          'With a pull request: how long the session waits for a follow-up after its last round (no sandbox meanwhile); it ends sooner when the PR is merged or closed',
        ),
    })
    .prefault({}),
  approval: z
    .strictObject({
      required: z
        .array(z.enum(ACTIONS))
        .default([])
        .describe("Actions that wait for a person, in addition to the server's"),
      approvers: z
        .array(z.string().min(1))
        .default([])
        .describe("Who may approve or reject: a subset of the server's approvers; empty: the server's list, or anyone"),
      forbidSelfApproval: z.boolean().default(false).describe('requestedBy may not approve'),
      separateGates: z
        .boolean()
        .default(false)
        .describe('Approve the push separately, even when approving the pull request would cover it'),
      timeout: durationUpTo('30d').default('24h').describe('How long an approval may wait; at most 30d'),
    })
    .prefault({}),
  acceptance: z
    .strictObject({
      command: z.string().min(1).max(2_000).describe('Shell command in /workspace; exit 0 = accepted'),
      timeout: durationUpTo('1h').default('10m').describe('At most 1h'),
    })
    .optional()
    .describe(
      "A pilot's check of the change, run in the sandbox once it passed verification; recorded, never shown to the agent, " +
        'and it does not change the outcome (docs/pilot.md)',
    ),
  plan: z
    .boolean()
    .default(false)
    .describe(
      "Write a plan first: the agent plans (reading only), the session waits at the plan gate for a person's " +
        "approval (a follow-up amends the plan), then the agent carries out the approved plan; default the repo's (docs/agents.md)",
    ),
  memory: z
    .strictObject({
      use: z.boolean().default(true).describe("Give the agent the repo's approved notes (docs/agents.md, Repo memory)"),
      propose: z
        .boolean()
        .default(true)
        .describe('Keep the notes the agent proposes for the repo, for a maintainer to approve, edit or drop'),
    })
    .prefault({})
    .describe('Repo memory: notes from earlier sessions of the repo, approved by a maintainer'),
  attempts: z
    .union([z.number().int().min(1).max(MAX_ATTEMPTS), z.array(z.strictObject({ agent })).min(1).max(MAX_ATTEMPTS)])
    .optional()
    .describe(
      'Parallel attempts (workflow type agentAttempts): a number of attempts with this agent, or one agent section per attempt; ' +
        "the reviewer picks one to publish (docs/attempts.md). Within the operator's DRYDOCK_MAX_ATTEMPTS",
    ),
  attemptOf: z
    .strictObject({
      session: z.string().min(1).max(100),
      index: z.number().int().min(1).max(MAX_ATTEMPTS),
      count: z.number().int().min(1).max(MAX_ATTEMPTS),
    })
    .optional()
    .describe('Set by agentAttempts on each attempt: its change waits for the pick at its first gate'),
  children: z
    .strictObject({
      max: z
        .number()
        .int()
        .min(0)
        .max(MAX_CHILDREN)
        .default(4)
        .describe(`Child sessions the agent may start (start_child), in the whole session; 0 to ${MAX_CHILDREN}`),
      depth: z
        .number()
        .int()
        .min(1)
        .max(MAX_CHILD_DEPTH)
        .default(1)
        .describe(
          `How deep children may go: 1 = this session's children start none of their own; 1 to ${MAX_CHILD_DEPTH}`,
        ),
    })
    .prefault({})
    .describe(
      "Child sessions the agent starts to split its work: the built-in loop's start_child, an agent CLI's, a script step's drydock-child (docs/agents.md, Child sessions)",
    ),
  childOf: z
    .strictObject({
      session: z.string().min(1).max(200),
      depth: z.number().int().min(1).max(MAX_CHILD_DEPTH),
    })
    .optional()
    .describe(
      'Set by a session on each child it starts: the child never publishes; its change goes back to the parent',
    ),
  drill: z
    .strictObject({
      staleSnapshot: z.boolean().default(false).describe("Start from the oldest of the repo's snapshots on the host"),
    })
    .optional()
    .describe("Faults on purpose (a pilot's): what the session starts from"),
  trigger: triggerOrigin.optional().describe('Set by drydock serve for sessions started by a GitHub webhook'),
  notify: notifyTargets.optional().describe('Set by drydock serve for sessions started from Slack or Linear'),
  limits: z
    .strictObject({
      cpus: z.number().positive().max(16).default(2).describe('CPUs of the sandbox; at most 16'),
      memory: sizeBetween('64m', '64g', 'at least 64m (0 would mean unlimited to Docker)')
        .default('2g')
        .describe('Memory of the sandbox; 64m to 64g'),
      pids: z.number().int().min(16).max(4096).default(512).describe('Processes of the sandbox; 16 to 4096'),
      tmp: sizeBetween('1m', '16g')
        .default('512m')
        .describe('Size of the tmpfs at /tmp (the root filesystem is read-only); counts against memory; 1m to 16g'),
      disk: sizeBetween('64m', '256g')
        .default('10g')
        .describe(
          'Room for what the sandbox writes to /workspace and its home (a filesystem of its own: a write beyond it ' +
            'fails with "No space left on device"); 64m to 256g',
        ),
      wallTime: durationUpTo('24h')
        .default('2h')
        .describe('Provisioning, agent and verification together; at most 24h'),
      network: z.literal('none').default('none'),
      setupEgress: z
        .boolean()
        .default(true)
        .describe(
          "Whether the repo's setup may run in the session (no snapshot yet, or lockfiles changed since it) " +
            'with its registries through the egress proxy; false: such a session fails instead',
        ),
    })
    .prefault({}),
});

export type SessionInput = z.infer<typeof sessionInputSchema>;
export type SessionInputDraft = z.input<typeof sessionInputSchema>;
export type ScriptStep = z.infer<typeof scriptStep>;
export type AgentSettings = SessionInput['agent'];
export type BrowserCheck = z.infer<typeof browserCheck>;
export type TriggerOrigin = z.infer<typeof triggerOrigin>;
export type NotifyTargets = z.infer<typeof notifyTargets>;

export type ParsedInput = { ok: true; input: SessionInput } | { ok: false; problems: string[] };

/** Validates an input; each problem names its field ("repo.url: ..."). */
/** Field rules that span sections. */
const sessionInputChecked = sessionInputSchema.superRefine((input, ctx) => {
  const pr = input.publish.pullRequest;
  if (pr && !(typeof pr === 'object' && pr.repo) && !githubRepoOf(input.repo.url)) {
    ctx.addIssue({
      code: 'custom',
      path: ['publish', 'pullRequest', 'repo'],
      message: 'required ("owner/name") when repo.url is not a GitHub URL',
    });
  }
  const { push, pullRequest, deploy } = input.publish;
  if (!push && (pullRequest || deploy)) {
    const field = pullRequest ? 'pullRequest' : 'deploy';
    ctx.addIssue({
      code: 'custom',
      path: ['publish', field],
      message: 'needs publish.push (nothing is published without it)',
    });
  }
  const { kind, steps, model, command, egress, version } = input.agent;
  const misplaced = (field: string, allowed: string) =>
    ctx.addIssue({ code: 'custom', path: ['agent', field], message: `only for agent.kind ${allowed}` });
  if (kind === 'openai' && !model) {
    ctx.addIssue({ code: 'custom', path: ['agent', 'model'], message: 'required for agent.kind "openai"' });
  }
  if (kind === 'cli' && !command) {
    ctx.addIssue({ code: 'custom', path: ['agent', 'command'], message: 'required for agent.kind "cli"' });
  }
  if (kind !== 'script' && steps.length) misplaced('steps', '"script"');
  if (kind !== 'script' && input.agent.planSteps.length) misplaced('planSteps', '"script"');
  if (input.plan && kind === 'script' && !input.agent.planSteps.length) {
    ctx.addIssue({
      code: 'custom',
      path: ['agent', 'planSteps'],
      message: 'a script agent that plans first needs the steps that write its plan',
    });
  }
  if (input.plan && input.attempts !== undefined && input.attempts !== 1) {
    ctx.addIssue({ code: 'custom', path: ['plan'], message: 'not with parallel attempts (each would plan alone)' });
  }
  if (kind !== 'cli' && command) misplaced('command', '"cli"');
  const template = kind === 'cli' && typeof command === 'string';
  if (version && !template) misplaced('version', '"cli" with "claude", "codex" or "opencode"');
  if (kind === 'cli' && model && !template)
    misplaced('model', '"openai", or "cli" with "claude", "codex" or "opencode"');
  if (kind !== 'cli' && egress.length) misplaced('egress', '"cli"');
  if (kind !== 'cli' && input.agent.secrets.length) misplaced('secrets', '"cli"');
  if (Array.isArray(command) && !command.includes('{prompt}')) {
    ctx.addIssue({ code: 'custom', path: ['agent', 'command'], message: 'give "{prompt}" as one element' });
  }
});

export function parseSessionInput(raw: unknown): ParsedInput {
  const parsed = sessionInputChecked.safeParse(raw);
  if (parsed.success) return { ok: true, input: parsed.data };
  return { ok: false, problems: problemsOf(parsed.error) };
}

/** Each issue of a failed parse as one line that names its field ("repo.url: ..."). */
export function problemsOf(error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    const field = issue.path.length ? issue.path.join('.') : '(input)';
    const keys = issue.code === 'unrecognized_keys' ? ` (${issue.keys.join(', ')})` : '';
    return `${field}: ${issue.message}${keys}`;
  });
}

/**
 * What a webhook-started session runs: the agent and its budget, the checks,
 * and optionally publishing and approval. The same schemas as the session
 * input; the webhook adds the repo, the task and the pull request.
 */
export const triggerSessionSchema = z
  .strictObject({
    agent: sessionInputSchema.shape.agent.unwrap(),
    verify: sessionInputSchema.shape.verify,
    publish: sessionInputSchema.shape.publish,
    approval: sessionInputSchema.shape.approval,
  })
  .superRefine((settings, ctx) => {
    // The rules that span sections, on a session these settings would start.
    const probe = { repo: { url: 'https://github.com/o/r' }, task: 'probe', ...settings };
    const parsed = sessionInputChecked.safeParse(probe);
    for (const issue of parsed.success ? [] : parsed.error.issues) ctx.addIssue({ ...issue, code: 'custom' });
  });
export type TriggerSession = z.infer<typeof triggerSessionSchema>;
