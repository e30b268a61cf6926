/**
 * What an agent CLI's step may still spend at the model gateway, reserved
 * before each call is forwarded: the call itself, its input (estimated from
 * the request's size) and the output it may produce (capped to what is left).
 * Calls under way count as spent, so concurrent calls cannot together pass
 * a budget that each one alone fits; a call whose usage cannot be read (an
 * answer past what the gateway reads, a dropped stream) is charged all it
 * reserved. Pure: the gateway and its tests share it.
 */
/** The tokens of one model call through the gateway (model-gateway.ts reads them from the answer). */
export interface GatewayUsage {
  inputTokens: number;
  outputTokens: number;
  /** Of inputTokens: read from and written to the provider's prompt cache, where it reports them. */
  cachedTokens: number;
}

export interface GatewayLimits {
  maxCalls?: number;
  maxTokens?: number;
  maxCostUsd?: number;
}

/** USD per million tokens, per model. */
export type Prices = Record<string, { input: number; output: number; cachedInput?: number }>;

export type BudgetStop = 'max_turns' | 'max_tokens' | 'max_cost';

/** What one call holds until it ends. */
export interface Reservation {
  model: string;
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
}

/** Request bytes per estimated input token: ~4 for English text and JSON (a tokenizer's average). */
export const BYTES_PER_TOKEN = 4;

/** The costs of a call at the model's price; undefined when the model has none. */
export function priceOf(prices: Prices, model: string, u: GatewayUsage): number | undefined {
  const p = prices[model];
  if (!p) return undefined;
  const fresh = u.inputTokens - u.cachedTokens;
  return (fresh * p.input + u.cachedTokens * (p.cachedInput ?? p.input) + u.outputTokens * p.output) / 1e6;
}

export class GatewayBudget {
  /** Finished calls and what they used. */
  readonly used = { calls: 0, tokens: 0, costUsd: 0 };
  /** Calls under way and what they hold. */
  private readonly held = { calls: 0, tokens: 0, costUsd: 0 };

  constructor(
    private readonly limits: GatewayLimits,
    private readonly prices: Prices,
  ) {}

  /** Which budget is spent by finished calls alone (nothing more will be forwarded). */
  spent(): BudgetStop | undefined {
    const { maxCalls, maxTokens, maxCostUsd } = this.limits;
    if (maxCalls !== undefined && this.used.calls >= maxCalls) return 'max_turns';
    if (maxTokens !== undefined && this.used.tokens >= maxTokens) return 'max_tokens';
    if (maxCostUsd !== undefined && this.used.costUsd >= maxCostUsd) return 'max_cost';
    return undefined;
  }

  /**
   * Reserves a call of `model` with `requestBytes` of request and `asked`
   * output tokens (undefined: the provider's default). Returns the output cap
   * to forward with (undefined: no token or cost budget, the call as asked),
   * or the budget that leaves no room for it.
   */
  reserve(
    model: string,
    requestBytes: number,
    asked: number | undefined,
  ): { reservation: Reservation; outputCap?: number } | { stop: BudgetStop } {
    const { maxCalls, maxTokens } = this.limits;
    if (maxCalls !== undefined && this.used.calls + this.held.calls >= maxCalls) return { stop: 'max_turns' };
    const inputTokens = Math.ceil(requestBytes / BYTES_PER_TOKEN);
    const room = this.outputRoom(model, inputTokens);
    if (room !== undefined && room < 1) return { stop: maxTokens !== undefined ? 'max_tokens' : 'max_cost' };
    const outputTokens = room === undefined ? (asked ?? 0) : Math.min(asked ?? room, room);
    const usage = { inputTokens, outputTokens, cachedTokens: 0 };
    const reservation = { model, inputTokens, outputTokens, costUsd: priceOf(this.prices, model, usage) ?? 0 };
    this.held.calls++;
    this.held.tokens += inputTokens + outputTokens;
    this.held.costUsd += reservation.costUsd;
    return room === undefined ? { reservation } : { reservation, outputCap: outputTokens };
  }

  /**
   * The call ended: its reservation is released and what it used is counted,
   * or, when its usage could not be read, all it reserved. Returns what is counted.
   */
  settle(r: Reservation, usage: GatewayUsage | undefined): { tokens: number; costUsd: number } {
    this.held.calls--;
    this.held.tokens -= r.inputTokens + r.outputTokens;
    this.held.costUsd -= r.costUsd;
    const counted = usage
      ? { tokens: usage.inputTokens + usage.outputTokens, costUsd: priceOf(this.prices, r.model, usage) ?? 0 }
      : { tokens: r.inputTokens + r.outputTokens, costUsd: r.costUsd };
    this.used.calls++;
    this.used.tokens += counted.tokens;
    this.used.costUsd += counted.costUsd;
    return counted;
  }

  /** Output tokens a call with this input may still produce within the token and cost budgets; undefined: no limit. */
  private outputRoom(model: string, inputTokens: number): number | undefined {
    const { maxTokens, maxCostUsd } = this.limits;
    const rooms: number[] = [];
    if (maxTokens !== undefined) rooms.push(maxTokens - this.used.tokens - this.held.tokens - inputTokens);
    const price = this.prices[model];
    if (maxCostUsd !== undefined && price) {
      const left = maxCostUsd - this.used.costUsd - this.held.costUsd - (inputTokens * price.input) / 1e6;
      rooms.push(price.output > 0 ? Math.floor((left * 1e6) / price.output) : Number.MAX_SAFE_INTEGER);
    }
    return rooms.length ? Math.floor(Math.min(...rooms)) : undefined;
  }
}
