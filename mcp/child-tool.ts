/**
 * start_child for agent CLIs (docs/agents.md, Child sessions): the gateway's
 * endpoint /mcp/drydock, an MCP server of drydock's own tools, reachable with
 * the step's token like the repo's servers (mcp/gateway.ts). Its one tool,
 * start_child {task}, asks the session's workflow to start a child (the
 * startChild update, decided by the same bounds as the built-in loop's) and
 * answers once the child ended: its outcome, its own words fenced, and where its
 * diff is in the sandbox. The call's arguments are checked and bounded here
 * before anything reaches the workflow.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { StepChildAnswer } from '../workflows/api';
import { CHILD_TOOL, childTask, MAX_CHILD_TASK } from '../workflows/rules/children';

/** Asks the session for a child with this task and waits for its end (platform/sessions.ts askForChild). */
export type StartChild = (task: string) => Promise<StepChildAnswer>;

const DESCRIPTION =
  'Start a child session: another agent with its own sandbox on this repository at your base commit works on `task` ' +
  'and runs its verification, while you wait. You get its outcome, its own words and the path of its diff in your sandbox, ' +
  'which you may take into your change with `git apply <path>`. Give it a self-contained task: it does not see your conversation.';

/** The endpoint's MCP server for one request: start_child listed, each call asked of the workflow. */
export function childEndpoint(start: StartChild): Server {
  const endpoint = new Server({ name: 'drydock', version: '1' }, { capabilities: { tools: {} } });
  endpoint.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: [
      {
        name: CHILD_TOOL,
        description: DESCRIPTION,
        inputSchema: {
          type: 'object' as const,
          properties: {
            task: { type: 'string', maxLength: MAX_CHILD_TASK, description: "The child's task, self-contained" },
          },
          required: ['task'],
        },
      },
    ],
  }));
  endpoint.setRequestHandler(CallToolRequestSchema, async (request) => {
    const text = (content: string, isError: boolean) => ({
      content: [{ type: 'text' as const, text: content }],
      isError,
    });
    if (request.params.name !== CHILD_TOOL) return text(`error: drydock serves no tool ${request.params.name}`, true);
    const asked = childTask(request.params.arguments?.task);
    if ('problem' in asked) return text(`error: ${asked.problem}`, true);
    const answer = await start(asked.task).catch((err: unknown) => ({
      content: `error: the session did not take the call: ${err instanceof Error ? err.message : String(err)}`,
      ok: false,
    }));
    return text(answer.content, !answer.ok && answer.content.startsWith('error:'));
  });
  return endpoint;
}
