/**
 * The drydock command. Errors are one line on stderr and a non-zero exit.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { isSafeSessionId } from '../store/artifacts';
import { loadConfig } from '../platform/config';
import { createLogger } from '../platform/log';
import { sessionLink } from '../platform/temporal';
import { connectClient, connectWorker } from '../platform/temporal-connection';
import { addAttachCommands } from './attach';
import { addAuditCommands } from './audit';
import { addNotesCommands } from './notes';
import { addPilotCommands, describeAttempts } from './pilot';
import { addIdentityCommands, callServer, storedLogin } from './identity';
import { cliDecisionReview, printDiff, recordCliView } from './review';
import { stepsFromText } from '../review/line-comments';
import { consoleUrl } from '../workers/http';
import { demoInput, makeDemoRepo } from './demo';
import { AttachRefused, FollowupRefused, sendFollowup, startSession } from '../platform/sessions';
import { cancel as cancelSession, list, logs, printStatus, waitForPhase, watch } from './sessions';
import {
  GATED_ACTIONS,
  ATTEMPTS_WORKFLOW_TYPE,
  decide,
  RUNNING_PHASES,
  OUTCOMES,
  status,
  WORKFLOW_TYPE,
  type DecideInput,
  type SessionStatus,
} from '../workflows/api';
import { attemptsOf, workflowType } from '../platform/attempts';
import { parseSessionInput, type SessionInputDraft } from '../workflows/input';

/** The repo and snapshot commands' module, loaded by those commands: it loads the sandbox room. */
const snapshots = () => import('./snapshots');

class UsageError extends Error {}

const PAST = { approve: 'approved', reject: 'rejected' } as const;

function fail(message: string): never {
  process.stderr.write(`drydock: ${message.replace(/\s+/g, ' ').trim()}\n`);
  process.exit(1);
}

const config = (() => {
  try {
    return loadConfig();
  } catch (err) {
    return fail((err as Error).message);
  }
})();
const program = new Command('drydock')
  .description('Background coding agents as durable Temporal workflows, in disposable Docker sandboxes')
  .configureOutput({ outputError: (text, write) => write(text) });

/** A session id names its artifact folder: letters, digits, ".", "_", "-", and not "." or "..". */
function sessionIdArg(id: string): string {
  if (!isSafeSessionId(id))
    throw new InvalidArgumentError('letters, digits, ".", "_" and "-" (1 to 100), not "." or ".."');
  return id;
}

program
  .command('up')
  .description('Run the whole dev stack: Temporal dev server (unless one answers), base image, worker')
  .action(async () => {
    const { runDevStack } = await import('../workers/dev-stack');
    await runDevStack(config, createLogger(config.LOG_LEVEL, config.LOG_FORMAT));
  });

program
  .command('worker')
  .description(`Run a worker on the task queue (${config.DRYDOCK_TASK_QUEUE}) and this host's queue`)
  .action(async () => {
    const { createWorker, drainOnSignals, logUnhandledRejections } = await import('../workers/worker');
    const { installTemporalRuntime } = await import('../workers/telemetry');
    const log = createLogger(config.LOG_LEVEL, config.LOG_FORMAT);
    const sdkMetricsUrl = await installTemporalRuntime(log, config);
    logUnhandledRejections(log);
    const connection = await connectWorker(config);
    const worker = await createWorker({ config, connection, log, sdkMetricsUrl });
    drainOnSignals(worker, config, log);
    await worker.run();
    await connection.close();
    log.info('worker stopped');
  });

