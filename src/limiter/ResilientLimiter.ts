import { EventEmitter } from 'node:events';
import type { BreakerState } from '../redis/Breaker.js';
import type { LimiterEvents } from './events.js';
import type { DecisionPath, Parts } from '../path/DecisionPath.js';
import type { LimitAllDecision, LimitDecision, LimiterDecision } from '../path/decisions.js';
import { ErrorCode, ResilimitError } from '../base/errors.js';
import { callIdOf, checkCallOptions, checkCost, checkKey } from '../base/call.js';
import type { InstanceCounter } from '../recovery/InstanceCounter.js';
import { blockKey } from './block.js';
import { checkItems, type LimitAllItem } from '../redis/allWindows.js';
import {
  resolveLimiterOptions,
  type LimitFunction,
  type Mode,
  type ResilientLimiterOptions,
  type ResolvedLimiterOptions,
} from '../options/options.js';
import type { Recovery } from '../recovery/Recovery.js';
import type { RedisTier } from '../redis/RedisTier.js';
import { refund, type RefundOptions, type RefundResult } from './refund.js';
import type { Settings } from '../path/Settings.js';
import type { Stats, DecisionMessage as Message, LimiterStats } from './Stats.js';
import type { LimitOptions } from '../types.js';
import type { Waiters, AcquireOptions } from './Waiters.js';
import { wire, type Wiring } from './wire.js';
import { wrap, type WrapOptions } from './wrap.js';
import { command } from './command.js';
import { charge } from '../base/internal.js';
import { charger, type Charger } from './charge.js';

export type { LimiterDecision } from '../path/decisions.js';
export type { LimiterStats } from './Stats.js';
export type { LimiterEvents } from './events.js';
export type { RefundOptions, RefundResult } from './refund.js';

/**
 * Published on the `resilimit:decision` diagnostics channel for every decision (free without subscribers).
 * `durationMs`: the time `limit()` took, measured when the channel had subscribers as it began (else 0).
 */
export type DecisionMessage = Message<ResilientLimiter>;

/**
 * Where the limiter is in its life. `closing`: `close()` was called and the journal is being written; calls
 * are still answered, but not `acquire()`'s. `closed`: every call is refused with `ERR_RESILIMIT_CLOSED`.
 */
type Lifecycle = { readonly kind: 'open' } | { readonly kind: 'closing' | 'closed'; readonly done: Promise<void> };

/**
 * A rate limiter for request paths: an exact sliding window in Redis behind a circuit breaker, with a
 * warm local window that answers while Redis cannot, and reconciliation once it can again.
 *
 * `limit()` never throws because of Redis and never waits for it much longer than
 * `breaker.timeoutMs`; misuse (a bad key or cost, use after `close()`) throws a coded error.
 *
 * The front door: the API, the wiring and the lifecycle. The parts own their state: `RedisTier`, `Gate.ts`,
 * `Coalescer`, `DecisionPath` (`OneCall`/`AllCall`/`PeekCall`), `Fallback`, `LocalTier`, `Recovery`, `Settings`, `Waiters`, …
 *
 * @example
 * const limiter = new ResilientLimiter({ redis: createRedisClient(url), limit: 100, windowMs: 60_000 });
 * const decision = await limiter.limit(`user:${userId}`);
 * if (!decision.allowed) return reply429(decision.retryAfterMs);
 */
