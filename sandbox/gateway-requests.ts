/**
 * What the model gateway forwards of an agent CLI's model call: for each
 * protocol, only the fields, content, tools and headers a model call needs.
 * Everything else is dropped, so code in the sandbox cannot have the
 * provider reach out for it: no URL or stored-file sources (Anthropic
 * image/document `source.url`, OpenAI `image_url`/`input_image`/`file_url`
 * that are not inline data), no server-side tools (web search and fetch, MCP
 * servers, code execution), no `mcp_servers`, `background`, stored
 * conversations, or headers that choose who is billed
 * (`openai-organization`, `openai-project`) or enable other features
 * (`anthropic-beta` keeps only the features of the pinned CLIs). A part
 * whose meaning would change if dropped (a message's URL image) refuses the
 * call instead, naming it. Pure: the gateway and its tests share it.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { ModelProtocol } from '../workflows/rules/agent-clis';

type Json = Record<string, unknown>;

/** The call as forwarded, or why it is refused. */
export type ScreenedCall =
  { body: Json; headers: Record<string, string>; search: string; model: string } | { refused: string };

/** Top-level fields each protocol's model call may carry; others are dropped. */
const FIELDS: Record<ModelProtocol, string[]> = {
  anthropic: [
    'model',
    'messages',
    'system',
    'max_tokens',
    'metadata',
    'stop_sequences',
    'stream',
    'temperature',
    'top_p',
    'top_k',
    'tools',
    'tool_choice',
    'thinking',
    'context_management',
    'output_config',
    'output_format',
  ],
  'openai-responses': [
    'model',
    'input',
    'instructions',
    'tools',
    'tool_choice',
    'parallel_tool_calls',
    'reasoning',
    'store',
    'include',
    'stream',
    'prompt_cache_key',
    'max_output_tokens',
    'temperature',
    'top_p',
    'text',
    'truncation',
  ],
  'openai-chat': [
    'model',
    'messages',
    'tools',
    'tool_choice',
    'parallel_tool_calls',
    'stream',
    'stream_options',
    'max_tokens',
    'max_completion_tokens',
    'temperature',
    'top_p',
    'stop',
    'reasoning_effort',
    'response_format',
    'seed',
    'presence_penalty',
    'frequency_penalty',
  ],
};

/** Tools the client runs itself (the provider only names them to the model); server-side tools are dropped. */
const CLIENT_TOOL: Record<ModelProtocol, (type: string | undefined) => boolean> = {
  anthropic: (type) => type === undefined || type === 'custom' || /^(bash|text_editor|memory)_\d+$/.test(type),
  'openai-responses': (type) =>
    ['function', 'custom', 'local_shell', 'shell', 'apply_patch', 'namespace'].includes(type ?? ''),
  'openai-chat': (type) => type === 'function' || type === 'custom',
};

/** Headers passed on besides the key the gateway adds; `anthropic-beta` is filtered (BETA_FAMILIES). */
const HEADERS: Record<ModelProtocol, string[]> = {
  anthropic: ['content-type', 'accept', 'user-agent', 'anthropic-version'],
  'openai-responses': ['content-type', 'accept', 'user-agent'],
  'openai-chat': ['content-type', 'accept', 'user-agent'],
};

/**
 * Anthropic beta features the pinned Claude Code uses, by family (the date
 * suffix changes between releases): none reaches a URL. MCP client, web
 * fetch and search, files, code execution, computer use and skills are not
 * among them.
 */
const BETA_FAMILIES = [
  'claude-code-',
  'interleaved-thinking-',
  'context-management-',
  'thinking-',
  'advanced-tool-use-',
  'fine-grained-tool-streaming-',
  'token-efficient-tools-',
  'prompt-caching-',
  'output-128k-',
  'context-1m-',
  'effort-',
  'structured-outputs-',
];

/** Query parameters passed on: Claude Code's `?beta=true`, nothing else. */
const QUERY: Record<ModelProtocol, string[]> = { anthropic: ['beta'], 'openai-responses': [], 'openai-chat': [] };

/** Responses `include` values passed on: the reasoning Codex replays; none asks for fetched sources or images. */
const INCLUDES = ['reasoning.encrypted_content'];

class Refused extends Error {}
const refuse = (why: string): never => {
  throw new Refused(why);
};
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/** An inline image or file is `data:`; a URL would be fetched by the provider. */
function inlineUrl(url: unknown, what: string): void {
  if (typeof url === 'string' && !url.startsWith('data:')) {
    refuse(`${what} names a URL (${url.slice(0, 100)}): the provider would fetch it; send the data inline`);
  }
}

