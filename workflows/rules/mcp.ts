/**
 * Pure decisions about the agent's MCP tools (mcp/ holds the client): how a
 * declared server's tool is named to the model, and whether a call the model
 * asked for may run, must wait for approval, or is refused. The workflow
 * decides before the call, so a refusal or a gate never reaches the server.
 */
import type { McpServer } from '../mcp-servers';

const PREFIX = 'mcp__';

/** `mcp__<server>__<tool>`: the function name the model sees (server names have no "__"). */
export function mcpToolName(server: string, tool: string): string {
  return `${PREFIX}${server}__${tool}`;
}

/** The server and tool a model's function name names, if it is an MCP tool's. */
export function parseMcpToolName(name: string): { server: string; tool: string } | undefined {
  if (!name.startsWith(PREFIX)) return undefined;
  const at = name.indexOf('__', PREFIX.length);
  if (at < 0) return undefined;
  return { server: name.slice(PREFIX.length, at), tool: name.slice(at + 2) };
}

export type McpCallDecision =
  | { kind: 'call'; server: McpServer; tool: string; writes: boolean }
  | { kind: 'refuse'; server?: string; tool: string; reason: string };

/**
 * Whether the model's call of `name` may reach its server: the server is
 * declared for the repo, the tool is on its allowlist, and the session has
 * calls left of the server's maxCalls (`used`: calls so far, by server).
 */
export function decideMcpCall(servers: McpServer[], name: string, used: Record<string, number>): McpCallDecision {
  const named = parseMcpToolName(name);
  if (!named) return { kind: 'refuse', tool: name, reason: `${name} is not an MCP tool` };
  const server = servers.find((s) => s.name === named.server);
  if (!server) {
    return { kind: 'refuse', tool: named.tool, reason: `no MCP server "${named.server}" is declared for this repo` };
  }
  if (!server.tools.includes(named.tool)) {
    return {
      kind: 'refuse',
      server: server.name,
      tool: named.tool,
      reason: `the tool ${named.tool} of MCP server ${server.name} is not allowed for this repo`,
    };
  }
  if ((used[server.name] ?? 0) >= server.maxCalls) {
    return {
      kind: 'refuse',
      server: server.name,
      tool: named.tool,
      reason: `budget: this session has used its ${server.maxCalls} calls of MCP server ${server.name}`,
    };
  }
  return { kind: 'call', server, tool: named.tool, writes: server.writes.includes(named.tool) };
}
