import type { DenyCache } from './DenyCache.js';
import { knownOptions } from '../base/checks.js';
import { invalidOption } from '../base/errors.js';
import { configure } from '../base/internal.js';
import type { LocalTier } from '../local/LocalTier.js';
import { limitValue } from '../options/limitFunction.js';
import { integer, MAX_INT, mode as checkMode, type LimitFunction, type Mode, type ResolvedLimiterOptions } from '../options/options.js';
import type { RedisWindow } from '../redis/RedisWindow.js';

/** Once its lease has ended, `afterLease: 'shrink'` answers locally at a share of this many times less. */
const SHRINK = 10;

/** What a claim may be off by, once multiplied by a limit: a fraction's last bits (see `#claimedShareOf`). */
const CLAIM_SLACK = 1e-9;

/** Why an instance in mode `'local'` answers without a lease (see `Settings.leaseReason`). */
export type LeaseReason = 'lease-ended' | 'no-lease';

/**
 * The settings a limiter changes at run time: the limit (a number, or a function of the key called at
 * every call), the window, the mode, shadow mode and the kill switch. It owns them, and alone applies a
 * change to the parts that hold a copy: the Redis window, the local window's share (`local.limit`, or
 * `ceil(limit / instances)`), and the deny cache (cleared, as its denials were made under the old limit).
 *
 * Every call carries its own limit ({@link limitOf}) to both tiers and the deny cache, so a limit
 * function may give each key its own, and change it at any call.
 */
export class Settings {
  /** The limit option; with a function, the value it gave last (0 before its first call). */
  #limit: number;
  /** The `limit` option when it is a function: called with the key at every call. */
  #limitFn: LimitFunction | undefined;
  #windowMs: number;
  #mode: Mode;
  #shadow: boolean;
  #enabled = true;
  /** The local window's share is 0 (its own limit is 1 then): set with that limit, by {@link applyLocalLimit} and `update()`. */
  #noShare = false;

  constructor(
    readonly options: Pick<
      ResolvedLimiterOptions,
      | 'limit'
      | 'limitFn'
      | 'windowMs'
      | 'mode'
      | 'shadow'
      | 'localLimit'
      | 'instances'
      | 'maxInstances'
      | 'afterLease'
      | 'heartbeatMs'
      | 'hotKeys'
    >,
    readonly redis: RedisWindow,
    readonly local: LocalTier,
    readonly deny: DenyCache,
    /** The instance counter when `instances: 'auto'`, else undefined. */
    readonly counter: () =>
      | {
          readonly count: number;
          readonly unrecovered: number;
          readonly claim: number | undefined;
          readonly reservedClaim: number;
          leasedAt(now: number): boolean;
          readonly lastSeenAt: number;
        }
      | undefined,
  ) {
    this.#limitFn = options.limitFn;
    this.#limit = options.limitFn === undefined ? options.limit : 0;
    this.#windowMs = options.windowMs;
    this.#mode = options.mode;
    this.#shadow = options.shadow;
  }

  /** The `limit` option; with a function, the value it gave for the last call (0 before the first). */
  get limit(): number {
    return this.#limit;
  }

