/**
 * start_child's two ends on the worker (docs/agents.md, Child sessions): the
 * task the model asked for (read from its message in the artifact store, so
 * the workflow history holds only its size-checked text), and the answer once
 * the child ended: its diff copied into the parent's sandbox for `git apply`
 * and the tool message the model reads next.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { ChatMessage } from '../models/llm';
import type { ArtifactStore } from '../store/artifacts';
import { recordEvent, type AuditTrail } from '../store/audit';
import { permanent, sandboxOf, type SandboxProvider } from '../sandbox';
import { childDiffPath, childTask } from '../workflows/rules/children';
import type { ToolCallRecord } from './contract';
import { messageName, writeMessage } from './conversation';

interface ChildDeps {
  sandboxes: SandboxProvider;
  artifacts: ArtifactStore;
  audit: AuditTrail;
}

/** Which call of which assistant message. */
export interface CallAt {
  sessionId: string;
  assistantIndex: number;
  callIndex: number;
}

export interface AnswerChildInput extends CallAt {
  sandbox: string;
  turn: number;
  /** The tool result becomes this message. */
  index: number;
  childId: string;
  /** What the model reads (workflows/rules/children.ts childAnswer). */
  content: string;
  /** Whether the child committed a change: its change.diff goes to the parent's sandbox. */
  changed: boolean;
  ok: boolean;
}

async function toolCall(artifacts: ArtifactStore, at: CallAt) {
  const stored = await artifacts.get(at.sessionId, messageName(at.assistantIndex));
  if (!stored) throw new Error(`message ${at.assistantIndex} of the conversation is missing`);
  const message = JSON.parse(stored.toString()) as ChatMessage;
  const call = message.role === 'assistant' ? message.tool_calls?.[at.callIndex] : undefined;
  if (!call) throw ApplicationFailure.nonRetryable(`no tool call ${at.callIndex} in message ${at.assistantIndex}`);
  return call;
}

export function createChildActivities({ sandboxes, artifacts, audit }: ChildDeps) {
  return {
    /** The task of a start_child call, or why it cannot be one (the model reads that). */
    async readChildCall(at: CallAt): Promise<{ task: string } | { problem: string }> {
      const call = await toolCall(artifacts, at);
      let task: unknown;
      try {
        task = (JSON.parse(call.function.arguments || '{}') as { task?: unknown })?.task;
      } catch {
        return { problem: 'the arguments are not a JSON object' };
      }
      return childTask(task);
    },

    /** Copies the child's diff into the parent's sandbox and writes start_child's result; idempotent. */
    async answerChildCall(input: AnswerChildInput): Promise<ToolCallRecord> {
      const started = Date.now();
      const call = await toolCall(artifacts, input);
      if (input.changed) await copyChildDiff({ sandboxes, artifacts }, input.sandbox, input.childId);
      await writeMessage(artifacts, input.sessionId, input.index, {
        role: 'tool',
        tool_call_id: call.id,
        content: input.content,
      });
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: `tool-${input.index}`,
        kind: 'tool_call',
        actor: 'agent',
        data: { turn: input.turn, tool: call.function.name, child: input.childId, ok: input.ok },
      });
      return {
        type: 'tool',
        turn: input.turn,
        tool: call.function.name,
        summary: `start_child ${input.childId}`,
        ok: input.ok,
        durationMs: Date.now() - started,
        outputBytes: input.content.length,
        truncated: false,
      };
    },

    /**
     * An agent CLI's start_child call, once its child ended (or it was refused):
     * the child's diff copied into the parent's sandbox, and the call audited
     * as the built-in loop's (`tool_call`, with the CLI's step and `via: "gateway"`); idempotent.
     */
    async deliverCliChild(input: CliChildDelivery): Promise<void> {
      if (input.changed) await copyChildDiff({ sandboxes, artifacts }, input.sandbox, input.childId!);
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: `child-${input.step}-${input.n}`,
        kind: 'tool_call',
        actor: 'agent',
        data: {
          step: input.step,
          via: 'gateway',
          tool: 'start_child',
          ...(input.childId ? { child: input.childId } : { refused: input.refused }),
          ok: input.ok,
        },
      });
    },
  };
}

export interface CliChildDelivery {
  sandbox: string;
  sessionId: string;
  /** The CLI's step that asked, and the call's number in the session (the audit event's key). */
  step: string;
  n: number;
  childId?: string;
  refused?: string;
  changed: boolean;
  ok: boolean;
}

/** The child's change.diff into the parent's sandbox, where the parent's agent can `git apply` it. */
async function copyChildDiff(deps: Pick<ChildDeps, 'sandboxes' | 'artifacts'>, sandbox: string, childId: string) {
  const diff = await deps.artifacts.get(childId, 'change.diff');
  if (!diff) return;
  const file = childDiffPath(childId);
  await sandboxOf(deps.sandboxes, sandbox)
    .commands.run(['sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', 'sh', file], { stdin: diff })
    .catch(permanent);
}
