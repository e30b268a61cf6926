/**
 * The agent CLIs drydock runs for real (Claude Code, Codex, opencode): their
 * pinned npm packages, where each one's native binary sits in the per-host
 * cache, and the argv and environment that run it unattended inside a
 * container that already is the sandbox, against drydock's model gateway.
 * Pure, so the workflow builds the command and the tests check it.
 */

/** Where the host's cache of agent CLIs is mounted, read-only, in every sandbox. */
export const SANDBOX_AGENTS_DIR = '/opt/drydock-agents';
/** The port of the model gateway's forwarder on the sandbox's loopback (the egress one is 3128). */
export const GATEWAY_PORT = 3129;
/** The only key a CLI ever holds: the gateway replaces it with the worker's. */
export const PLACEHOLDER_KEY = 'drydock-placeholder-key';

/** The wire protocol a CLI speaks to its model, which the gateway checks and meters. */
export type ModelProtocol = 'anthropic' | 'openai-responses' | 'openai-chat';

export interface AgentCliSpec {
  /** The npm package, installed with its platform's optional dependency (the native binary). */
  pkg: string;
  /** Pinned: the version this drydock was tried with (docs/agents.md). */
  version: string;
  /** The native binary inside the install folder, per CPU (`process.arch`); no Node needed in the image. */
  bin: Record<'x64' | 'arm64', string>;
  protocol: ModelProtocol;
  /**
   * Whether the install must run the packages' lifecycle scripts (a postinstall
   * that puts the native binary in place); false: `npm install --ignore-scripts`.
   */
  installScripts: boolean;
  /** The model when the session names none. */
  defaultModel: string;
}

export const AGENT_CLIS = {
  claude: {
    pkg: '@anthropic-ai/claude-code',
    version: '2.1.332',
    // The package's postinstall puts the platform's native binary here.
    bin: {
      x64: 'node_modules/@anthropic-ai/claude-code/bin/claude.exe',
      arm64: 'node_modules/@anthropic-ai/claude-code/bin/claude.exe',
    },
    protocol: 'anthropic',
    installScripts: true,
    defaultModel: 'claude-sonnet-4-5',
  },
  codex: {
    pkg: '@openai/codex',
    version: '0.171.0',
    // The vendored static (musl) Rust binary, not bin/codex.js, which would need Node.
    bin: {
      x64: 'node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex',
      arm64: 'node_modules/@openai/codex-linux-arm64/vendor/aarch64-unknown-linux-musl/bin/codex',
    },
    protocol: 'openai-responses',
    // No lifecycle script: the binary comes in the platform package (an optional dependency).
    installScripts: false,
    defaultModel: 'gpt-5',
  },
  opencode: {
    pkg: 'opencode-ai',
    version: '1.18.33',
    bin: {
      x64: 'node_modules/opencode-ai/bin/opencode.exe',
      arm64: 'node_modules/opencode-ai/bin/opencode.exe',
    },
    protocol: 'openai-chat',
    installScripts: true,
    defaultModel: 'gpt-4.1',
  },
} as const satisfies Record<string, AgentCliSpec>;

export type AgentCliName = keyof typeof AGENT_CLIS;
export const AGENT_CLI_NAMES = Object.keys(AGENT_CLIS) as AgentCliName[];

/** An npm version as drydock accepts it for a pin: exact, no ranges or tags (nothing may float). */
export const EXACT_VERSION = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/;

/** The cache folder of one package version: "@openai/codex" 0.171.0 → "@openai+codex@0.171.0". */
export function agentCliFolder(pkg: string, version: string): string {
  return `${pkg.replace('/', '+')}@${version}`;
}

/** The CLI's binary as the sandbox sees it. */
export function sandboxBinary(name: AgentCliName, version: string, arch: 'x64' | 'arm64'): string {
  const spec = AGENT_CLIS[name];
  return `${SANDBOX_AGENTS_DIR}/${agentCliFolder(spec.pkg, version)}/${spec.bin[arch]}`;
}

