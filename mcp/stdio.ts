/**
 * A stdio MCP server's container: the worker runs the operator's image with
 * the `docker` CLI (the SDK's stdio client speaks MCP over its stdin and
 * stdout) in a container of its own, hardened like nothing else drydock runs:
 * no network at all, a read-only root, the nobody user, no capabilities, no
 * new privileges, bounded memory, processes and CPU, no mounts, no
 * environment, and nothing of drydock's (no repo, no secret, no socket). It
 * lives for one client (a tool listing, one call) and is removed when the
 * client closes; a worker that dies first leaves it to the reaper, which finds
 * it by its label once its expiry has passed (sandbox/docker/provider.ts).
 * Docker hosts only: the image is never pulled, it must be on the worker's host.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { McpServer } from '../workflows/mcp-servers';

/** On a stdio server's container: the server's name, and when the reaper may remove it (ISO time). */
export const MCP_STDIO_LABELS = { server: 'drydock.mcp-stdio', expires: 'drydock.mcp-stdio-expires' } as const;

/** Each stdio server's container gets these, fixed (the operator chooses the image, not the hardening). */
export const MCP_STDIO_LIMITS = { memory: '256m', pids: 64, cpus: '0.5', user: '65534:65534' } as const;

/** What of the worker's environment the docker CLI is given (to reach the host); none of it enters the container. */
const DOCKER_ENV = ['DOCKER_HOST', 'DOCKER_CONTEXT', 'DOCKER_CONFIG', 'DOCKER_TLS_VERIFY', 'DOCKER_CERT_PATH'];

/**
 * The `docker run` arguments of a stdio server's container `name`. A client lives
 * at most its connect and listing requests (MAX_PAGES + 1 timeouts, mcp/client.ts):
 * its expiry label is past that, so the reaper never removes one in use.
 */
export function stdioRunArgs(server: McpServer, name: string, now = Date.now()): string[] {
  const stdio = server.stdio!;
  const expires = new Date(now + (12 * server.timeoutSeconds + 60) * 1000).toISOString();
  return [
    'run',
    '-i',
    '--rm',
    '--pull=never',
    `--name=${name}`,
    `--label=${MCP_STDIO_LABELS.server}=${server.name}`,
    `--label=${MCP_STDIO_LABELS.expires}=${expires}`,
    '--network=none',
    '--read-only',
    `--user=${MCP_STDIO_LIMITS.user}`,
    '--cap-drop=ALL',
    '--security-opt=no-new-privileges',
    `--memory=${MCP_STDIO_LIMITS.memory}`,
    `--memory-swap=${MCP_STDIO_LIMITS.memory}`,
    `--pids-limit=${MCP_STDIO_LIMITS.pids}`,
    `--cpus=${MCP_STDIO_LIMITS.cpus}`,
    '--ipc=none',
    '--log-driver=none',
    '--entrypoint',
    stdio.command[0]!,
    stdio.image,
    ...stdio.command.slice(1),
  ];
}

/** A transport to a fresh container of `server` and how to make sure it is gone. */
export function stdioTransport(server: McpServer): { transport: StdioClientTransport; remove: () => Promise<void> } {
  const name = `drydock-mcp-${server.name}-${randomBytes(6).toString('hex')}`;
  const env = getDefaultEnvironment();
  for (const key of DOCKER_ENV) if (process.env[key] !== undefined) env[key] = process.env[key]!;
  // The server's stderr is its own untrusted text: it is not copied into the worker's log.
  const transport = new StdioClientTransport({
    command: 'docker',
    args: stdioRunArgs(server, name),
    env,
    stderr: 'ignore',
  });
  const remove = async () => {
    // Closing stdin ends a well-behaved server (and --rm removes it); this removes one that did not stop.
    await promisify(execFile)('docker', ['rm', '-f', name], { env, timeout: 60_000 }).catch(() => undefined);
  };
  return { transport, remove };
}