  /**
   * The limit of a call of `key`: the `limit` option, or its function's value for `key`.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when the function throws or gives a bad value.
   */
  limitOf(key: string): number {
    const fn = this.#limitFn;
    if (fn === undefined) return this.#limit;
    return (this.#limit = limitValue(fn, key));
  }

  /**
   * The share of `limit` to give the local window of `limit()` with a call: undefined without a limit
   * function (the window's own limit is the share then, kept up to date: nothing to compute per call),
   * unless the lease has ended with `afterLease: 'shrink'`, or the share is 0 (a window's own limit
   * is at least 1) ({@link fallbackShareOf}). `lease`: {@link leaseReason} at `now`, when the caller read it.
   */
  localShareOf(limit: number, now?: number, lease = now === undefined ? undefined : this.leaseReason(now)): number | undefined {
    if (this.#limitFn === undefined && !this.#shrunk(lease) && !this.#noShare) return undefined;
    return this.#shrinkIf(this.shareOf(limit), lease);
  }

  /**
   * The share of `limit` the local tier answers with at `now` (local clock; undefined: as if leased):
   * {@link shareOf}, or a tenth of it once the lease has ended with `afterLease: 'shrink'`.
   */
  fallbackShareOf(limit: number, now?: number): number {
    return this.#shrinkIf(this.shareOf(limit), now === undefined ? undefined : this.leaseReason(now));
  }

  /**
   * {@link fallbackShareOf} for one limit of `limitAll()`: its limit is not `limit()`'s, so
   * `local.limit` is not its either (the claimed share of it).
   */
  itemShareOf(limit: number, now?: number): number {
    return this.#shrinkIf(this.#claimedShareOf(limit), now === undefined ? undefined : this.leaseReason(now));
  }

  /** `share`, or a tenth of it when `lease` ({@link leaseReason}; undefined: as if leased) ended with `afterLease: 'shrink'`. */
  #shrinkIf(share: number, lease: LeaseReason | undefined): number {
    return this.#shrunk(lease) ? Math.floor(share / SHRINK) : share;
  }

  /**
   * The mode the fallback answers in at `now` (local clock): `mode`, except in `'local'` once this
   * instance's lease has ended (`instances: 'auto'`, see `InstanceCounter.leased`) with `afterLease`
   * `'fail-closed'` or `'fail-open'`. `lease`: {@link leaseReason} at `now`, when the caller read it.
   */
  fallbackMode(now: number, lease = this.leaseReason(now)): Mode {
    const after = this.options.afterLease;
    // A lease reason is given in mode 'local' alone.
    return lease === undefined || after === 'shrink' || after === 'keep' ? this.#mode : after;
  }

  /**
   * This instance answers locally: the local tier keeps counting the permits of calls that leave
   * while the others cannot know it yet (`LocalTier.lost`). They see it silent at most 3 beats after
   * its last beat Redis answered: it is no longer fresh 1.5 beats after it, and each of them learns
   * that at its next beat, with half a beat for a loaded machine. Nothing with a fixed instance count
   * (no beats: the others reserve nothing), or before the first beat (no share is held for it).
   */
  lost(local: LocalTier): void {
    const seen = this.counter()?.lastSeenAt;
    if (seen !== undefined && seen > Number.NEGATIVE_INFINITY) local.lost(seen, this.options.heartbeatMs * 3);
  }

  /** What a call is answered on while Redis does not decide, at `now`, in words (for warnings). */
  answering(now: number): string {
    const mode = this.fallbackMode(now);
    if (mode !== 'local') return `mode '${mode}' (${mode === 'fail-open' ? 'every call admitted' : 'every call refused'})`;
    const lease = this.leaseReason(now);
    const limit = this.#limitFn === undefined ? `${this.#limit}` : "each key's limit";
    const share = this.#limitFn === undefined ? `${this.fallbackShareOf(this.#limit, now)} of ` : 'a share of ';
    const why =
      lease === 'no-lease'
        ? `limit / local.maxInstances (${this.options.maxInstances}): this instance has never reached Redis, so no other reserves a share for it`
        : lease === 'lease-ended'
          ? 'its lease ended (local.afterLease)'
          : this.options.localLimit !== undefined
            ? 'local.limit'
            : `its share of ${this.instances} instances`;
    return `mode 'local', on ${share}${limit} calls a ${this.#windowMs} ms window (${why})`;
  }

  /**
   * Why, in mode `'local'` with `instances: 'auto'`, this instance answers at `now` (local clock)
   * without a lease: `'lease-ended'`, `'no-lease'` (it never had one), or undefined (leased; another
   * mode; a fixed instance count).
   */
  leaseReason(now: number): LeaseReason | undefined {
    const counter = this.counter();
    if (counter === undefined || this.#mode !== 'local' || counter.leasedAt(now)) return undefined;
    return counter.claim === undefined ? 'no-lease' : 'lease-ended';
  }

  /** In mode `'local'`, a lease this instance had has ended (`lease`, see {@link leaseReason}) and `afterLease` is `'shrink'` (an instance that never had one answers on its cold share). */
  #shrunk(lease: LeaseReason | undefined): boolean {
    return lease === 'lease-ended' && this.options.afterLease === 'shrink';
  }

  /**
   * This instance's local share of `limit`: `local.limit` (at most `limit`), or its claim's share
   * ({@link #claimedShareOf}).
   */
  shareOf(limit: number): number {
    const local = this.options.localLimit;
    return local === undefined ? this.#claimedShareOf(limit) : Math.min(local, limit);
  }

  /**
   * `ceil(limit × claim)` with `instances: 'auto'` (the claim its last beat was granted: see
   * `InstanceCounter.claim`), or `ceil(limit / maxInstances)` before any (an instance that never
   * reached Redis: the others reserve nothing for it); `ceil(limit / instances)` with a fixed count.
   */
  #claimedShareOf(limit: number): number {
    const counter = this.counter();
    if (counter === undefined) return Math.ceil(limit / this.instances);
    const claim = counter.claim;
    // The slack absorbs a claim's last bit: 1/3 of 60 is 20, never 21.
    return claim === undefined ? Math.ceil(limit / this.options.maxInstances) : Math.ceil(limit * claim - CLAIM_SLACK);
  }

