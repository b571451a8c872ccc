import type { DenyCache } from './DenyCache.js';
import { knownOptions } from './checks.js';
import { invalidOption } from './errors.js';
import { configure } from './internal.js';
import type { LocalTier } from './LocalTier.js';
import { callLimit, checkLimitValue, integer, limitValue, MAX_INT, mode as checkMode, type Mode, type ResolvedLimiterOptions } from './options.js';
import type { RedisWindow } from './RedisWindow.js';

/**
 * The settings a limiter changes at run time: the limit (a number, or a function evaluated at every
 * call), the window, the mode, shadow mode and the kill switch. It owns them, and alone applies a change to the
 * parts that hold a copy: the Redis window, the local window's share (`local.limit`, or
 * `ceil(limit / instances)`), and the deny cache (cleared, as its denials were made under the old limit).
 */
export class Settings {
  #limit: number;
  /** The `limit` option when it is a function: evaluated at every call. */
  #limitFn: (() => number) | undefined;
  #windowMs: number;
  #mode: Mode;
  #shadow: boolean;
  #enabled = true;

  constructor(
    readonly options: Pick<ResolvedLimiterOptions, 'limit' | 'limitFn' | 'windowMs' | 'mode' | 'shadow' | 'localLimit' | 'instances'>,
    readonly redis: RedisWindow,
    readonly local: LocalTier,
    readonly deny: DenyCache,
    /** The instance counter when `instances: 'auto'`, else undefined. */
    readonly counter: () => { readonly count: number; readonly unrecovered: number } | undefined,
  ) {
    this.#limit = options.limit;
    this.#limitFn = options.limitFn;
    this.#windowMs = options.windowMs;
    this.#mode = options.mode;
    this.#shadow = options.shadow;
  }

  get limit(): number {
    return this.#limit;
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
   * the local shares of the instances that may be answering locally with calls Redis has not seen
   * yet (`InstanceCounter.unrecovered`), at most all but one. 0 unless `instances: 'auto'`.
   */
  reserveOf(limit: number): number {
    const unrecovered = this.counter()?.unrecovered ?? 0;
    if (unrecovered === 0) return 0;
    const share = limit === this.#limit ? this.localLimit : Math.ceil(limit / this.instances);
    return Math.min(unrecovered * share, limit - 1);
  }

  /** The local window's limit: `local.limit`, or this instance's share of the limit. */
  get localLimit(): number {
    return this.options.localLimit ?? Math.ceil(this.#limit / this.instances);
  }

  /** Before each call: a `limit` function's value for it, which both tiers follow (checked only when it changed). */
  follow(): void {
    const fn = this.#limitFn;
    if (fn === undefined) return;
    const value = callLimit(fn);
    if (value === this.#limit) return;
    this.#limit = checkLimitValue(value);
    this.#apply({ limit: this.#limit });
  }

  /** The instance count changed: the local share follows. */
  applyLocalLimit(): void {
    this.local.main[configure]({ limit: this.localLimit });
  }

  /** See `ResilientLimiter.update`. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`, changing nothing. */
  update(changes: { limit?: number | (() => number); windowMs?: number }): void {
    knownOptions('update()', changes, ['limit', 'windowMs'], { name: 'changes' });
    const limitFn = typeof changes.limit === 'function' ? changes.limit : undefined;
    const limit =
      changes.limit === undefined
        ? this.#limit
        : limitFn !== undefined
          ? limitValue(limitFn)
          : integer('limit', changes.limit, 1, MAX_INT);
    const windowMs = changes.windowMs === undefined ? this.#windowMs : integer('windowMs', changes.windowMs, 1, MAX_INT);
    if (changes.limit !== undefined) this.#limitFn = limitFn;
    this.#limit = limit;
    this.#windowMs = windowMs;
    this.#apply({ limit, windowMs });
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

  #apply(changes: { limit: number; windowMs?: number }): void {
    this.redis[configure](changes);
    this.local.main[configure]({ ...changes, limit: this.localLimit });
    this.deny.clear();
  }
}