/** Anthropic content blocks: text, inline images and documents, tool calls and results, thinking. */
function anthropicBlocks(content: unknown, where: string): void {
  if (typeof content === 'string') return;
  for (const block of list(content)) {
    const type = isObject(block) ? String(block.type) : typeof block;
    const at = `${where}: a ${type} block`;
    if (!isObject(block)) return refuse(`${at} is not an object`);
    if (['text', 'thinking', 'redacted_thinking', 'tool_use', 'search_result'].includes(type)) continue;
    if (type === 'image' || type === 'document') {
      const source = isObject(block.source) ? block.source : {};
      if (!['base64', 'text', 'content'].includes(String(source.type))) {
        refuse(`${at} with a ${String(source.type)} source (a URL or a stored file) is refused: send its data inline`);
      }
      if (source.type === 'content') anthropicBlocks(source.content, where);
      continue;
    }
    if (type === 'tool_result') {
      anthropicBlocks(block.content, where);
      continue;
    }
    refuse(`${at} is not something drydock forwards (text, image, document, tool_use, tool_result, thinking)`);
  }
}

/** Responses content parts: text, inline images and files (never a URL or a stored file id). */
function responsesParts(content: unknown, where: string): void {
  if (typeof content === 'string') return;
  for (const part of list(content)) {
    const type = isObject(part) ? String(part.type) : typeof part;
    const at = `${where}: an ${type} part`;
    if (!isObject(part)) return refuse(`${at} is not an object`);
    if (['input_text', 'output_text', 'refusal', 'summary_text', 'reasoning_text'].includes(type)) continue;
    if (type === 'input_image' || type === 'input_file') {
      if (part.file_id !== undefined) refuse(`${at} names a stored file (file_id): send its data inline`);
      if (part.file_url !== undefined) refuse(`${at} names a file_url: the provider would fetch it; send file_data`);
      inlineUrl(part.image_url, at);
      continue;
    }
    refuse(`${at} is not something drydock forwards`);
  }
}

/** Responses input items a client produces; stored references and server tools' calls are refused. */
const RESPONSES_ITEMS = [
  'message',
  'function_call',
  'function_call_output',
  'custom_tool_call',
  'custom_tool_call_output',
  'reasoning',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'compaction',
];

function responsesInput(input: unknown): void {
  if (typeof input === 'string') return;
  for (const [i, item] of list(input).entries()) {
    if (!isObject(item)) refuse(`input ${i} is not an object`);
    const type = (item as Json).type === undefined ? 'message' : String((item as Json).type);
    if (!RESPONSES_ITEMS.includes(type)) refuse(`input ${i}: a ${type} item is not something drydock forwards`);
    const it = item as Json;
    if (type === 'message') responsesParts(it.content, `input ${i}`);
    if (type.endsWith('_output')) responsesParts(it.output, `input ${i}`);
  }
}

/** Chat message parts: text, inline images, audio and files. */
function chatParts(content: unknown, where: string): void {
  if (typeof content === 'string' || content === null || content === undefined) return;
  for (const part of list(content)) {
    const type = isObject(part) ? String(part.type) : typeof part;
    const at = `${where}: an ${type} part`;
    if (!isObject(part)) return refuse(`${at} is not an object`);
    if (['text', 'refusal', 'input_audio'].includes(type)) continue;
    if (type === 'image_url') {
      inlineUrl(isObject(part.image_url) ? part.image_url.url : part.image_url, at);
      continue;
    }
    if (type === 'file') {
      const file = isObject(part.file) ? part.file : {};
      if (file.file_id !== undefined) refuse(`${at} names a stored file (file_id): send file_data`);
      continue;
    }
    refuse(`${at} is not something drydock forwards`);
  }
}

/** The tools the client runs itself; a Responses namespace keeps only its own client tools. */
function clientTools(protocol: ModelProtocol, tools: unknown): unknown[] {
  const keep = CLIENT_TOOL[protocol];
  return list(tools).flatMap((tool) => {
    if (!isObject(tool)) return [];
    const type = tool.type === undefined ? undefined : String(tool.type);
    if (!keep(type)) return [];
    if (type !== 'namespace') return [tool];
    const inner = clientTools(protocol, tool.tools).filter((t) => (t as Json).type !== 'namespace');
    return inner.length ? [{ ...tool, tools: inner }] : [];
  });
}

