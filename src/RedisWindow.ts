import { redisCallError } from './failures.js';
import { configure, decide, decideBatch } from './internal.js';
import { checkCallOptions, checkCost, checkId, checkKey, memberOf, type CallId } from './input.js';
import {
  resolveRedisWindowOptions,
  resolveWindowOptions,
  type RedisWindowOptions,
  type ResolvedRedisWindowOptions,
} from './options.js';
import { redisKey } from './redisKey.js';
import { loadScript, replyIntegers, runScript } from './script.js';
import type { Decision, LimitOptions, RateWindow } from './types.js';

const slidingWindow = loadScript('sliding-window');

/** What the script tells beyond the decision: the time it decided at and whether the id was a repeat. */
export type RedisDecision = Decision & {
  /** The time of the decision, in ms since the epoch (Redis's clock unless `now` was given). */
  nowMs: number;
  /** True when the call's id was already in the window: admitted, not counted again. */
  duplicate: boolean;
};

/**
 * A decision of a batch, as the limiter reads it: also the permits in use in the key's window after
 * the call, every instance's (exact unless the limit was lowered below them). @internal
 */
export type BatchDecision = RedisDecision & { readonly used: number };

/**
 * An exact sliding window kept in one Redis sorted set per key and decided atomically by
 * `lua/sliding-window.lua`, on a single Redis or a Redis Cluster.
 *
 * At every instant, the permits admitted in the last `windowMs` never exceed `limit`, however many
 * processes and clients share the key. Time comes from Redis's `TIME` unless `now` is given.
 * This class has no fallback: when Redis cannot answer, the promise rejects with
 * `ERR_RESILIMIT_REDIS_UNAVAILABLE` (`ResilientLimiter` adds the breaker and the local tier).
 *
 * @example
 * const window = new RedisWindow({ redis, limit: 100, windowMs: 60_000 });
 * const decision = await window.limit('user:42');
 */
export class RedisWindow implements RateWindow {
  #options: ResolvedRedisWindowOptions;

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a missing or out-of-range option. */
  constructor(options: RedisWindowOptions) {
    this.#options = resolveRedisWindowOptions(options);
  }

  /** The resolved options (frozen). */
  get options(): ResolvedRedisWindowOptions {
    return this.#options;
  }

  /** The Redis key that holds the window of `key`. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`. */
  keyOf(key: string): string {
    checkKey(key);
    return redisKey(this.#options.prefix, key);
  }

  /**
   * Decides one call of `key` and consumes its cost when admitted.
   * @throws {ResilimitError} synchronously-checked misuse rejects with `ERR_RESILIMIT_INVALID_KEY`,
   *   `ERR_RESILIMIT_INVALID_COST` or `ERR_RESILIMIT_INVALID_ID`; a Redis failure with
   *   `ERR_RESILIMIT_REDIS_UNAVAILABLE` or `ERR_RESILIMIT_REDIS_REPLY` (the original error is the `cause`).
   */
  async limit(key: string, options?: LimitOptions): Promise<RedisDecision> {
    checkKey(key);
    checkCallOptions('RedisWindow.limit()', options);
    const cost = checkCost(options?.cost, this.#options.limit);
    return this[decide](key, cost, checkId(options?.id));
  }

  /** Tells what a call of cost 1 would get now, without consuming anything (the script writes nothing). */
  async peek(key: string): Promise<RedisDecision> {
    checkKey(key);
    return this[decide](key, 0, '');
  }

  /** Forgets every permit used by `key`. */
  async reset(key: string): Promise<void> {
    const redisKeyOfKey = this.keyOf(key);
    try {
      await this.#options.redis.del(redisKeyOfKey);
    } catch (error) {
      throw redisCallError(error);
    }
  }

  /**
   * Runs the script with checked arguments. `notAfterMs` (on the window's clock) makes a call that
   * reaches Redis after it change nothing, so a call its caller gave up on cannot consume quota later.
   * @internal
   */
  async [decide](key: string, cost: number, id: string, notAfterMs?: number): Promise<RedisDecision> {
    const { used: _, ...decision } = (await this[decideBatch]([{ key, cost, id }], notAfterMs))[0] as BatchDecision;
    return decision;
  }

  /**
   * Decides several calls in one script call, in order (on a Cluster, their keys must share a slot).
   * `reserve` permits of the limit are left free, but never so many that a call's cost could not fit
   * (the script refuses a cost above its limit): the decisions still report the limit, and
   * `remaining` / `retryAfterMs` what is usable now.
   * @internal
   */
  async [decideBatch](calls: readonly BatchCall[], notAfterMs?: number, reserve = 0): Promise<BatchDecision[]> {
    const { redis, prefix, limit, windowMs, now } = this.#options;
    const effective = reserve > 0 ? Math.max(limit - reserve, ...calls.map((call) => call.cost), 1) : limit;
    const keys: string[] = [];
    const args: (string | number)[] = [
      effective,
      windowMs,
      now === undefined ? '' : Math.floor(now()),
      notAfterMs === undefined ? '' : Math.ceil(notAfterMs),
    ];
    for (const call of calls) {
      keys.push(redisKey(prefix, call.key));
      args.push(call.cost, memberOf(call.id));
    }
    let reply: unknown;
    try {
      reply = await runScript(redis, slidingWindow, keys, args);
    } catch (error) {
      throw redisCallError(error);
    }
    return toDecisions(reply, calls.length, limit, effective);
  }

  /** Changes the limit and window for the calls that follow. @internal */
  [configure](changes: { limit?: number; windowMs?: number }): void {
    this.#options = Object.freeze({ ...this.#options, ...resolveWindowOptions({ ...this.#options, ...changes }) });
  }
}

/** One call of a batch: checked arguments (a generated id is made into its member here, as it leaves the process). */
export type BatchCall = { readonly key: string; readonly cost: number; readonly id: CallId };

/** Reads the script's reply: "nowMs,stale" then "allowed,remaining,retryAfterMs,resetAtMs,duplicate" per call. */
function toDecisions(reply: unknown, count: number, limit: number, effective: number): BatchDecision[] {
  const values = replyIntegers(slidingWindow, reply, 2 + 5 * count);
  const nowMs = values[0] as number;
  const decisions: BatchDecision[] = [];
  for (let i = 2; i < values.length; i += 5) {
    decisions.push({
      allowed: values[i] === 1,
      limit,
      remaining: values[i + 1] as number,
      retryAfterMs: values[i + 2] as number,
      resetAtMs: values[i + 3] as number,
      source: 'redis',
      nowMs,
      duplicate: values[i + 4] === 1,
      used: effective - (values[i + 1] as number),
    });
  }
  return decisions;
}
