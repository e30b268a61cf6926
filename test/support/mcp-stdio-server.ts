/**
 * A real stdio MCP server (the official @modelcontextprotocol/sdk), bundled by
 * test/e2e/mcp-stdio.test.ts into an image and run by the worker in its
 * hardened container. Its one tool, `look`, says what the server can see
 * from inside: its user, its network interfaces, whether it can write its
 * root and what environment it was given.
 */
import { writeFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'look', version: '1' });
server.registerTool(
  'look',
  { description: 'Say what this server can see.', inputSchema: { note: z.string() } },
  async ({ note }) => {
    let rootWritable = true;
    try {
      writeFileSync('/probe', 'x');
    } catch {
      rootWritable = false;
    }
    const seen = {
      note,
      uid: process.getuid?.(),
      interfaces: Object.keys(networkInterfaces()).sort(),
      rootWritable,
      env: Object.keys(process.env).sort(),
    };
    return { content: [{ type: 'text', text: JSON.stringify(seen) }] };
  },
);
void server.connect(new StdioServerTransport());
