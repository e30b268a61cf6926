/**
 * What a person sees before an MCP call the operator marked as writing
 * (docs/mcp.md): the server, the tool and the arguments as the model wrote
 * them (cut, scrubbed), and the hash an approval binds to, so that a yes
 * given to one call never approves another.
 */
import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import type { ChatMessage } from '../models/llm';
import type { ActivityDeps } from './deps';
import { messageName } from '../agent-loop/conversation';

/** Characters of a call's arguments shown at its gate. */
const SHOWN_ARGUMENTS = 2_000;

export function createMcpApprovalActivities(deps: Pick<ActivityDeps, 'artifacts' | 'redactor'>) {
  return {
    /** The call `callIndex` of assistant message `assistantIndex`: its arguments to show and its hash (64 hex). */
    async describeMcpCall(input: {
      sessionId: string;
      assistantIndex: number;
      callIndex: number;
    }): Promise<{ change: string; arguments: string }> {
      const stored = await deps.artifacts.get(input.sessionId, messageName(input.assistantIndex));
      if (!stored) throw new Error(`message ${input.assistantIndex} of the conversation is missing`);
      const message = JSON.parse(stored.toString()) as ChatMessage;
      const call = message.role === 'assistant' ? message.tool_calls?.[input.callIndex] : undefined;
      if (!call) {
        throw ApplicationFailure.nonRetryable(`no tool call ${input.callIndex} in message ${input.assistantIndex}`);
      }
      const args = call.function.arguments ?? '';
      const change = createHash('sha256').update(`${call.function.name}\n${args}`).digest('hex');
      const cut =
        args.length > SHOWN_ARGUMENTS ? `${args.slice(0, SHOWN_ARGUMENTS)}… (${args.length} characters)` : args;
      return { change, arguments: deps.redactor.text(cut) };
    },
  };
}
