import type { RedisMs } from '../time.js';
import { ReplyError } from 'ioredis';
import { ErrorCode, ResilimitError } from '../options/errors.js';
import { redisCallError } from '../path/failures.js';
import { configure, decide, decideBatch, refundCalls } from '../internal.js';
import { checkCallOptions, checkCost, checkId, checkKey, memberOf, type CallId } from '../options/input.js';
import {
  integer,
  MAX_INT,
  resolveRedisWindowOptions,
  resolveWindowOptions,
  type RedisWindowOptions,
  type ResolvedRedisWindowOptions,
} from '../options/options.js';
import { redisKey } from './redisKey.js';
import { loadScript, replyIntegers, runScript } from './script.js';
import type { Decision, LimitOptions, RateWindow } from '../types.js';

const slidingWindow = loadScript('sliding-window');
const blockScript = loadScript('block');
const refundScript = loadScript('refund');

/** What the script tells beyond the decision: the time it decided at and whether the id was a repeat. */
export type RedisDecision = Decision & {
  /** The time of the decision, in ms since the epoch (Redis's clock unless `now` was given). */
  nowMs: RedisMs;
  /** True when the call's id was already in the window: admitted, not counted again. */
  duplicate: boolean;
  /** True when the call was refused because its key is blocked (`block()`, `blockMs`): `retryAfterMs` counts the block. */
  blocked: boolean;
};

/**
 * A decision of a batch, as the limiter reads it: also the permits in use in the key's window after
 * the call, every instance's (exact, also when the call was decided with permits left free). @internal
 */
export type BatchDecision = RedisDecision & { readonly used: number };

/**
 * What a batch tells of one call: its decision, or why Redis could not decide it while deciding the
 * others (its key holds a value of another type: `ERR_RESILIMIT_REDIS_REPLY`). @internal
 */
export type BatchOutcome = BatchDecision | ResilimitError;

/** The decision a batch gave a call; throws the error of a call Redis could not decide. @internal */
export function decisionOf(outcome: BatchOutcome): BatchDecision {
  if (outcome instanceof ResilimitError) throw outcome;
  return outcome;
}

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
    const { redis, now } = this.#options;
    try {
      return Number(await runScript(redis, blockScript, [redisKeyOfKey], [now === undefined ? '' : Math.floor(now()), ms]));
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
    const { redis, prefix, windowMs, now, blockMs } = this.#options;
    const keys: string[] = [];
    const effective: number[] = [];
    // The script's arguments: the batch's own, then, when every call is of cost 1 under one limit (the
    // usual batch), that limit once and the ids; else a limit, a cost and an id per call.
    const args: (string | number)[] = [windowMs, now === undefined ? '' : Math.floor(now()), notAfterMs === undefined ? '' : Math.ceil(notAfterMs), blockMs, ''];
    // The permits left free are asked once per run of calls of one limit (a batch usually has one).
    let of = 0;
    let reserve = 0;
    for (const call of calls) {
      if (call.limit !== of) reserve = reserveOf === undefined ? 0 : reserveOf((of = call.limit));
      effective.push(reserve > 0 ? Math.max(call.limit - reserve, call.cost, 1) : call.limit);
      keys.push(redisKey(prefix, call.key));
    }
    const shared = effective[0] as number;
    if (calls.every((call, i) => call.cost === 1 && effective[i] === shared)) {
      args[4] = shared;
      for (const call of calls) args.push(memberOf(call.id));
    } else {
      calls.forEach((call, i) => args.push(effective[i] as number, call.cost, memberOf(call.id)));
    }
    let reply: unknown;
    try {
      reply = await runScript(redis, slidingWindow, keys, args);
    } catch (error) {
      throw redisCallError(error);
    }
    return toDecisions(reply, calls, effective);
  }

  /**
   * Removes calls of `key` from its window by id (`lua/refund.lua`), in one script call: the permits
   * each gave back, in order (0: not in the window). `cost`: a call's cost when known, tried first
   * (else the script scans for it). Options are read as it is sent. @internal
   */
  async [refundCalls](key: string, calls: readonly { readonly id: string; readonly cost: number | undefined }[]): Promise<number[]> {
    const { redis, prefix, windowMs, now } = this.#options;
    const args: (string | number)[] = [windowMs, now === undefined ? '' : Math.floor(now())];
    for (const call of calls) args.push(call.id, call.cost ?? '');
    let reply: unknown;
    try {
      reply = await runScript(redis, refundScript, [redisKey(prefix, key)], args);
    } catch (error) {
      throw redisCallError(error);
    }
    const permits = typeof reply === 'string' ? reply.split(',').map(Number) : [];
    if (permits.length !== calls.length || !permits.every((v) => Number.isSafeInteger(v) && v >= 0)) {
      throw new ResilimitError(ErrorCode.REDIS_REPLY, `Unexpected reply from the refund script: ${JSON.stringify(reply)}`);
    }
    return permits;
  }

  /** Changes the limit and window for the calls that follow. @internal */
  [configure](changes: { limit?: number; windowMs?: number }): void {
    this.#options = Object.freeze({ ...this.#options, ...resolveWindowOptions({ ...this.#options, ...changes }) });
  }
}

/**
 * One call of a batch: checked arguments (a generated id is made into its member here, as it leaves
 * the process), and the limit it is decided against.
 */
export type BatchCall = { readonly key: string; readonly cost: number; readonly id: CallId; readonly limit: number };

/**
 * Reads the script's reply: "nowMs,stale" then "allowed,used,retryAfterMs,resetAtMs,flags" per call
 * (flags 4: the call's key holds a value of another type, and the call was not decided).
 */
function toDecisions(reply: unknown, calls: readonly BatchCall[], effective: readonly number[]): BatchOutcome[] {
  const values = replyIntegers(slidingWindow, reply, 2 + 5 * calls.length);
  const nowMs = values[0] as RedisMs;
  const decisions: BatchOutcome[] = [];
  for (let c = 0, i = 2; c < calls.length; c += 1, i += 5) {
    const flags = values[i + 4] as number;
    if (flags === WRONG_TYPE) {
      decisions.push(wrongType((calls[c] as BatchCall).key));
      continue;
    }
    const used = values[i + 1] as number;
    decisions.push({
      allowed: values[i] === 1,
      limit: (calls[c] as BatchCall).limit,
      remaining: Math.max((effective[c] as number) - used, 0),
      retryAfterMs: values[i + 2] as number,
      resetAtMs: values[i + 3] as number,
      source: 'redis',
      nowMs,
      duplicate: (flags & 1) === 1,
      blocked: (flags & 2) === 2,
      used,
    });
  }
  return decisions;
}

/** The flags of a call whose key holds a value of another type (see `lua/sliding-window.lua`). */
const WRONG_TYPE = 4;

/** The error of a call Redis did not decide because its key holds another type; `cause`: Redis's error, as the script saw it. */
function wrongType(key: string): ResilimitError {
  return new ResilimitError(
    ErrorCode.REDIS_REPLY,
    `Redis rejected the call: WRONGTYPE: the Redis key of ${JSON.stringify(key)} holds a value of another type than this limiter's sorted set (another program's key under this prefix?)`,
    { cause: new ReplyError('WRONGTYPE Operation against a key holding the wrong kind of value') },
  );
}
