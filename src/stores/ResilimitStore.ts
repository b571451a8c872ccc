import { AsyncLocalStorage } from 'node:async_hooks';
import type { ClientRateLimitInfo, IncrementResponse, Options, Store } from 'express-rate-limit';
import type { ResilientLimiter } from '../limiter/ResilientLimiter.js';
import { describe, ErrorCode, invalidOption, isResilimitError, ResilimitError } from '../base/errors.js';
import { retryAfterSeconds } from '../http/fields.js';
import { hitsOf } from './hits.js';
import { requireRuntime } from '../base/runtime.js';

/** What {@link ResilimitStore} uses of a limiter: a `ResilientLimiter` fits. */
export type StoreLimiter = Pick<ResilientLimiter, 'limit' | 'refund' | 'reset' | 'peek' | 'stats'>;

/**
 * One request's call, from `increment()` to `decrement()`: its key, and the id of its admitted call
 * until it is refunded (undefined for a refusal, which took nothing, and once refunded).
 */
type Call = { readonly key: string; id: string | undefined };

/** A name per limiter, for express-rate-limit's double-count check: the same key counted twice by one limiter in one request. */
const names = new WeakMap<object, string>();
let named = 0;

function nameOf(limiter: object): string {
  let name = names.get(limiter);
  if (name === undefined) {
    named += 1;
    name = `resilimit#${named}:`;
    names.set(limiter, name);
  }
  return name;
}

/**
 * express-rate-limit's `limit` and `windowMs` must be the limiter's: it shows them in its headers, and
 * the limit is what it compares the hits with. A limiter whose `limit` is a function of the key gives
 * `stats().limit` 0 before its first call (a number limit is at least 1): it cannot be used.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming the option, the limiter's value and the one given.
 */
