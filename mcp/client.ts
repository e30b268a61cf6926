/**
 * The worker's MCP client (the official @modelcontextprotocol/sdk) for a
 * repo's servers: remote ones over streamable HTTP, stdio ones in a container
 * of their own for the client's life (./stdio.ts). The worker adds the server's credentials (worker
 * secrets named by the declaration) to its own requests only; nothing of
 * them goes to the sandbox, the model, workflow history or the audit trail.
 * Redirects are refused, so a header never follows to another host.
 */
import { ApplicationFailure } from '@temporalio/common';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { McpServer } from '../workflows/mcp-servers';
import { stdioTransport } from './stdio';

/** Tool listings are read up to this many pages (a server that pages forever is cut). */
const MAX_PAGES = 10;

/** The request headers of `server`, from the worker's secrets; a missing secret fails permanently, naming it. */
export function headersOf(server: McpServer, secrets: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(server.headers).map(([header, { secret, prefix }]) => {
      const value = secrets[secret];
      if (value === undefined) {
        throw ApplicationFailure.nonRetryable(
          `MCP server ${server.name}: header ${header} needs the worker secret DRYDOCK_SECRET_${secret}, which this worker does not have: set it on every worker`,
          'McpCredentialMissing',
        );
      }
      return [header, `${prefix ?? ''}${value}`];
    }),
  );
}

/** Connects to `server`, runs `fn` with the client, and closes the connection whatever happens. */
export async function withMcpClient<T>(
  server: McpServer,
  secrets: Record<string, string>,
  fn: (client: Client) => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  let transport: Transport;
  let remove = async () => {};
  if (server.stdio) ({ transport, remove } = stdioTransport(server));
  else {
    transport = new StreamableHTTPClientTransport(new URL(server.url!), {
      requestInit: { headers: headersOf(server, secrets), redirect: 'error' },
    });
  }
  const client = new Client({ name: 'drydock', version: '1' });
  try {
    await client.connect(transport, { timeout: server.timeoutSeconds * 1000, signal });
    return await fn(client);
  } finally {
    await client.close().catch(() => undefined);
    await remove();
  }
}

export interface ListedTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
}

/** Every tool the server lists (at most MAX_PAGES pages). */
export async function listTools(client: Client, server: McpServer, signal?: AbortSignal): Promise<ListedTool[]> {
  const tools: ListedTool[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const listed = await client.listTools(cursor ? { cursor } : {}, { timeout: server.timeoutSeconds * 1000, signal });
    tools.push(...listed.tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema })));
    cursor = listed.nextCursor;
    if (!cursor) break;
  }
  return tools;
}

/** A tool result as text for the model: its text parts, other parts named by type; isError said first. */
export function resultText(result: Record<string, unknown>): string {
  const parts = Array.isArray(result.content) ? (result.content as { type?: string; text?: unknown }[]) : [];
  const texts = parts.map((p) =>
    p.type === 'text' && typeof p.text === 'string' ? p.text : `[${p.type ?? 'unknown'} content omitted]`,
  );
  if (texts.length === 0 && result.structuredContent !== undefined)
    texts.push(JSON.stringify(result.structuredContent));
  return `${result.isError === true ? 'error: ' : ''}${texts.join('\n')}`;
}
