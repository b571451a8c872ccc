import { redisCallError } from './failures.js';
import type { ResilimitError } from '../base/errors.js';
import { configure, decide, decideBatch, giveLease, refundCalls, takeLease } from '../base/internal.js';
import { checkCallOptions, checkCost, checkId, checkKey } from '../base/call.js';
import {
  integer,
  MAX_INT,
  resolveRedisWindowOptions,
  resolveWindowOptions,
  type RedisWindowOptions,
  type ResolvedRedisWindowOptions,
} from '../options/options.js';
import { redisKey } from './redisKey.js';
import { readBlock } from './scripts/block.js';
import { windowModel } from './models/choose.js';
import type { WindowModel } from './models/WindowModel.js';
import { giveArgs, leaseScript, readTake, takeArgs, type LeaseAsk, type LeaseDecision } from './scripts/lease.js';
import { decisionOf, readDecisions, type BatchCall, type BatchOutcome, type RedisDecision } from './scripts/slidingWindow.js';
import type { LimitOptions, RateWindow } from '../types.js';
import type { RedisKey } from '../base/time.js';
import type { RefundAsk } from './models/WindowModel.js';

export { decisionOf, type BatchCall, type BatchDecision, type BatchOutcome, type RedisDecision } from './scripts/slidingWindow.js';

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
  /** How the window is kept in Redis: chosen here, once. */
  readonly model: WindowModel;

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a missing or out-of-range option. */
  constructor(options: RedisWindowOptions) {
    this.#options = resolveRedisWindowOptions(options);
    this.model = windowModel(this.#options);
  }

  /** The resolved options (frozen). */
  get options(): ResolvedRedisWindowOptions {
    return this.#options;
  }

  /** The Redis key that holds the window of `key`. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`. */
  keyOf(key: string): RedisKey {
    checkKey(key);
    return this.#keyOf(key);
  }

  #keyOf(key: string): RedisKey {
    return this.model.keyOf(this.#options.prefix, key);
  }

  /** The script's `nowMs`: the window's clock, or '' for Redis's `TIME`. */
  #nowArg(): number | '' {
    const { now } = this.#options;
    return now === undefined ? '' : Math.floor(now());
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
    if (options?.id !== undefined) this.model.checkCallerId(options.id);
    return this[decide](key, cost, checkId(options?.id));
  }

  /**
   * Refuses every call of `key` for `ms` (0 lifts a block), on every client of this window: held in
   * Redis, in the key's sorted set. Resolves with when the block ends (0 when lifted), ms since the
   * epoch on the window's clock.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_OPTION` for a bad `ms`;
   *   `ERR_RESILIMIT_REDIS_UNAVAILABLE` or `ERR_RESILIMIT_REDIS_REPLY` when Redis did not block it.
   */
  async block(key: string, ms: number): Promise<number> {
    const redisKeyOfKey = this.keyOf(key);
    integer('ms', ms, 0, MAX_INT);
    const { redis, windowMs } = this.#options;
    try {
      return readBlock(await this.model.block(redis, { redisKey: redisKeyOfKey, windowMs, nowArg: this.#nowArg(), ms }));
    } catch (error) {
      throw redisCallError(error);
    }
  }

  /** Tells what a call of cost 1 would get now, without consuming anything (the script writes nothing). */
  async peek(key: string): Promise<RedisDecision> {
    checkKey(key);
    return this[decide](key, 0, '');
  }

  /** Forgets every permit used by `key`. */
  async reset(key: string): Promise<void> {
    const redisKeyOfKey = this.keyOf(key);
    const { redis, windowMs } = this.#options;
    try {
      await this.model.reset(redis, { redisKey: redisKeyOfKey, windowMs, nowArg: this.#nowArg() });
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
    const outcomes = await this[decideBatch]([{ key, cost, id, limit: this.#options.limit }], notAfterMs);
    const { used: _, ...decision } = decisionOf(outcomes[0] as BatchOutcome);
    return decision;
  }

  /**
   * Decides several calls in one script call, in order (on a Cluster, their keys must share a slot),
   * each against its own limit. `reserveOf(limit)` permits of a call's limit are left free, but never
   * so many that its cost could not fit (the script refuses a cost above its limit): the decisions
   * still report the limit, and `remaining` / `retryAfterMs` what is usable now.
   * @internal
   */
  async [decideBatch](calls: readonly BatchCall[], notAfterMs?: number, reserveOf?: (limit: number) => number): Promise<BatchOutcome[]> {
    const { redis, windowMs, blockMs } = this.#options;
    const keys: string[] = [];
    const effective: number[] = [];
    // The permits left free are asked once per run of calls of one limit (a batch usually has one).
    let of = 0;
    let reserve = 0;
    for (const call of calls) {
      if (call.limit !== of) reserve = reserveOf === undefined ? 0 : reserveOf((of = call.limit));
      effective.push(reserve > 0 ? Math.max(call.limit - reserve, call.cost, 1) : call.limit);
      keys.push(this.#keyOf(call.key));
    }
    const notAfterArg = notAfterMs === undefined ? '' : Math.ceil(notAfterMs);
    const { script, args } = this.model.decide({ windowMs, nowArg: this.#nowArg(), notAfterArg, blockMs, calls, effective });
    let reply: unknown;
    try {
      reply = await redis.run(script, keys, args);
    } catch (error) {
      throw redisCallError(error);
    }
    return readDecisions(reply, calls, effective, script);
  }

  /**
   * Takes a lease of permits of `ask.call.key` ahead (`lua/lease.lua`, the exact log only): the call's
   * decision with the permits granted (its cost included; 0 when refused), as a batch of one. @internal
   */
  async [takeLease](ask: LeaseAsk, notAfterMs?: number): Promise<[LeaseDecision | ResilimitError]> {
    const { redis, prefix, windowMs, blockMs } = this.#options;
    const args = takeArgs(windowMs, this.#nowArg(), notAfterMs === undefined ? '' : Math.ceil(notAfterMs), blockMs, ask);
    let reply: unknown;
    try {
      const window = redisKey(prefix, ask.call.key);
      reply = await redis.run(leaseScript, [window, `${window}:l:${ask.leaseId}`], args);
    } catch (error) {
      throw redisCallError(error);
    }
    return readTake(reply, ask);
  }

  /** Gives back `unused` permits of a lease of `granted` on `key`: the permits Redis gave back (0: the lease left the window). @internal */
  async [giveLease](key: string, leaseId: string, granted: number, unused: number): Promise<number> {
    const { redis, prefix, windowMs } = this.#options;
    try {
      return Number(await redis.run(leaseScript, [redisKey(prefix, key)], giveArgs(windowMs, this.#nowArg(), leaseId, granted, unused)));
    } catch (error) {
      throw redisCallError(error);
    }
  }

  /**
   * Removes calls of `key` from its window by id (`lua/refund.lua`), in one script call: the permits
   * each gave back, in order (0: not in the window). `cost`: a call's cost when known, tried first
   * (else the script scans for it). `allWindowMs`: in that window of `limitAll()`'s, not `limit()`'s.
   * Options are read as it is sent. @internal
   */
  async [refundCalls](key: string, calls: readonly RefundAsk[], allWindowMs?: number): Promise<number[]> {
    const { redis, windowMs, prefix } = this.#options;
    const nowArg = this.#nowArg();
    if (allWindowMs === undefined) return this.model.refund(redis, { redisKey: this.#keyOf(key), windowMs, nowArg, calls });
    const { redisKey, model } = this.model.allWindow(prefix, key, allWindowMs);
    return model.refund(redis, { redisKey, windowMs: allWindowMs, nowArg, calls });
  }

  /** Changes the limit and window for the calls that follow. @internal */
  [configure](changes: { limit?: number; windowMs?: number }): void {
    // A window counted by slices is checked against its slices by the caller (`Settings.update`).
    this.#options = Object.freeze({ ...this.#options, ...resolveWindowOptions({ ...this.#options, ...changes }) });
  }
}