  get windowMs(): number {
    return this.#windowMs;
  }

  get mode(): Mode {
    return this.#mode;
  }

  get enabled(): boolean {
    return this.#enabled;
  }

  /** Shadow mode: a call the limit would refuse is admitted, marked `shadowRejected` (see `Stats.publish`). */
  get shadow(): boolean {
    return this.#shadow;
  }

  /** Instances sharing the limit: counted (`'auto'`, 1 until a heartbeat answers) or set. */
  get instances(): number {
    return this.counter()?.count ?? (this.options.instances === 'auto' ? 1 : this.options.instances);
  }

  /**
   * Permits of a limit (`limit()`'s, or a `limitAll()` item's) that Redis's decisions leave free now:
   * the shares the instances that may be answering locally with calls Redis has not seen yet
   * (`InstanceCounter.unrecovered`) answer on, their claims (`InstanceCounter.reservedClaim`), at
   * most all but one. 0 unless `instances: 'auto'`.
   */
  reserveOf(limit: number): number {
    const counter = this.counter();
    const unrecovered = counter?.unrecovered ?? 0;
    if (counter === undefined || unrecovered === 0) return 0;
    const local = this.options.localLimit;
    const reserve = local === undefined ? Math.ceil(limit * counter.reservedClaim - CLAIM_SLACK) : unrecovered * Math.min(local, limit);
    return Math.min(reserve, limit - 1);
  }

  /**
   * The local window's own limit: the share of the `limit` option (MAX_INT's with a function: every
   * call then gives its share), at least 1 (a share of 0, a claim not yet granted, is given with each
   * call: see {@link localShareOf}).
   */
  get localLimit(): number {
    return Math.max(1, this.shareOf(this.#limitFn === undefined ? this.#limit : MAX_INT));
  }

  /** The instance count or the claim changed: the local share follows. */
  applyLocalLimit(): void {
    this.local.main[configure]({ limit: this.#localLimitNow() });
  }

  /** {@link localLimit}, noting whether the share under it is 0 (read per call by {@link localShareOf}). */
  #localLimitNow(): number {
    const share = this.shareOf(this.#limitFn === undefined ? this.#limit : MAX_INT);
    this.#noShare = share < 1;
    return Math.max(1, share);
  }

  /** See `ResilientLimiter.update`. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`, changing nothing. */
  update(changes: { limit?: number | LimitFunction; windowMs?: number }): void {
    knownOptions('update()', changes, ['limit', 'windowMs'], { name: 'changes' });
    const limitFn = typeof changes.limit === 'function' ? changes.limit : undefined;
    const limit = changes.limit === undefined || limitFn !== undefined ? this.#limit : integer('limit', changes.limit, 1, MAX_INT);
    const windowMs = changes.windowMs === undefined ? this.#windowMs : integer('windowMs', changes.windowMs, 1, MAX_INT);
    this.redis.model.checkWindow(windowMs);
    // A lease lasts at most a window (the option's bound, fixed when the limiter was made).
    const validityMs = this.options.hotKeys?.validityMs;
    if (validityMs !== undefined && windowMs < validityMs) {
      throw invalidOption('windowMs', `at least hotKeys.validityMs (${validityMs} ms)`, windowMs);
    }
    if (changes.limit !== undefined) this.#limitFn = limitFn;
    this.#limit = limit;
    this.#windowMs = windowMs;
    this.#apply({ limit: this.#limitFn === undefined ? limit : MAX_INT, windowMs });
  }

  /** Sets the mode; the previous one when it changed, else undefined. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`. */
  setMode(mode: Mode): Mode | undefined {
    const next = checkMode('mode', mode);
    const previous = this.#mode;
    if (next === previous) return undefined;
    this.#mode = next;
    return previous;
  }

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for anything but a boolean. */
  setEnabled(enabled: boolean): void {
    if (typeof enabled !== 'boolean') throw invalidOption('enabled', 'a boolean', enabled);
    this.#enabled = enabled;
  }

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for anything but a boolean. */
  setShadow(shadow: boolean): void {
    if (typeof shadow !== 'boolean') throw invalidOption('shadow', 'a boolean', shadow);
    this.#shadow = shadow;
  }

  #apply(changes: { limit: number; windowMs: number }): void {
    this.redis[configure](changes);
    this.local.main[configure]({ ...changes, limit: this.#localLimitNow() });
    this.deny.clear();
  }
}
