import type { ThrottlerStorage } from '@nestjs/throttler';
import { ResilientLimiter } from '../limiter/ResilientLimiter.js';
import { ErrorCode, ResilimitError } from '../base/errors.js';
import type { Decision } from '../types.js';
import { retryAfterSeconds } from '../http/fields.js';
import { hitsOf } from './hits.js';
import {
  resolveThrottlerStorageOptions,
  throttlerValue,
  type ResilimitThrottlerStorageOptions,
  type ResolvedThrottlerStorageOptions,
} from './throttlerOptions.js';
import { requireRuntime } from '../base/runtime.js';

/** What `increment()` resolves with: @nestjs/throttler's `ThrottlerStorageRecord` (its package index does not export the name). */
type ThrottlerStorageRecord = Awaited<ReturnType<ThrottlerStorage['increment']>>;

/**
 * The record @nestjs/throttler reads of a decision: `isBlocked` is the limiter's refusal (the guard
 * throws its `ThrottlerException`, a 429, on it alone). `totalHits` makes its `X-RateLimit-Remaining`
 * the decision's `remaining` ({@link hitsOf}); `timeToExpire` (seconds, `X-RateLimit-Reset`) is
 * when the window will be empty; `timeToBlockExpire` (seconds, `Retry-After`) when a permit comes
 * back, a block included.
 */
function recordOf(d: Decision, limit: number, now: number): ThrottlerStorageRecord {
  return {
    totalHits: hitsOf(d, limit),
    timeToExpire: Math.max(0, Math.ceil((d.resetAtMs - now) / 1000)),
    isBlocked: !d.allowed,
    timeToBlockExpire: d.allowed ? 0 : retryAfterSeconds(d.retryAfterMs),
  };
}

/**
 * A @nestjs/throttler (v6) `ThrottlerStorage` backed by `ResilientLimiter`s: the limiter decides each
 * request (Redis's exact sliding window, or the mode's answer while Redis cannot answer), and the
 * guard answers 429 when it refuses. It never rejects because of Redis, and never waits for it much
 * past the breaker's deadline.
 *
 * The throttlers give `limit`, `ttl` and `blockDuration` with every call, per route. A limiter has
 * one limit, one window and one `blockMs`, so the storage makes one limiter per different
 * (`limit`, `ttl`, `blockDuration`), at its first call, at most `maxLimiters`. `ttl` is the window,
 * `blockDuration` the limiter's `blockMs`: a refused call blocks its key that long (the guard's
 * default is `ttl`; 0 blocks nothing). A throttler's calls count under `<throttler name>:<key>`.
 *
 * The storage owns its limiters: Nest's `app.close()` closes them (`onApplicationShutdown()`). The
 * Redis client stays yours.
 * @example
 * ThrottlerModule.forRoot({
 *   throttlers: [{ limit: 100, ttl: 60_000 }],
 *   storage: new ResilimitThrottlerStorage({ redis, prefix: 'api:throttle:' }),
 * });
 */
export class ResilimitThrottlerStorage implements ThrottlerStorage {
  readonly #options: ResolvedThrottlerStorageOptions;
  /** By `<limit>:<ttl>:<blockDuration>`: at most `maxLimiters`. */
  readonly #limiters = new Map<string, ResilientLimiter>();
  /** `close()`'s, once called. */
  #closed: Promise<void> | undefined;

  /**
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for an option a limiter would refuse, for
   *   `limit`, `windowMs` or `blockMs` (the throttlers give them), and for a bad `maxLimiters` or `prefix`.
   */
  constructor(options: ResilimitThrottlerStorageOptions) {
    requireRuntime();
    this.#options = resolveThrottlerStorageOptions(options);
  }

  /**
   * The limiters made so far, by `<limit>:<ttl>:<blockDuration>`: to watch them (`stats()`, events,
   * `instrumentLimiter()` of `resilimit/metrics`). A copy: the storage keeps its own.
   */
  get limiters(): ReadonlyMap<string, ResilientLimiter> {
    return new Map(this.#limiters);
  }

  /**
   * Decides one request of `key` for the throttler `throttlerName` with the limiter of its `limit`,
   * `ttl` (ms) and `blockDuration` (ms), made at the first call that needs it.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a `limit` that is not an integer 1 … 2³¹−1,
   *   a `ttl` not 1 … 2³¹−1 ms, a `blockDuration` not 0 … 2³¹−1 ms, or a limiter past `maxLimiters`;
   *   `ERR_RESILIMIT_INVALID_KEY` for a key the limiter refuses; `ERR_RESILIMIT_CLOSED` after `close()`.
   *   As rejections: the guard lets Nest answer them as errors (500). Never because of Redis.
   */
  async increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string): Promise<ThrottlerStorageRecord> {
    const limiter = this.#limiterFor(throttlerName, limit, ttl, blockDuration);
    const d = await limiter.limit(`${throttlerName}:${key}`);
    return recordOf(d, limit, Date.now());
  }

  /** Closes every limiter the storage made (see `ResilientLimiter.close()`); `increment()` rejects afterwards. Idempotent. */
  close(): Promise<void> {
    this.#closed ??= Promise.all([...this.#limiters.values()].map((l) => l.close())).then(() => undefined);
    return this.#closed;
  }

  /** Nest's shutdown hook (`app.close()`, or a signal with `enableShutdownHooks()`): {@link close}. */
  onApplicationShutdown(): Promise<void> {
    return this.close();
  }

  /** Same as {@link close}, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #limiterFor(throttler: string, limit: number, ttl: number, blockDuration: number): ResilientLimiter {
    if (this.#closed !== undefined)
      throw new ResilimitError(ErrorCode.CLOSED, 'ResilimitThrottlerStorage.increment() was called after close()');
    throttlerValue('limit', limit, 1, throttler);
    throttlerValue('ttl', ttl, 1, throttler);
    throttlerValue('blockDuration', blockDuration, 0, throttler);
    const id = `${limit}:${ttl}:${blockDuration}`;
    let limiter = this.#limiters.get(id);
    if (limiter !== undefined) return limiter;
    const { prefix, maxLimiters } = this.#options;
    if (this.#limiters.size >= maxLimiters) {
      throw new ResilimitError(
        ErrorCode.INVALID_OPTION,
        `Expected at most \`maxLimiters\` (${maxLimiters}) different (limit, ttl, blockDuration) among the throttlers, ` +
          `got one more: ${id} of the throttler ${JSON.stringify(throttler)} (raise \`maxLimiters\`, or give the routes fewer different limits)`,
      );
    }
    limiter = new ResilientLimiter({ ...this.#options.limiter, prefix: `${prefix}${id}:`, limit, windowMs: ttl, blockMs: blockDuration });
    this.#limiters.set(id, limiter);
    return limiter;
  }
}
