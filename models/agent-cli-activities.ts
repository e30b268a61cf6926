/**
 * The agent CLI a session runs, present on its sandbox's host: installed
 * into the host's cache once per pinned version (models/agent-clis.ts), never
 * per session, and seen by the sandbox read-only at /opt/drydock-agents.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import { AGENT_CLIS, EXACT_VERSION, sandboxBinary, type AgentCliName } from '../workflows/rules/agent-clis';
import { ensureAgentCli } from './agent-clis';
import { heartbeatProgress } from '../platform/heartbeat';
import type { Logger } from '../platform/log';

/** What installing agent CLIs uses of the worker. */
export interface AgentCliDeps {
  /** The host's cache of installed CLIs (DRYDOCK_AGENTS_DIR; absent: no CLI template runs on this worker). */
  agentClis?: { dir: string };
  /** This worker's host, for the log. */
  hostId: string;
  log: Logger;
}

export function createAgentCliActivities(deps: AgentCliDeps) {
  return {
    /** The CLI's binary as the sandbox sees it; installs the version on this host first when it is missing. */
    async installAgentCli(input: {
      name: AgentCliName;
      version: string;
    }): Promise<{ binary: string; installed: boolean }> {
      if (!deps.agentClis) {
        throw ApplicationFailure.nonRetryable('this worker runs no agent CLIs', ErrorType.ModelNotAllowed);
      }
      if (!(input.name in AGENT_CLIS) || !EXACT_VERSION.test(input.version)) {
        throw ApplicationFailure.nonRetryable(
          `agent CLI ${input.name}@${input.version}: an exact version is required`,
          ErrorType.InvalidSessionInput,
        );
      }
      const lines: string[] = [];
      const { installed } = await ensureAgentCli(deps.agentClis.dir, input.name, input.version, (line) => {
        lines.push(line);
        heartbeatProgress({ progress: lines.slice(-10) });
      });
      if (installed)
        deps.log.info({ cli: input.name, version: input.version, host: deps.hostId }, 'agent CLI installed');
      return {
        binary: sandboxBinary(input.name, input.version, process.arch === 'arm64' ? 'arm64' : 'x64'),
        installed,
      };
    },
  };
}
