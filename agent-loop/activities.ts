/**
 * The built-in agent loop's activities (host queue: they work in the
 * session's sandbox): start the conversation, add drydock's message, one
 * model call (prompt.ts, model-calls.ts), one tool call (tools.ts), a child
 * session's call and answer (children.ts). The
 * conversation lives in the artifact store (conversation.ts).
 */
import type { ModelSettings } from '../models/llm';
import type { Redactor } from '../platform/scrub';
import type { ArtifactStore } from '../store/artifacts';
import type { AuditTrail } from '../store/audit';
import { permanent, type CheckpointStore, sandboxOf, type SandboxProvider } from '../sandbox';
import type { ModelCallInput, ModelCallResult, StartModelAgentInput, ToolCallInput, ToolCallRecord } from './contract';
import { writeMessage } from './conversation';
import { callModel, giveUpAfterAttempts } from './model-calls';
import { MAX_INSTRUCTIONS, READ_INSTRUCTIONS, systemPrompt } from './prompt';
import { createChildActivities } from './children';
import { runToolCall } from './tools';

/** What the built-in loop needs: the model settings, the sandbox for its tools, its stores. */
export interface AgentLoopDeps {
  /** Model endpoints, keys and prices (keys never leave the worker). */
  models: ModelSettings;
  /** The sandboxes its tools run in. */
  sandboxes: SandboxProvider;
  /** Where the conversation, the answers and the transcript are kept. */
  artifacts: ArtifactStore;
  /** Every model and tool call is recorded there. */
  audit: AuditTrail;
  /** A tool call ends with a checkpoint of the working tree. */
  checkpoints: CheckpointStore;
  /** Tool output goes to the model and the history scrubbed of the worker's secrets. */
  redactor: Redactor;
  /** The worker's secrets (DRYDOCK_SECRET_<NAME>): a repo's MCP servers' headers name some of them. */
  secrets: Record<string, string>;
}

export function createAgentLoopActivities(deps: AgentLoopDeps) {
  const { sandboxes, artifacts } = deps;
  return {
    ...createChildActivities(deps),

    /** Writes the first two messages (system prompt with the repo's AGENTS.md, the task). */
    async startModelAgent(input: StartModelAgentInput): Promise<{ messageCount: number; instructions: boolean }> {
      const found = await sandboxOf(sandboxes, input.sandbox)
        .commands.script(READ_INSTRUCTIONS, [String(MAX_INSTRUCTIONS)])
        .catch(permanent);
      const instructions = found.exitCode === 0 ? found.stdout.toString() : undefined;
      await writeMessage(artifacts, input.sessionId, 0, {
        role: 'system',
        content: systemPrompt({
          instructions,
          verifyCommand: input.verifyCommand,
          notes: input.notes,
          propose: input.propose,
        }),
      });
      await writeMessage(artifacts, input.sessionId, 1, { role: 'user', content: input.task });
      return { messageCount: 2, instructions: instructions !== undefined };
    },

    /** Adds a message from drydock (the failed verification) to the conversation. */
    async addAgentMessage(input: { sessionId: string; index: number; content: string }): Promise<void> {
      await writeMessage(artifacts, input.sessionId, input.index, { role: 'user', content: input.content });
    },

    /**
     * One model call with the conversation so far. The answer is recorded
     * before it is returned, so a retry after a crash reuses the paid call.
     */
    async modelCall(input: ModelCallInput): Promise<ModelCallResult> {
      return callModel(deps, input).catch(giveUpAfterAttempts);
    },

    /** Runs one tool call of the model in the sandbox, at most once; its result becomes message `index`. */
    async runTool(input: ToolCallInput): Promise<ToolCallRecord> {
      return runToolCall(deps, input);
    },
  };
}