/** The gateway as the CLI sees it. */
export const GATEWAY_URL = `http://127.0.0.1:${GATEWAY_PORT}`;
/** Below the gateway, each of the repo's MCP servers is an MCP endpoint of its own: /mcp/<server>. */
export const GATEWAY_MCP_PATH = '/mcp/';
/** The MCP server of drydock's own tools an agent CLI is given at the gateway (start_child): /mcp/drydock. */
export const CLI_CHILD_SERVER = 'drydock';
/** The step's token for that endpoint: the worker sets it in the step's environment (never in history). */
export const MCP_TOKEN_ENV = 'DRYDOCK_MCP_TOKEN';
/** Written where the token goes in a CLI's configuration; the worker puts the step's token there. */
export const MCP_TOKEN_PLACEHOLDER = '{drydock-mcp-token}';
/** Claude Code's --mcp-config JSON, given through the environment so the token is not in the command. */
const CLAUDE_MCP_ENV = 'DRYDOCK_MCP_CONFIG';

/**
 * How long a CLI waits for one MCP call of drydock's start_child (seconds): a
 * child session's whole run; the step's own time limit ends it sooner.
 */
const CHILD_WAIT_SECONDS = 24 * 3600;

const mcpUrl = (server: string) => `${GATEWAY_URL}${GATEWAY_MCP_PATH}${server}`;

export interface AgentCliRun {
  argv: string[];
  /** Plain environment of the run: base URLs, the placeholder key, switches that keep the CLI offline otherwise. */
  env: Record<string, string>;
}

/**
 * How one CLI runs unattended in the sandbox (docs/agents.md lists why each flag):
 * - Claude Code: `-p` (print mode) with stream-json events, permissions
 *   bypassed (the container is the sandbox; it refuses this as root, and the
 *   sandbox user is not root), no non-essential traffic;
 * - Codex: `exec --json` with its own Landlock/bubblewrap sandbox off and
 *   approvals never asked (`--dangerously-bypass-approvals-and-sandbox`:
 *   `--full-auto` turns that sandbox on, which fails in a locked-down
 *   container), a model provider that is the gateway (Responses API);
 * - opencode: `run --format json --auto` with edit, bash and paths outside
 *   the repo allowed (web fetches denied), and a
 *   provider "drydock" (OpenAI-compatible chat completions) at the gateway,
 *   given in OPENCODE_CONFIG_CONTENT; no models.dev fetch, no auto-update.
 */
export function agentCliRun(
  name: AgentCliName,
  binary: string,
  model: string,
  prompt: string,
  mcpServers: readonly string[] = [],
): AgentCliRun {
  return withMcp(name, cliRun(name, binary, model, prompt), mcpServers);
}

function cliRun(name: AgentCliName, binary: string, model: string, prompt: string): AgentCliRun {
  switch (name) {
    case 'claude':
      return {
        argv: [
          binary,
          '-p',
          prompt,
          '--model',
          model,
          '--output-format',
          'stream-json',
          '--verbose',
          '--dangerously-skip-permissions',
        ],
        env: {
          ANTHROPIC_BASE_URL: GATEWAY_URL,
          ANTHROPIC_API_KEY: PLACEHOLDER_KEY,
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
          DISABLE_AUTOUPDATER: '1',
        },
      };
    case 'codex': {
      const provider = `{name="drydock",base_url="${GATEWAY_URL}",env_key="OPENAI_API_KEY",wire_api="responses"}`;
      return {
        argv: [
          binary,
          'exec',
          '--json',
          '--skip-git-repo-check',
          '--dangerously-bypass-approvals-and-sandbox',
          '-c',
          'model_provider="drydock"',
          '-c',
          `model_providers.drydock=${provider}`,
          '-m',
          model,
          prompt,
        ],
        env: { OPENAI_API_KEY: PLACEHOLDER_KEY },
      };
    }
    case 'opencode':
      return {
        argv: [binary, 'run', '--format', 'json', '--auto', '-m', `drydock/${model}`, prompt],
        env: {
          OPENCODE_CONFIG_CONTENT: JSON.stringify({
            provider: {
              drydock: {
                npm: '@ai-sdk/openai-compatible',
                name: 'drydock',
                options: { baseURL: GATEWAY_URL, apiKey: PLACEHOLDER_KEY },
                models: { [model]: { name: model } },
              },
            },
            permission: { edit: 'allow', bash: 'allow', external_directory: 'allow', webfetch: 'deny' },
            autoupdate: false,
            share: 'disabled',
          }),
          OPENCODE_DISABLE_MODELS_FETCH: '1',
          OPENCODE_DISABLE_AUTOUPDATE: '1',
        },
      };
  }
}

