/** Which tier made a decision. */
export type DecisionSource = 'redis' | 'local' | 'fail-open' | 'fail-closed' | 'disabled';

/**
 * Why a decision was made where it was:
 * - `decided`: Redis decided;
 * - `breaker-open`: the breaker is open (or the half-open trial is already running): Redis not called;
 * - `timeout`: the Redis call missed `breaker.timeoutMs`;
 * - `redis-error`: Redis could not answer (connection lost or refused, `BUSY`, `LOADING`, …);
 * - `redis-reply-error`: Redis answered with an error about the request (see the `redisReplyError` event);
 * - `not-ready`: the client is not connected yet (or again);
 * - `saturated`: `maxInFlight` Redis calls are already outstanding;
 * - `slow`: the oldest outstanding Redis call is older than `slowCallMs`;
 * - `deny-cache`: Redis rejected this key and its `retryAfterMs` has not passed;
 * - `reconciling`: Redis is back, and the calls admitted while it was not (or that it lost) are being
 *   written into it first; or calls of this key admitted locally are not sent to Redis yet;
 * - `disabled`: the limiter is switched off (`setEnabled(false)`);
 * - `lease-ended`, `no-lease`, `no-share` (mode `'local'`, whatever kept Redis from deciding): this
 *   instance answers on less than its share, because its lease ended, because it has never reached
 *   Redis, or because its share is 0 (see `CapacityReason` and the `capacity` event).
 */
export type DecisionReason =
  | 'decided'
  | 'breaker-open'
  | 'timeout'
  | 'redis-error'
  | 'redis-reply-error'
  | 'not-ready'
  | 'saturated'
  | 'slow'
  | 'deny-cache'
  | 'reconciling'
  | 'disabled'
  | 'lease-ended'
  | 'no-lease'
  | 'no-share';

/**
 * The answer to "may this call go ahead?". A rejection is a decision, never an exception.
 */
export type Decision = {
  /** True when the call was admitted (and its cost consumed). */
  allowed: boolean;
  /** The limit that applied: permits per window. */
  limit: number;
  /** Permits left in the window after this call, 0 or more. */
  remaining: number;
  /** 0 when allowed; otherwise how long until enough permits leave the window for this cost, in ms. */
  retryAfterMs: number;
  /** When the window will hold no permits, in ms since the epoch (the decision's time if it holds none). */
  resetAtMs: number;
  /** Which tier decided. */
  source: DecisionSource;
  /** Why that tier decided; set by `ResilientLimiter`, absent on the tiers used alone. */
  reason?: DecisionReason;
  /**
   * True only on a refusal caused by this instance's reduced capacity while Redis did not decide: the
   * local window refused on this instance's share of the limit a call that the whole limit had room
   * for, as far as this instance knows (its own calls of the key, and the others' as Redis last told
   * it), or the key is blocked for a refusal of that kind (`blockMs`); or mode `'fail-closed'` refused
   * (no capacity at all). False on every other decision: Redis's, the deny cache's, a blocked key's,
   * an admission. `resilimit/http` can answer such a refusal with the draft's 503
   * `temporary-reduced-capacity` rather than 429 `quota-exceeded` (its `reducedCapacity` option).
   * Set by `ResilientLimiter`; false on a `LocalWindow` used alone (it applies its whole limit),
   * absent on a `RedisWindow`'s.
   */
  reducedCapacity?: boolean;
};

/** Per-call options of `limit()`. */
export type LimitOptions = {
  /**
   * Permits this call takes: an integer from 1 to the limit. A call is admitted whole or not at all.
   * @default 1
   */
  cost?: number;
  /**
   * A unique id for this call (at most 128 characters). A call re-sent with an id that is still in
   * the window is admitted again without being counted twice. Generated when absent.
   */
  id?: string;
};

/**
 * The seam both tiers implement: the same question, the same semantics, the same decision type.
 * The Redis tier answers with promises, the local tier synchronously; `await` works on both.
 */
export interface RateWindow {
  /** The resolved limit and window length this window applies. */
  readonly options: { readonly limit: number; readonly windowMs: number };
  /** Decides one call of `key`, consuming its cost when admitted. */
  limit(key: string, options?: LimitOptions): Decision | Promise<Decision>;
  /** Tells what a call of cost 1 would get now, without consuming anything. */
  peek(key: string): Decision | Promise<Decision>;
  /** Forgets every permit used by `key`. */
  reset(key: string): void | Promise<void>;
}