function checkOptions(
  options: Pick<Options, 'limit' | 'windowMs'>,
  limiter: { readonly limit: number; readonly windowMs: number },
): number {
  if (limiter.limit === 0) {
    throw new ResilimitError(
      ErrorCode.INVALID_OPTION,
      'Expected `limiter` to be a ResilientLimiter whose `limit` is a number, got one whose `limit` is a function of the key: ' +
        'express-rate-limit counts hits against one limit per middleware (for limits per key, use resilimit/http)',
    );
  }
  const mismatch = (name: string, expected: number, got: unknown, byDefault: number): ResilimitError =>
    new ResilimitError(
      ErrorCode.INVALID_OPTION,
      `Expected express-rate-limit's \`${name}\` to be the limiter's, \`${expected}\`, got ${describe(got)}` +
        `${got === byDefault ? ` (also express-rate-limit's default, taken when \`${name}\` is not given)` : ''}: ` +
        `give rateLimit() the \`${name}\` of the ResilientLimiter (a limiter with a \`limit\` function cannot be used: one middleware has one limit)`,
    );
  if (options.limit !== limiter.limit) throw mismatch('limit', limiter.limit, options.limit, 5);
  if (options.windowMs !== limiter.windowMs) throw mismatch('windowMs', limiter.windowMs, options.windowMs, 60_000);
  return limiter.limit;
}

/**
 * An express-rate-limit (v8) `Store` backed by a `ResilientLimiter`: the limiter decides each request
 * (Redis's exact sliding window, or the mode's answer while Redis cannot answer), and the store tells
 * express-rate-limit hits that make its own answer the same. It never throws because of Redis, and
 * never waits for it much past the breaker's deadline.
 *
 * - `increment(key)`: one `limit(key)` call. Admitted: `totalHits` is the permits used, so its
 *   `remaining` is the decision's; `resetTime` is when the window will be empty. Refused: `limit + 1`
 *   hits, and `resetTime` is when a permit comes back (`Retry-After`, whole seconds, at least 1).
 * - `decrement(key)` (`skipFailedRequests`, `skipSuccessfulRequests`): refunds the request's own call,
 *   by its id, exactly. express-rate-limit passes only the key: the store keeps the call's id in the
 *   request's async context (`AsyncLocalStorage`), from which express-rate-limit 8 calls `decrement()`.
 *   A refused request took nothing and gives nothing back. Called elsewhere, it does nothing: the
 *   request counts (the safe side).
 * - `resetKey(key)`: `reset(key)`. While Redis cannot answer it resolves all the same, once the local
 *   tiers forgot the key (express-rate-limit types it `void`: a rejection would go unhandled).
 * - `get(key)`: `peek(key)`; undefined when the key used nothing.
 *
 * express-rate-limit's `limit` and `windowMs` must equal the limiter's (a number): otherwise `init()`
 * throws, express-rate-limit logs it, and `rateLimit()` itself throws the same error, so the app
 * fails when it is built (see {@link ResilimitStore.init}). There is no
 * `resetAll()`: resilimit does not scan Redis for keys. The limiter stays yours: close it yourself.
 * @example
 * const limiter = new ResilientLimiter({ redis, limit: 100, windowMs: 60_000, prefix: 'api:' });
 * app.use(rateLimit({ limit: 100, windowMs: 60_000, store: new ResilimitStore(limiter) }));
 */
export class ResilimitStore implements Store {
  /** Keys of one store may be counted by other instances of the service: they are in Redis. */
  readonly localKeys = false;
  /** Names the limiter for express-rate-limit's double-count check: one value per limiter. */
  readonly prefix: string;
  readonly #limiter: StoreLimiter;
  /** Each request's call, in its async context. */
  readonly #calls = new AsyncLocalStorage<Call>();
  /** express-rate-limit's limit, once `init()` checked it; the error it threw, if any. */
  #limit: number | ResilimitError | undefined;

  /**
   * @param limiter The `ResilientLimiter` that decides. One store per express-rate-limit middleware;
   *   several stores may share a limiter (one count across routes).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when `limiter` is not a limiter.
   */
  constructor(limiter: StoreLimiter) {
    requireRuntime();
    const l = limiter as Partial<Record<keyof StoreLimiter, unknown>> | null;
    if (
      typeof l !== 'object' ||
      l === null ||
      !['limit', 'refund', 'reset', 'peek', 'stats'].every((m) => typeof l[m as keyof StoreLimiter] === 'function')
    ) {
      throw invalidOption('limiter', 'a ResilientLimiter', limiter);
    }
    this.#limiter = limiter;
    this.prefix = nameOf(limiter);
  }

  /**
   * Called by express-rate-limit with its options, once, from `rateLimit()`: checks that its `limit`
   * and `windowMs` are the limiter's, and that the limiter's `limit` is a number.
   *
   * express-rate-limit 8 catches what `init()` throws and only logs it: the app would start and every
   * request fail. So on a mismatch the store also throws the error from its `resetKey` property until
   * the next microtask: `rateLimit()` reads it right after `init()`, to give the middleware its
   * `resetKey`, so `rateLimit()` throws the error and the app fails when it is built. Should an
   * express-rate-limit not read it there, `resetKey` is the method again at the next microtask, and
   * every call then fails with the error (`increment()` and `get()` reject with it).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming the option, the limiter's value and the one given.
   */
  init(options: Options): void {
    try {
      this.#limit = checkOptions(options, this.#limiter.stats());
    } catch (error) {
      if (!(error instanceof ResilimitError)) throw error;
      this.#limit = error;
      this.#throwOnNextRead('resetKey', error);
      throw error;
    }
  }

  /** `this[name]` throws `error` when it is next read, until then or the next microtask; then it is the method again. */
  #throwOnNextRead(name: 'resetKey', error: ResilimitError): void {
    const restore = (): void => void Reflect.deleteProperty(this, name);
    Object.defineProperty(this, name, {
      configurable: true,
      get: () => {
        restore();
        throw error;
      },
    });
    queueMicrotask(restore);
  }

  /**
   * Decides one request of `key` (the limiter's `limit(key)`), in hits express-rate-limit reads.
   * @throws {ResilimitError} the limiter's misuse errors (`ERR_RESILIMIT_INVALID_KEY`, `…_CLOSED`) and
   *   `init()`'s, as rejections; never because of Redis.
   */
  increment(key: string): Promise<IncrementResponse> {
    const call: Call = { key, id: undefined };
    // Set in the caller's async context, which the rest of the request runs in: express-rate-limit
    // calls decrement() from it. Before any await, so that the caller's continuation carries it.
    this.#calls.enterWith(call);
    return this.#increment(call);
  }

  async #increment(call: Call): Promise<IncrementResponse> {
    const limit = this.#limitNow();
    const d = await this.#limiter.limit(call.key);
    if (d.allowed && d.shadowRejected !== true) call.id = d.id;
    if (!d.allowed) return { totalHits: hitsOf(d, limit), resetTime: new Date(Date.now() + retryAfterSeconds(d.retryAfterMs) * 1000) };
    return { totalHits: hitsOf(d, limit), resetTime: new Date(d.resetAtMs) };
  }

  /**
   * Gives back the permit of the request whose response express-rate-limit does not count (its
   * `skipFailedRequests`, `skipSuccessfulRequests`): the limiter's `refund(key, id)` with the id of
   * that request's call, found in its async context. Nothing for a refused request, nor outside it.
   * @throws {ResilimitError} the limiter's `refund()` errors (`ERR_RESILIMIT_CLOSED`, `…_REDIS_REPLY`), as rejections.
   */
  async decrement(key: string): Promise<void> {
    const call = this.#calls.getStore();
    if (call === undefined || call.key !== key || call.id === undefined) return;
    const { id } = call;
    call.id = undefined;
    await this.#limiter.refund(key, id);
  }

  /**
   * Forgets every permit `key` used (the limiter's `reset(key)`). While Redis cannot answer, resolves
   * once the local tiers forgot it: Redis counts the key's calls until they leave its window.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `…_CLOSED`, `…_REDIS_REPLY`, as rejections.
   */
  async resetKey(key: string): Promise<void> {
    try {
      await this.#limiter.reset(key);
    } catch (error) {
      if (!isResilimitError(error) || error.code !== ErrorCode.REDIS_UNAVAILABLE) throw error;
    }
  }

  /**
   * What `key` used (the limiter's `peek(key)`), consuming nothing: undefined when it used nothing.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `…_CLOSED`, and `init()`'s error, as rejections.
   */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const limit = this.#limitNow();
    const d = await this.#limiter.peek(key);
    const used = limit - d.remaining;
    return used > 0 ? { totalHits: used, resetTime: new Date(d.resetAtMs) } : undefined;
  }

  /** The limit express-rate-limit compares with: checked by `init()`, or the limiter's when it was not called. */
  #limitNow(): number {
    const limit = (this.#limit ??= this.#limiter.stats().limit);
    if (typeof limit !== 'number') throw limit;
    return limit;
  }
}