/**
 * The repo's MCP servers named in the CLI's configuration, each at its gateway
 * endpoint with the step's token (none declared: the run is unchanged):
 * Claude Code's --mcp-config (only these servers: --strict-mcp-config), Codex's
 * mcp_servers with bearer_token_env_var, opencode's remote `mcp` entries.
 */
function withMcp(name: AgentCliName, run: AgentCliRun, servers: readonly string[]): AgentCliRun {
  if (servers.length === 0) return run;
  const bearer = `Bearer ${MCP_TOKEN_PLACEHOLDER}`;
  switch (name) {
    case 'claude': {
      const config = Object.fromEntries(
        servers.map((s) => [s, { type: 'http', url: mcpUrl(s), headers: { Authorization: bearer } }]),
      );
      const [binary, ...rest] = run.argv;
      return {
        argv: [binary, '--mcp-config', `{env:${CLAUDE_MCP_ENV}}`, '--strict-mcp-config', ...rest],
        // Its tools up front, as the built-in loop's model gets them (else Claude Code defers MCP tools behind ToolSearch).
        env: {
          ...run.env,
          [CLAUDE_MCP_ENV]: JSON.stringify({ mcpServers: config }),
          ENABLE_TOOL_SEARCH: 'false',
          ...(servers.includes(CLI_CHILD_SERVER) ? { MCP_TOOL_TIMEOUT: String(CHILD_WAIT_SECONDS * 1000) } : {}),
        },
      };
    }
    case 'codex': {
      const at = run.argv.indexOf('-m');
      const flags = servers.flatMap((s) => [
        '-c',
        `mcp_servers.${s}={url="${mcpUrl(s)}",bearer_token_env_var="${MCP_TOKEN_ENV}"${s === CLI_CHILD_SERVER ? `,tool_timeout_sec=${CHILD_WAIT_SECONDS}` : ''}}`,
      ]);
      return { argv: [...run.argv.slice(0, at), ...flags, ...run.argv.slice(at)], env: run.env };
    }
    case 'opencode': {
      const config = JSON.parse(run.env.OPENCODE_CONFIG_CONTENT) as Record<string, unknown>;
      // Its `timeout` (default 5 s) bounds each tool call too: start_child's waits for a whole child session.
      const remote = (s: string) => ({
        type: 'remote',
        url: mcpUrl(s),
        headers: { Authorization: bearer },
        enabled: true,
        ...(s === CLI_CHILD_SERVER ? { timeout: CHILD_WAIT_SECONDS * 1000 } : {}),
      });
      config.mcp = Object.fromEntries(servers.map((s) => [s, remote(s)]));
      return { argv: run.argv, env: { ...run.env, OPENCODE_CONFIG_CONTENT: JSON.stringify(config) } };
    }
  }
}

/** The paths (below the gateway's base URL) a protocol may call; anything else is refused. */
export const PROTOCOL_PATHS: Record<ModelProtocol, string[]> = {
  anthropic: ['/v1/messages'],
  'openai-responses': ['/responses'],
  'openai-chat': ['/chat/completions'],
};