export class ResilientLimiter extends EventEmitter<LimiterEvents> {
  readonly #options: ResolvedLimiterOptions;
  readonly #settings: Settings;
  readonly #tier: RedisTier;
  readonly #recovery: Recovery;
  readonly #path: DecisionPath;
  readonly #parts: Parts;
  readonly #stats: Stats;
  readonly #instances: InstanceCounter | undefined;
  readonly #releasePrefix: () => void;
  readonly #watch: Wiring['watch'];
  readonly #waiters: Waiters;
  #life: Lifecycle = { kind: 'open' };

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a missing or out-of-range option. */
  constructor(options: ResilientLimiterOptions) {
    super();
    const resolved = (this.#options = resolveLimiterOptions(options));
    ({
      settings: this.#settings,
      tier: this.#tier,
      recovery: this.#recovery,
      path: this.#path,
      parts: this.#parts,
      stats: this.#stats,
      instances: this.#instances,
      releasePrefix: this.#releasePrefix,
      watch: this.#watch,
      waiters: this.#waiters,
    } = wire(this, resolved, () => this.#life.kind === 'closed'));
  }

  /** The breaker's state: `closed` (Redis decides), `open` (the fallback answers), `half-open` (one trial). */
  get state(): BreakerState {
    return this.#tier.state;
  }

  /** The mode in force: what answers when Redis cannot. */
  get mode(): Mode {
    return this.#settings.mode;
  }

  /** False while the kill switch is on (`setEnabled(false)`). */
  get enabled(): boolean {
    return this.#settings.enabled;
  }

  /** True in shadow mode (the `shadow` option, `setShadow(true)`): a call the limit would refuse is admitted, `shadowRejected`. */
  get shadow(): boolean {
    return this.#settings.shadow;
  }

  /**
   * Decides one call of `key` and consumes its cost when admitted. Resolves with a decision whatever
   * Redis does; see `source` and `reason` for who decided and why. In shadow mode a refusal resolves
   * `allowed: true` with `shadowRejected: true`, consuming nothing.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_COST`,
   *   `ERR_RESILIMIT_INVALID_ID` (rejections of the returned promise), `ERR_RESILIMIT_CLOSED` after `close()`.
   */
  async limit(key: string, options?: LimitOptions): Promise<LimiterDecision> {
    this.#open('limit()');
    const started = this.#stats.started();
    checkKey(key);
    checkCallOptions('limit()', options);
    const limit = this.#settings.limitOf(key);
    const cost = checkCost(options?.cost, limit);
    if (options?.id !== undefined) this.#tier.window.model.checkCallerId(options.id);
    const d = this.#path.one(key, cost, callIdOf(options?.id), limit);
    return this.#stats.publish(key, cost, d instanceof Promise ? await d : d, started);
  }

  /**
   * Decides several limits together, all or nothing: every limit admits the call and all are consumed,
   * or none is. Each `{ key, limit, windowMs, cost? }` is its own sliding window (never shared with
   * `limit()`): an exact log, or with `resolutionMs` counted by as many slices a window as `limit()`'s. One script call decides them atomically on a single Redis or when the keys share a slot;
   * on a Cluster, slot after slot, the earlier permits given back if one refuses (under contention it
   * can refuse more than an atomic decision would, never admit more). When Redis cannot answer, the mode
   * decides (in `'local'`, all or nothing on local windows of each limit's share, journalled). In shadow
   * mode a refusal resolves `allowed: true`, `shadowRejected: true`, consuming nothing.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for bad limits (naming the item and the
   *   field) and for an `id` with `resolutionMs`, `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_ID`, `ERR_RESILIMIT_CLOSED`.
   * @example
   * const d = await limiter.limitAll([
   *   { key: `user:${userId}`, limit: 100, windowMs: 60_000 },
   *   { key: 'global', limit: 10_000, windowMs: 1_000 },
   * ]);
   * if (!d.allowed) reply429(d.retryAfterMs);
   */
  async limitAll(limits: readonly LimitAllItem[], options?: { id?: string }): Promise<LimitAllDecision> {
    this.#open('limitAll()');
    const started = this.#stats.started();
    if (options?.id !== undefined) this.#tier.window.model.checkCallerId(options.id);
    const items = checkItems(limits, this.#options.prefix, options, this.#tier.window.model);
    const d = this.#path.all(items, callIdOf(options?.id));
    return this.#stats.publishAll(items, d instanceof Promise ? await d : d, started);
  }

  /**
   * Tells what a call of cost 1 to `key` would get now, consuming nothing: Redis's answer when it can,
   * else the mode's, as `limit()` would give it (a refusal shadowed in shadow mode). The deny cache is
   * not consulted; no decision is published; a Redis call that fails counts for the breaker like any other.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_CLOSED` after `close()`
   *   (rejections of the returned promise).
   */
  async peek(key: string): Promise<LimitDecision> {
    this.#open('peek()');
    checkKey(key);
    return this.#path.peek(key, this.#settings.limitOf(key));
  }

  /**
   * Forgets every permit `key` used, in both tiers (a login's failed attempts, say): the local window, the
   * deny cache and the key's journalled calls at once, then Redis's window (one call through the breaker);
   * calls on their way to Redis meanwhile may still count. `limit()`'s window, not `limitAll()`'s.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_CLOSED`; `ERR_RESILIMIT_REDIS_UNAVAILABLE`
   *   (or `…_REDIS_REPLY`) when Redis did not forget the key: the local tiers are reset all the same.
   */
  async reset(key: string): Promise<void> {
    this.#open('reset()');
    checkKey(key);
    this.#parts.local.main.reset(key);
    this.#parts.hotKeys?.forget(key);
    this.#parts.deny.lift(key);
    this.#recovery.forget(key);
    await command(this.#tier, 'reset()', 'only the local tiers forgot the key', () => this.#tier.window.reset(key));
  }

  /**
   * Refuses every call of `key` for `ms` (0 lifts a block; so does `reset(key)`) on every instance: held in
   * Redis, and by this instance's deny cache and local tier at once, through an outage too; other instances
   * learn it at their next Redis decision of the key. `retryAfterMs` counts it. `limit()`'s window only.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_OPTION` (`ms`), `ERR_RESILIMIT_CLOSED`;
   *   `ERR_RESILIMIT_REDIS_UNAVAILABLE` or `…_REDIS_REPLY` when Redis did not take it (this instance blocks it all the same).
   * @example await limiter.block(`login:${account}`, 15 * 60_000);
   */
  async block(key: string, ms: number): Promise<void> {
    this.#open('block()');
    await blockKey(this.#parts, key, ms);
  }

  /**
   * Gives back the permits of the call of `key` that `limit()` admitted under `id` (its decision's `id`): removed from Redis's
   * window by its id, and from the local window and the journal. Twice, or for an id not in the window, gives nothing back
   * (`refunded: false`). While Redis cannot answer, the local side gives it back at once and Redis's removal is written once it answers (`pending`).
   * `limit()`'s window, not `limitAll()`'s. `options.cost`: see {@link RefundOptions}. See docs/api.md, "Giving permits back".
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_ID`, `ERR_RESILIMIT_CLOSED`
   *   after `close()`, `ERR_RESILIMIT_REDIS_REPLY` when Redis refused the call (rejections of the returned promise).
   * @example
   * const d = await limiter.limit(`user:${userId}`);
   * if (d.allowed && !d.shadowRejected && (await send()).failed) await limiter.refund(`user:${userId}`, d.id);
   */
  async refund(key: string, id: string, options?: RefundOptions): Promise<RefundResult> {
    this.#open('refund()');
    return refund(this.#parts, key, id, options);
  }

  /**
   * Waits for a permit of `key` (to call a third-party API, say): resolves with the admitted decision as soon
   * as the window allows, or at once with the refusal when the permit would come after `maxWaitMs`. Each
   * attempt is a `limit()` call retried after its `retryAfterMs` (Redis down: the mode's answers), FIFO per key.
   * In shadow mode a refusal is admitted (`shadowRejected`): the call resolves at once.
   * @throws {ResilimitError} as `limit()`; `ERR_RESILIMIT_INVALID_OPTION`; `ERR_RESILIMIT_TOO_MANY_WAITERS`
   *   past `maxWaiters`; `ERR_RESILIMIT_CLOSED` (also to the waiters of `close()`). On abort, `signal.reason`.
   * @example const d = await limiter.acquire('api.example.com', { maxWaitMs: 5_000, signal });
   */
  acquire(key: string, options: AcquireOptions): Promise<LimiterDecision> {
    return this.#waiters.acquire(key, options);
  }

  /**
   * Returns `fn` limited by this limiter: see {@link wrap} (a refused call returns `onLimited(decision, …args)` or rejects with a `RateLimitedError`).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when `fn` or an option is not a function.
   * @example
   * const send = limiter.wrap(sendMail, { key: (to: string) => `mail:${to}` });
   */
  wrap<This, Args extends unknown[], R>(
    fn: (this: This, ...args: Args) => R | Promise<R>,
    options: WrapOptions<This, Args, R, LimiterDecision>,
  ): (this: This, ...args: Args) => Promise<Awaited<R>> {
    return wrap(this, fn, options);
  }

  /**
   * Writes pending reconciliation now, if the breaker is closed, and resolves when done.
   * Reconciliation also starts by itself after the breaker closes and after any Redis decision.
   */
  reconcile(): Promise<void> {
    return this.#recovery.reconcile();
  }

  /** Counters since creation. Cheap, but not meant for every request. */
  stats(): LimiterStats {
    return this.#stats.snapshot(this.#parts, this.#settings, this.#instances, this.#watch.notReadyForMs);
  }

  /** Switches what answers when Redis cannot, from the next call on. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`; `ERR_RESILIMIT_CLOSED` after `close()` (so do the other setters). */
  setMode(mode: Mode): void {
    this.#open('setMode()');
    const previous = this.#settings.setMode(mode);
    if (previous !== undefined) this.emit('modeChange', { mode: this.#settings.mode, previous });
  }

  /** The kill switch: `false` admits every call at once (source `'disabled'`) without touching Redis. */
  setEnabled(enabled: boolean): void {
    this.#open('setEnabled()');
    this.#settings.setEnabled(enabled);
  }

  /**
   * Shadow mode on or off, from the next decision on (see the `shadow` option). On, the `acquire()`
   * calls waiting out a refusal ask again at once.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for anything but a boolean.
   */
  setShadow(on: boolean): void {
    this.#open('setShadow()');
    this.#settings.setShadow(on);
    if (on) this.#waiters.wake();
  }

  /**
   * Changes the limit and/or the window for the calls that follow, in both tiers; the calls already
   * recorded stay. The deny cache is cleared. `limit` may be a function of the key, as in the options
   * (a number replaces a function given before).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`.
   */
  update(changes: { limit?: number | LimitFunction; windowMs?: number }): void {
    this.#open('update()');
    this.#settings.update(changes);
  }

  /** Opens the breaker and holds it open (no trial calls) until {@link forceClose}. */
  forceOpen(): void {
    this.#open('forceOpen()');
    this.#tier.breaker.forceOpen();
  }

  /** Closes the breaker now (also one forced open); Redis decides again from the next call. */
  forceClose(): void {
    this.#open('forceClose()');
    this.#tier.breaker.forceClose();
  }

  /**
   * Stops the limiter: rejects every waiting `acquire()` with `ERR_RESILIMIT_CLOSED`; writes the calls answered
   * locally (and pending refunds) if Redis takes them within 4 × `breaker.timeoutMs` (at most 5 s), asking it at once when the
   * breaker is open (calls are still answered meanwhile); leaves the instance count, waits for outstanding calls
   * (at most about `breaker.timeoutMs`), then clears every timer and listener it created. Calls Redis did not take
   * are dropped and told: the `dropped` event (`reason: 'closed'`) and the warning `RESILIMIT_JOURNAL_DROPPED`.
   * The Redis client stays open (it is yours: then `closeRedisClient(redis)`). Idempotent.
   */
  close(): Promise<void> {
    if (this.#life.kind !== 'open') return this.#life.done;
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    this.#life = { kind: 'closing', done: promise };
    this.#close(promise).then(resolve, reject);
    return promise;
  }

  async #close(done: Promise<void>): Promise<void> {
    this.#waiters.close();
    this.#watch.stop();
    await this.#recovery.drain();
    this.#life = { kind: 'closed', done };
    this.#releasePrefix();
    await this.#instances?.stop();
    await this.#recovery.settled();
    await this.#path.settled();
    await this.#waiters.settled(); // the permits admitted for waiters close() rejected: given back
    await this.#parts.hotKeys?.close(); // the leases' unused permits: given back
    this.#tier.close();
    this.#recovery.dropUnwritten(); // last: a listener that throws stops nothing
  }

  /** Throws `ERR_RESILIMIT_CLOSED` for `name` (a call, or a setting that would be lost unsaid) once the limiter is closed. */
  #open(name: string): void {
    if (this.#life.kind === 'closed') throw new ResilimitError(ErrorCode.CLOSED, `${name} was called after close()`);
  }

  /** For `Budget` only (not in the package's API): forced charges, the clock and the settings it needs (charge.ts). */
  get [charge](): Charger {
    return charger(this.#parts, this.#options.prefix, (name) => this.#open(name));
  }

  /** Same as {@link close}, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