program
  .command('serve')
  .description(
    `HTTP on ${config.DRYDOCK_HTTP_HOST}:${config.DRYDOCK_HTTP_PORT}: GitHub and CI webhooks, the API, the review console`,
  )
  .action(async () => {
    const { startServer } = await import('../workers/serve');
    const log = createLogger(config.LOG_LEVEL, config.LOG_FORMAT);
    const client = await connectClient(config);
    const server = await startServer({ config, client, log });
    console.error(`drydock serve: review console and API on ${server.url}`);
    await new Promise((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await server.close();
    await client.connection.close();
  });

program
  .command('demo')
  .description('Make a sample repo with a failing test and run a session that fixes it, up to the approval')
  .option('--id <id>', 'session id (default: demo-<time>-<random>)', sessionIdArg)
  .option('--json', 'print {sessionId, phase, console} as JSON')
  .action(async (opts) => {
    const say = (line: string) => opts.json || console.error(line);
    const client = await connectClient(config);
    const sessionId: string = opts.id ?? newSessionId().replace(/^session-/, 'demo-');
    const repo = await makeDemoRepo(path.join(config.DRYDOCK_DATA_DIR, 'demo'));
    say(`sample repo with a failing test: ${repo.url}`);
    await startSession(client, demoInput(repo.url, config.DRYDOCK_USER ?? userInfo().username), {
      sessionId,
      taskQueue: config.DRYDOCK_TASK_QUEUE,
    });
    say(`session ${sessionId} started; the scripted agent fixes the bug, then the tests and a browser check run`);
    const reached = await waitForPhase(client, sessionId, 'awaiting_approval', say);
    const link = `${consoleUrl(config)}/sessions/${encodeURIComponent(sessionId)}`;
    if (opts.json) console.log(JSON.stringify({ sessionId, phase: reached.phase, console: link }));
    if (reached.phase !== 'awaiting_approval') {
      say(`the demo session ended ${reached.phase}: ${reached.error ?? ''}`);
      process.exitCode = 1;
      return;
    }
    say(
      [
        '',
        `The session waits for your approval of the push. Review it in the console:`,
        `  ${link}`,
        `(sign in with single sign-on, or a personal token: the file ${path.join(config.DRYDOCK_DATA_DIR, 'dev-token')} that 'drydock up' made)`,
        `or approve here: bin/drydock approve ${sessionId}`,
        `Temporal UI: ${sessionLink(config, sessionId)}`,
      ].join('\n'),
    );
  });

const collect = (value: string, previous: string[] = []) => [...previous, value];

program
  .command('run')
  .description('Start a session, follow its phases live, and say how to approve it')
  .option('--repo <repo>', 'a registered repo: owner/name or its URL (any URL in development mode, file:// included)')
  .option('--ref <ref>', "branch, tag or commit (default: the remote's default branch)")
  .option('--task <text>', 'what the agent should do')
  .option('--step <command>', 'a scripted agent step (shell); repeatable', collect)
  .option('--model <name>', 'use the built-in agent loop (agent.kind openai) with this model')
  .option('--base-url <url>', "the model's chat-completions base URL (default: the worker's)")
  .addOption(
    new Option(
      '--agent-cli <name>',
      'run Claude Code, Codex or opencode (agent.kind cli; --model picks its model)',
    ).choices(['opencode', 'claude', 'codex']),
  )
  .option('--test <command>', 'verification command; its exit code decides')
  .option('--approver <name>', "who may approve; repeatable (a subset of the server's approvers)", collect)
  .option('--pr', 'open a pull request for the branch after the push')
  .option('--pr-repo <owner/name>', 'GitHub repository of the pull request (default: from --repo)')
  .option('--attempts <n>', 'parallel attempts with this agent; the reviewer picks one (drydock pick)', (v) => {
    if (!/^[1-9]\d*$/.test(v)) throw new InvalidArgumentError('a positive number');
    return Number(v);
  })
  .option('--input <file>', "a whole session input as JSON ('-' for stdin); flags override its fields")
  .option('--id <id>', 'session id (default: session-<time>-<random>)', sessionIdArg)
  .option('--detach', 'print the session id and return at once')
  .option('--json', 'print the final status as JSON')
  .action(async (opts) => {
    if (opts.repo) opts.repo = await (await snapshots()).resolveRepo(config, opts.repo);
    const input = await buildInput(opts);
    const client = await connectClient(config);
    const sessionId = opts.id ?? newSessionId();
    await startSession(client, input, { sessionId, taskQueue: config.DRYDOCK_TASK_QUEUE });
    if (input.attempts !== undefined && input.attempts !== 1 && !opts.json) {
      console.log(
        `${sessionId}: parallel attempts; side by side: bin/drydock pick ${sessionId}; pick: bin/drydock pick ${sessionId} <n>`,
      );
      return;
    }
    if (opts.detach) {
      console.log(opts.json ? JSON.stringify({ sessionId }) : sessionId);
      return;
    }
    if (!opts.json) console.error(`session ${sessionId} started: ${sessionLink(config, sessionId)}`);
    process.exitCode = await watch(client, sessionId, { json: !!opts.json, config });
  });

program
  .command('watch <session>')
  .description('Follow a session live until it ends')
  .option('--json', 'print the final status as JSON')
  .action(async (id: string, opts) => {
    process.exitCode = await watch(await connectClient(config), id, { json: !!opts.json, config });
  });

const whoAmI = () => config.DRYDOCK_USER ?? userInfo().username;

program
  .command('status <session>')
  .description("Show a session's phase, timeline, sandbox, verification and pending approval")
  .option('--json', 'machine-readable output')
  .action(async (id: string, opts) => {
    const client = await connectClient(config);
    if ((await workflowType(client, id).catch(() => WORKFLOW_TYPE)) === ATTEMPTS_WORKFLOW_TYPE) {
      const attempts = await attemptsOf(client, id);
      return console.log(opts.json ? JSON.stringify(attempts, null, 2) : describeAttempts(attempts));
    }
    const shown = await printStatus(client, id, !!opts.json);
    await recordCliView(config, shown, whoAmI());
  });

program
  .command('diff <session>')
  .description("Print a session's change (the console's diff), or with --since what changed after an earlier round")
  .option('--since <round>', 'only what changed since this round (an interdiff)', (v) => {
    if (!/^[1-9]\d*$/.test(v)) throw new InvalidArgumentError('a round number');
    return Number(v);
  })
  .action(async (id: string, opts) => {
    process.exitCode = await printDiff(await connectClient(config), config, id, {
      since: opts.since,
      reviewer: whoAmI(),
    });
  });

/**
 * An approval names the change that was reviewed (a follow-up or an attach
 * could swap the pending one first): without --change, the pending change
 * and how to approve exactly it.
 */
function unnamedChange(id: string, pending: NonNullable<SessionStatus['pendingApproval']>): UsageError {
  const { branch, commit, diffstat } = pending.evidence;
  return new UsageError(
    [
      `name the change you reviewed: ${pending.action} of ${commit.slice(0, 12)} on ${branch}`,
      diffstat,
      `approve it: drydock approve ${id} --change ${pending.change} (drydock diff ${id} shows it)`,
    ].join('\n'),
  );
}

for (const decision of ['approve', 'reject'] as const) {
  program
    .command(`${decision} <session>`)
    .description(`${decision === 'approve' ? 'Approve' : 'Reject'} the pending action of a session`)
    .addOption(
      new Option('--action <action>', 'the irreversible action (default: the one pending)').choices([...GATED_ACTIONS]),
    )
    .option('--change <hash>', 'the change you reviewed: its whole hash (64 hex), as status shows it')
    .option(
      '--by <name>',
      'who decides, on Temporal directly (default: your drydock login, else DRYDOCK_USER or the OS user)',
    )
    .option('--comment <text>', 'a note kept with the decision')
    .option('--json', 'machine-readable output')
    .action(async (id: string, opts) => {
      const login = opts.by ? undefined : await storedLogin();
      if (login) {
        // Logged in: the server decides who you are.
        const body = { decision, action: opts.action, change: opts.change, comment: opts.comment };
        const result = await callServer(login, 'POST', `/api/sessions/${encodeURIComponent(id)}/decide`, body);
        console.log(opts.json ? JSON.stringify(result) : `${PAST[decision]} ${result.action} of ${id} as ${result.by}`);
        return;
      }
      const client = await connectClient(config);
      const current = await client.workflow.getHandle(id).query(status);
      const action = opts.action ?? current.pendingApproval?.action;
      if (!action) throw new UsageError(`${id} is not waiting for an approval (phase: ${current.phase})`);
      if (decision === 'approve' && !opts.change && current.pendingApproval) {
        throw unnamedChange(id, current.pendingApproval);
      }
      const by = opts.by ?? whoAmI();
      // Counted from this person's `status` or `diff` view of the change on display; none: unmeasured.
      const change = current.pendingApproval?.change;
      const review = change ? await cliDecisionReview(config, { sessionId: id, change, reviewer: by }) : undefined;
      const input: DecideInput = {
        decision,
        action,
        by,
        ...(opts.comment ? { comment: opts.comment } : {}),
        ...(opts.change ? { change: opts.change } : {}),
        ...(review ? { review } : {}),
      };
      const result = await client.workflow.getHandle(id).executeUpdate(decide, { args: [input] });
      console.log(opts.json ? JSON.stringify(result) : `${PAST[decision]} ${result.action} of ${id} as ${result.by}`);
    });
}

program
  .command('followup <session> [text]')
  .description('Ask a session for more on its change: a new round in its sandbox, verified and approved again')
  .option('--steps <json>', 'for a script agent: the steps to run, as a JSON array (text is one shell command)')
  .option('--by <name>', 'who asks (default: DRYDOCK_USER or the OS user); an approver or the requester')
  .option('--json', 'machine-readable output')
  .action(async (id: string, text: string | undefined, opts) => {
    if ((text === undefined) === (opts.steps === undefined))
      throw new UsageError('give the follow-up text, or --steps');
    let steps: unknown[] | undefined;
    if (opts.steps !== undefined) {
      try {
        steps = JSON.parse(opts.steps);
      } catch (err) {
        throw new UsageError(`--steps is not JSON: ${(err as Error).message}`);
      }
    }
    const login = opts.by ? undefined : await storedLogin();
    if (login) {
      const result = await callServer(
        login,
        'POST',
        `/api/sessions/${encodeURIComponent(id)}/followups`,
        text ? { text } : { steps },
      );
      console.log(opts.json ? JSON.stringify(result) : `follow-up for round ${result.round} of ${id} sent`);
      return;
    }
    const by = opts.by ?? config.DRYDOCK_USER ?? userInfo().username;
    const client = await connectClient(config);
    // A script agent takes steps: plain text is its shell command (or JSON steps), as in the console.
    if (
      text !== undefined &&
      ((await client.workflow.getHandle(id).query(status)).agent?.kind ?? 'script') === 'script'
    ) {
      steps = stepsFromText(text);
      text = undefined;
    }
    const result = await sendFollowup(client, id, { by, ...(text ? { text } : { steps }) });
    console.log(opts.json ? JSON.stringify(result) : `follow-up for round ${result.round} of ${id} sent as ${by}`);
  });

program
  .command('cancel <session>')
  .description('Cancel a session; its sandbox is torn down')
  .option('--json', 'machine-readable output')
  .action(async (id: string, opts) => cancelSession(await connectClient(config), id, !!opts.json));

program
  .command('list')
  .description('List sessions, newest first')
  .addOption(new Option('--phase <phase>', 'only sessions in this phase').choices([...RUNNING_PHASES, ...OUTCOMES]))
  .option('--repo <repo>', 'only sessions of this repo (its registered owner/name, or its URL)')
  .option('--limit <n>', 'at most this many', '20')
  .option('--json', 'machine-readable output')
  .action(async (opts) => {
    const repo = opts.repo && (await (await snapshots()).resolveRepo(config, opts.repo));
    await list(await connectClient(config), { phase: opts.phase, repo, limit: Number(opts.limit), json: !!opts.json });
  });

program
  .command('logs <session>')
  .description("Whole output of a session's steps (from this machine's artifact store, else the last lines)")
  .option('--step <name>', 'only steps whose name starts with this (e.g. "verify", "step 2")')
  .option('--json', 'machine-readable output')
  .action(async (id: string, opts) => {
    process.exitCode = await logs(await connectClient(config), id, {
      step: opts.step,
      json: !!opts.json,
      artifactsDir: path.join(config.DRYDOCK_DATA_DIR, 'artifacts'),
    });
  });

addAttachCommands(program, config);
addAuditCommands(program, config, (message) => new UsageError(message));
addPilotCommands(program, config, whoAmI);
addNotesCommands(program, config, whoAmI, (message) => new UsageError(message));
addIdentityCommands(program, config, (message) => new UsageError(message));

const repoCommand = program
  .command('repo')
  .description('The repo registry: the repos drydock works on, the limits of each, and their snapshots');

repoCommand
  .command('add <url>')
  .description(
    "Register a repo with the operator's limits; a Temporal Schedule refreshes its snapshot (clone + setup) in the background",
  )
  .option(
    '--setup <command>',
    'setup run in /workspace, e.g. "npm ci && npm run build" (default: the repo\'s own, else inferred from its lockfiles)',
  )
  .option('--ref <branch>', "branch the snapshot is built from (default: the remote's default branch)")
  .option('--every <duration>', 'how often the snapshot is rebuilt', '30m')
  .option('--keep <n>', 'ready snapshots kept per host (older ones no sandbox uses are removed)', '3')
  .option('--timeout <duration>', 'how long setup may run', '30m')
  .option(
    '--allow <host[:port]>',
    "what its sandboxes may reach through the egress proxy (setup, and an agent CLI's model API); repeatable (default: the registries its lockfiles need, plus registry.npmjs.org with --setup)",
    collect,
  )
  .option(
    '--allow-registry <host[:port]>',
    'an image registry its services and environment may be pulled from at a snapshot build; repeatable',
    collect,
  )
  .option('--name <owner/name>', 'how webhooks and the API name it (default: from the URL)')
  .option('--secret <NAME>', 'a worker secret (DRYDOCK_SECRET_<NAME>) its sessions may be granted; repeatable', collect)
  .option('--approver <name>', "who may approve its sessions' actions; repeatable (default: the server's)", collect)
  .option(
    '--webhook-secret <NAME>',
    "its own webhook secret (serve's DRYDOCK_SECRET_<NAME>); its forge's deliveries must be signed with it; repeatable, current first (default: the forge's)",
    collect,
  )
  .option('--max-cpus <n>', 'most CPUs a session may have')
  .option('--max-memory <size>', 'most memory a session may have, e.g. "4g"')
  .option('--max-pids <n>', 'most processes a session may have')
  .option('--max-tmp <size>', 'largest /tmp a session may have')
  .option('--max-wall-time <duration>', 'longest a session may run, e.g. "2h"')
  .option('--max-disk <size>', 'most disk a session may use')
  .option('--pool <n>', 'idle sandboxes each host keeps ready from its newest snapshot, 0 to 16 (default: 0)')
  .option(
    '--environment <kind>',
    "what its sandboxes run in, over the repo's own choice: devcontainer, dockerfile, base or image:<ref> (default: the repo's)",
  )
  .option(
    '--mcp <file>',
    'its MCP servers: a JSON or YAML list of {name, url or stdio: {image, command}, headers, tools, writes, maxCalls} (docs/mcp.md); default: none',
  )
  .option(
    '--ignore-devcontainer',
    "never read the repo's dev container (a Dockerfile its .drydock/config.yaml names still counts)",
  )
  .option('--json', 'machine-readable output')
  .action(async (url: string, opts) => {
    const { addRepo, describeLockfileEgress } = await snapshots();
    const added = await addRepo(await connectClient(config), config, url, opts);
    const { registration, scheduleIds, inferred } = added;
    const hosts = scheduleIds.length
      ? `each host (${scheduleIds.length} now) refreshes its snapshot every ${opts.every}`
      : 'no worker has started yet: each refreshes its snapshot once it does';
    console.log(
      opts.json
        ? JSON.stringify({ ...registration, scheduleIds })
        : `registered ${registration.name} (${url}): ${hosts}; build one now with: bin/drydock snapshot build ${url}`,
    );
    if (!opts.json && inferred) {
      console.log(`setup inferred from the lockfiles (give --setup to choose another):\n  ${inferred.join('\n  ')}`);
      if (!opts.allow) console.log(`egress for setup: ${registration.egress.map((r) => r.host).join(', ')}`);
    }
    if (!opts.json && added.lockfileEgress)
      console.log(describeLockfileEgress(added.lockfileEgress, registration.egress));
  });

repoCommand
  .command('remove <repo>')
  .description('Unregister a repo (URL or owner/name): its limits and settings, and its refresh schedule on every host')
  .option('--json', 'machine-readable output')
  .action(async (repo: string, opts) => {
    const { removeRepo } = await snapshots();
    const removed = await removeRepo(await connectClient(config), config, repo);
    const schedules = removed.scheduleIds.length
      ? `its refresh schedules (${removed.scheduleIds.join(', ')})`
      : 'no refresh schedule (none existed)';
    console.log(
      opts.json
        ? JSON.stringify(removed)
        : `removed ${removed.name} (${removed.repo}): its registration (limits, setup, environment, pool) and ${schedules}; ` +
            'its snapshot history stays in drydock snapshot list, its idle pool sandboxes go at the next reaper run',
    );
  });

repoCommand
  .command('list')
  .description('Registered repos: their limits, setup and newest snapshot')
  .option('--json', 'machine-readable output')
  .action(async (opts) => (await snapshots()).listRepos(config, !!opts.json));

const snapshotCommand = program.command('snapshot').description('Prepared images of registered repos');

snapshotCommand
  .command('build <repo>')
  .description(
    "Build a repo's snapshot now (its URL or registered owner/name) and wait for it (the previous one serves until it is ready)",
  )
  .option('--detach', 'print the build id and return at once')
  .option('--json', 'machine-readable output')
  .action(async (repo: string, opts) => {
    const { buildSnapshot } = await snapshots();
    process.exitCode = await buildSnapshot(await connectClient(config), config, repo, {
      detach: !!opts.detach,
      json: !!opts.json,
    });
  });

snapshotCommand
  .command('list [repo]')
  .description('Snapshot builds, newest first: ready, failed (and why), removed')
  .option('--json', 'machine-readable output')
  .action(async (repo: string | undefined, opts) => (await snapshots()).listSnapshots(config, repo, !!opts.json));

program
  .command('images')
  .description("drydock's own service images (drydock/postgres:17, drydock/redis:8): see docs/services.md")
  .command('build [names...]')
  .description('Build the service images on this host (all without names), again only when their recipe changed')
  .action(async (names: string[]) => {
    const { buildServiceImages } = await import('../sandbox-images/service-images');
    for (const tag of await buildServiceImages(names ?? [])) console.log(tag);
  });

async function buildInput(opts: Record<string, unknown>): Promise<SessionInputDraft> {
  let input: Record<string, any> = {};
  if (typeof opts.input === 'string') {
    const text = opts.input === '-' ? await readStdin() : await readFile(opts.input, 'utf8');
    try {
      input = JSON.parse(text);
    } catch (err) {
      throw new UsageError(`--input: not valid JSON (${(err as Error).message})`);
    }
  }
  if (opts.repo) input.repo = { ...input.repo, url: opts.repo };
  if (opts.ref) input.repo = { ...input.repo, ref: opts.ref };
  if (opts.task) input.task = opts.task;
  if (Array.isArray(opts.step)) {
    input.agent = { ...input.agent, kind: 'script', steps: opts.step.map((run: string) => ({ run })) };
  }
  if (opts.model) {
    input.agent = {
      ...input.agent,
      kind: 'openai',
      model: opts.model,
      ...(opts.baseUrl ? { baseUrl: opts.baseUrl } : {}),
    };
  }
  if (opts.agentCli) input.agent = { ...input.agent, kind: 'cli', command: opts.agentCli };
  if (opts.test) input.verify = { ...input.verify, test: opts.test };
  if (opts.attempts) input.attempts = opts.attempts;
  if (Array.isArray(opts.approver)) input.approval = { ...input.approval, approvers: opts.approver };
  if (opts.prRepo) input.publish = { ...input.publish, pullRequest: { repo: opts.prRepo } };
  else if (opts.pr) input.publish = { ...input.publish, pullRequest: true };
  input.requestedBy ??= config.DRYDOCK_USER ?? userInfo().username;
  // Check here too, so a mistake is reported before anything starts.
  const parsed = parseSessionInput(input);
  if (!parsed.ok) throw new UsageError(`invalid session input: ${parsed.problems.join('; ')}`);
  return input as SessionInputDraft;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function newSessionId(): string {
  const time = new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `session-${time}-${randomBytes(3).toString('hex')}`;
}

/** One line for any error: the update's refusal reason, Temporal's message, or ours. */
function explain(err: unknown): string {
  if (err instanceof WorkflowUpdateFailedError) return `refused: ${err.cause?.message ?? err.message}`;
  if (err instanceof FollowupRefused || err instanceof AttachRefused) return `refused: ${err.message}`;
  const e = err as Error & { code?: number; details?: string };
  if (e?.name === 'WorkflowNotFoundError') return e.message;
  if (e?.code === 14 || /Failed to connect/.test(e?.message ?? '')) {
    return `cannot reach Temporal at ${config.TEMPORAL_ADDRESS} (is 'npm start' running?)`;
  }
  return withCauses(err);
}

/** An error's message and its causes' (a ServiceError says "Failed to start Workflow"; the server's words are its cause's). */
function withCauses(err: unknown): string {
  const parts: string[] = [];
  for (let e = err; e instanceof Error; e = e.cause) parts.push(e.message);
  return parts.length ? parts.join(': ') : String(err);
}

program.parseAsync(process.argv).catch((err: unknown) => fail(explain(err)));
