/**
 * The operator's MCP servers of a repo (`drydock repo add --mcp <file>`), as
 * the registry keeps them: which server (remote by `url`, or a local image
 * the worker runs in a hardened container of its own, `stdio`), which of its tools the agent
 * may use, which of those write outside the sandbox (each call waits at an
 * approval gate), and how much a session may use it. Credentials are never
 * written here: a header names a worker secret (DRYDOCK_SECRET_<NAME>) that
 * only the worker resolves, at the call. So the declaration may sit in the
 * registry, in workflow history and in `repo list` without leaking anything.
 */
import { z } from 'zod';
import { secretName } from './input';

/** At most this many servers per repo, and tools per server. */
export const MCP_BOUNDS = { servers: 8, tools: 64, headers: 8 };

/** Short, so that `mcp__<server>__<tool>` fits a model API's 64-character function names. */
const serverName = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,11}$/, 'lower-case letters, digits and "-", at most 12 characters')
  .refine((name) => name !== 'drydock', 'drydock is reserved: an agent CLI finds start_child under it');
const toolName = z.string().regex(/^[A-Za-z0-9_-]{1,45}$/, 'letters, digits, "_" and "-", at most 45 characters');
const headerName = z.string().regex(/^[A-Za-z0-9-]{1,64}$/, 'an HTTP header name');

/** Plain HTTP only to this machine (a local server); anything else over HTTPS. */
const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/;

const serverUrl = z
  .string()
  .max(2000)
  .superRefine((value, ctx) => {
    const url = URL.canParse(value) ? new URL(value) : undefined;
    const problem = !url
      ? 'not a URL'
      : url.username || url.password
        ? 'credentials in the URL are refused: name a worker secret in headers instead'
        : url.search
          ? 'a query string is refused (it may carry a credential): name a worker secret in headers instead'
          : url.protocol === 'https:' || (url.protocol === 'http:' && LOOPBACK.test(url.hostname))
            ? undefined
            : 'expected https:// (http:// only to localhost)';
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

/**
 * A Docker image reference as the worker's Docker host names it: lower-case
 * repository path (an optional registry host[:port] first, never starting with '-', which
 * `docker run` would read as an option), optional tag, optional digest.
 */
const IMAGE_REF =
  /^(?:[a-zA-Z0-9][a-zA-Z0-9.-]*(?::[0-9]{1,5})?\/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$/;

/** A stdio server: an image on the worker's Docker host and the command that serves MCP on its stdin/stdout. */
const stdioServer = z.strictObject({
  image: z
    .string()
    .max(255)
    .regex(
      IMAGE_REF,
      'a Docker image reference such as registry.example/mcp-docs:1.2 (lower-case name, optional tag or digest)',
    )
    .describe("present on the worker's Docker host: it is never pulled"),
  command: z
    .array(
      z
        .string()
        .min(1)
        .max(1_000)
        .regex(/^[^\0\n\r]*$/, 'no NUL or line breaks'),
    )
    .min(1)
    .max(32)
    .describe("the program and its arguments (run as given, no shell); it replaces the image's own command"),
});

export const mcpServerSchema = z
  .strictObject({
    name: serverName.describe('how tools are named to the agent: mcp__<name>__<tool>'),
    /** Remote servers (MCP streamable HTTP), reached by the worker only. */
    url: serverUrl.optional(),
    /** Or a stdio server, started by the worker in a container without network, per client (mcp/stdio.ts). */
    stdio: stdioServer.optional(),
    headers: z
      .record(
        headerName,
        z.strictObject({
          secret: secretName.describe('the worker secret DRYDOCK_SECRET_<NAME> whose value is sent'),
          prefix: z
            .string()
            .regex(/^[\x20-\x7e]{0,32}$/, 'printable text of at most 32 characters')
            .optional()
            .describe('e.g. "Bearer "'),
        }),
      )
      .refine((h) => Object.keys(h).length <= MCP_BOUNDS.headers, `at most ${MCP_BOUNDS.headers} headers`)
      .default({}),
    tools: z.array(toolName).min(1).max(MCP_BOUNDS.tools).describe('the allowlist: only these tools reach the agent'),
    writes: z
      .array(toolName)
      .max(MCP_BOUNDS.tools)
      .default([])
      .describe('tools that change something outside the sandbox: each call waits for approval'),
    maxCalls: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(50)
      .describe("calls a session may make, all of this server's tools together"),
    timeoutSeconds: z.number().int().min(1).max(600).default(60),
    maxResultBytes: z.number().int().min(1024).max(1_000_000).default(64_000).describe('a longer result is cut'),
  })
  .superRefine((server, ctx) => {
    if ((server.url === undefined) === (server.stdio === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: ['url'],
        message: 'give either url (a remote server) or stdio (an image), not both or neither',
      });
    }
    if (server.stdio && Object.keys(server.headers).length > 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['headers'],
        message: 'headers are for a remote server (url); a stdio server gets none',
      });
    }
    for (const [i, tool] of server.writes.entries()) {
      if (!server.tools.includes(tool)) {
        ctx.addIssue({ code: 'custom', path: ['writes', i], message: `${tool} is not in tools (the allowlist)` });
      }
    }
  });

export const mcpDeclaration = z
  .array(mcpServerSchema)
  .max(MCP_BOUNDS.servers)
  .superRefine((servers, ctx) => {
    const seen = new Set<string>();
    for (const [i, s] of servers.entries()) {
      if (seen.has(s.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `${s.name} is declared twice` });
      seen.add(s.name);
    }
  });

/** One declared server, defaults filled in. */
export type McpServer = z.infer<typeof mcpServerSchema>;

/** The declaration, or each problem named by its place ("1.url: ..."). */
export function parseMcpDeclaration(
  raw: unknown,
): { ok: true; servers: McpServer[] } | { ok: false; problems: string[] } {
  const parsed = mcpDeclaration.safeParse(raw);
  if (parsed.success) return { ok: true, servers: parsed.data };
  return { ok: false, problems: parsed.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`) };
}
