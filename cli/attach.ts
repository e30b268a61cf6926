/** `drydock attach` and `drydock detach`: a person's shell in a session's live sandbox (sandbox/attach.ts). */
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import type { Config } from '../platform/config';
import { AttachRefused } from '../platform/sessions';
import { connectClient } from '../platform/temporal-connection';

const seconds = (ms: number) => `${Math.round(ms / 1000)}s`;

export function addAttachCommands(program: Command, config: Config): void {
  program
    .command('attach <session>')
    .description(
      "Open a shell in a session's live sandbox (its user, in /workspace); the agent waits until you exit, " +
        'then the session commits and verifies your edits as part of its change',
    )
    .option('--by <name>', 'who attaches (default: DRYDOCK_USER or the OS user); an approver or the requester')
    .option(
      '--server <url>',
      'through drydock serve at this URL (with DRYDOCK_API_TOKEN; you attach as its owner), for a sandbox on another machine',
    )
    .action(async (id: string, opts) => {
      // Loaded by the command that needs it: every CLI start would load the sandbox providers.
      const { reachableSandbox, shellOnThisHost, shellThroughServer, whileAttached, hostProvider } =
        await import('../sandbox');
      const io = { stdin: process.stdin, stdout: process.stdout };
      if (opts.server) {
        const token = process.env.DRYDOCK_API_TOKEN;
        if (!token) throw new AttachRefused('--server needs your API token in DRYDOCK_API_TOKEN');
        await shellThroughServer(opts.server, token, id, io);
        process.stderr.write(`drydock: detached from ${id}; the session goes on to verify your edits\n`);
        process.exit(0);
      }
      const by = opts.by ?? config.DRYDOCK_USER ?? userInfo().username;
      const client = await connectClient(config);
      const sandboxes = await hostProvider(config);
      const name = await reachableSandbox(client, sandboxes, id);
      // A refusal comes at once; an answer that takes longer waits for the step under way.
      const waiting = setTimeout(
        () => process.stderr.write(`drydock: attaching to ${id} once the agent's step under way has ended...\n`),
        1_000,
      );
      // The terminal going away ends the shell, and so detaches: the session must not stay paused.
      const gone = new AbortController();
      for (const signal of ['SIGHUP', 'SIGTERM'] as const) process.once(signal, () => gone.abort());
      const detached = await whileAttached(client, id, by, async () => {
        clearTimeout(waiting);
        process.stderr.write(`drydock: attached to ${id} (${name}) as ${by}; exit the shell to detach\n`);
        await shellOnThisHost(sandboxes, name, io, gone.signal);
      }).finally(() => clearTimeout(waiting));
      process.stderr.write(
        `drydock: detached from ${id} after ${seconds(detached.durationMs)}; the session goes on to verify your edits\n`,
      );
      process.exit(0);
    });

  program
    .command('detach <session>')
    .description('End an attach whose shell is gone (its terminal closed): the session goes on')
    .option('--by <name>', 'who detaches (default: DRYDOCK_USER or the OS user)')
    .action(async (id: string, opts) => {
      const { requestDetach } = await import('../sandbox');
      const by = opts.by ?? config.DRYDOCK_USER ?? userInfo().username;
      const detached = await requestDetach(await connectClient(config), id, by);
      console.log(`detached ${detached.attachedBy} from ${id} after ${seconds(detached.durationMs)}`);
    });
}