/** The protocol's fields of `data`, its content checked, its tools the client's own. */
function screenBody(protocol: ModelProtocol, data: Json): Json {
  const body: Json = {};
  for (const field of FIELDS[protocol]) if (data[field] !== undefined) body[field] = data[field];
  if (protocol === 'anthropic') {
    list(body.messages).forEach((m, i) => anthropicBlocks(isObject(m) ? m.content : m, `message ${i}`));
    anthropicBlocks(body.system, 'system');
    if (isObject(body.metadata)) body.metadata = { user_id: body.metadata.user_id };
  } else if (protocol === 'openai-responses') {
    responsesInput(body.input);
    if (body.include !== undefined) body.include = list(body.include).filter((v) => INCLUDES.includes(String(v)));
  } else {
    list(body.messages).forEach((m, i) => chatParts(isObject(m) ? m.content : m, `message ${i}`));
    // Chat completions report a stream's usage only when asked to.
    if (body.stream === true) body.stream_options = { include_usage: true };
  }
  if (body.tools !== undefined) {
    body.tools = clientTools(protocol, body.tools);
    if ((body.tools as unknown[]).length === 0) delete body.tools;
  }
  return body;
}

/** The headers a model call of `protocol` needs, from the CLI's (credentials never: the gateway adds the key). */
export function screenHeaders(protocol: ModelProtocol, headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of HEADERS[protocol]) {
    const value = headers[name];
    if (typeof value === 'string') out[name] = value;
  }
  const beta = headers['anthropic-beta'];
  if (protocol === 'anthropic' && typeof beta === 'string') {
    const kept = beta
      .split(',')
      .map((b) => b.trim())
      .filter((b) => BETA_FAMILIES.some((family) => b.startsWith(family)));
    if (kept.length) out['anthropic-beta'] = kept.join(',');
  }
  return out;
}

/** The query string passed on (only the protocol's known parameters). */
function screenQuery(protocol: ModelProtocol, search: string): string {
  const params = new URLSearchParams(search);
  const kept = new URLSearchParams();
  for (const [k, v] of params) if (QUERY[protocol].includes(k)) kept.append(k, v);
  const text = kept.toString();
  return text ? `?${text}` : '';
}

/** A CLI's model call as the gateway forwards it, or why it is refused. */
export function screenCall(
  protocol: ModelProtocol,
  raw: Buffer,
  headers: IncomingHttpHeaders,
  search: string,
): ScreenedCall {
  let data: unknown;
  try {
    data = JSON.parse(raw.toString());
  } catch {
    return { refused: 'the request body is not JSON' };
  }
  if (!isObject(data)) return { refused: 'the request body is not a JSON object' };
  if (typeof data.model !== 'string' || !data.model) return { refused: 'the request names no model' };
  try {
    const body = screenBody(protocol, data);
    return {
      body,
      headers: screenHeaders(protocol, headers),
      search: screenQuery(protocol, search),
      model: data.model,
    };
  } catch (err) {
    if (err instanceof Refused) return { refused: err.message };
    throw err;
  }
}

/** The output limit a call asks for (max_tokens, max_output_tokens, max_completion_tokens); undefined when none. */
export function requestedOutput(protocol: ModelProtocol, body: Json): number | undefined {
  const asked =
    protocol === 'anthropic'
      ? body.max_tokens
      : protocol === 'openai-responses'
        ? body.max_output_tokens
        : (body.max_completion_tokens ?? body.max_tokens);
  return typeof asked === 'number' && asked > 0 ? asked : undefined;
}

/** Anthropic's smallest thinking budget; a call capped below it runs without extended thinking. */
const MIN_THINKING = 1024;

/**
 * Caps the call's output at `limit` tokens in the protocol's own field (and
 * an Anthropic thinking budget below it), so it cannot spend more than the
 * gateway reserved for it.
 */
export function capOutput(protocol: ModelProtocol, body: Json, limit: number): void {
  if (protocol === 'anthropic') {
    body.max_tokens = limit;
    const thinking = isObject(body.thinking) ? body.thinking : undefined;
    if (thinking?.type === 'enabled' && Number(thinking.budget_tokens) >= limit) {
      if (limit <= MIN_THINKING) delete body.thinking;
      else body.thinking = { ...thinking, budget_tokens: limit - 1 };
    }
  } else if (protocol === 'openai-responses') {
    body.max_output_tokens = limit;
  } else {
    body[body.max_completion_tokens !== undefined ? 'max_completion_tokens' : 'max_tokens'] = limit;
  }
}
