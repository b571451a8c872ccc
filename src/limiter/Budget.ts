import { knownOptions } from '../base/checks.js';
import { checkKey } from '../base/call.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { charge } from '../base/internal.js';
import { MAX_INT } from '../options/options.js';
import type { LimiterDecision } from '../path/decisions.js';
import type { Charger } from './charge.js';
import type { LimitAllItem } from '../redis/allWindows.js';
import { BudgetGroups, type GroupReservation, type SettleAllResult } from './budgetGroups.js';
import { cancelMeasure, measured, settleMeasure, type Measure } from './settling.js';
import type { ResilientLimiter } from './ResilientLimiter.js';
import { requireRuntime } from '../base/runtime.js';

/** Options of {@link Budget.reserve}. */
export type ReserveOptions = {
  /**
   * How long the reservation may wait for its `settle()` or `cancel()`, in ms on the limiter's clock:
   * past it, the handle counts as settled at its estimate (nothing is given back; a settle above the
   * estimate still charges the extra). An integer from 1 to the limiter's `windowMs` (a reservation
   * must still be in the window to be given back). @default the limiter's `windowMs`
   */
  ttlMs?: number;
  /** The reservation's id, as `limit()`'s `id` (a reservation re-sent with it counts once). Generated when absent. */
  id?: string;
};

/**
 * A handle of {@link Budget.reserve}: pass it to `settle()` or `cancel()` of the same `Budget`. Frozen;
 * only the `Budget` that made it knows it.
 */
export type Reservation = {
  /** The key reserved on. */
  readonly key: string;
  /** The reservation's id in the window (its decision's `id`), undefined when it was refused or consumed nothing. */
  readonly id: string | undefined;
  /** The permits reserved. */
  readonly estimate: number;
  /** Whether the reservation was admitted; a refused one has nothing to settle (settle/cancel throw). */
  readonly allowed: boolean;
  /**
   * False when the reservation was admitted without consuming anything: the kill switch (`source:
   * 'disabled'`), mode `'fail-open'` while Redis could not answer, or a refusal admitted in shadow mode
   * (`shadowRejected`). Settling one charges nothing: the limiter was not counting.
   */
  readonly counted: boolean;
  /** `limit()`'s decision of the estimate. */
  readonly decision: LimiterDecision;
  /** The TTL's deadline, in ms on the limiter's clock: settled or cancelled later, the handle is `late`. */
  readonly expiresAt: number;
};

/** What `settle()` or `cancel()` did. */
export type SettleResult = {
  /** Which call settled the handle: a repeated call tells the first one's. */
  readonly kind: 'settle' | 'cancel';
  /**
   * The permits the reservation counts for in the window now: the actual cost when settled in time,
   * 0 when cancelled in time, at least the estimate when late. 0 for a reservation that was not counted.
   */
  readonly charged: number;
  /** The permits given back to the window: `estimate − actual` below the estimate, the estimate on a cancel; 0 when late. */
  readonly givenBack: number;
  /** The permits charged above the estimate (`actual − estimate`), charged even when late: the spend happened. */
  readonly extra: number;
  /** True when the handle's TTL had passed: it counted at its estimate, nothing was given back. */
  readonly late: boolean;
  /**
   * True when Redis could not answer (breaker open, timeout, client not ready): a charge waits in the
   * journal, a give-back in the pending refunds, and both are written once Redis answers again (before
   * it decides the key again). The local window counts them at once.
   */
  readonly pending: boolean;
  /** True on the second and later `settle()`/`cancel()` of a handle: nothing was done, this is the first one's result. */
  readonly repeated: boolean;
};

/** What a Budget keeps of a handle it made: the result of its first settle or cancel. */
type Entry = { done: Promise<SettleResult> | undefined };

/**
 * Reserve-then-settle budgets over a {@link ResilientLimiter}'s `limit()` window, for calls whose cost is
 * known only afterwards (an LLM call's tokens): {@link reserve} admits or refuses an estimate as `limit()`
 * does and returns a handle; {@link settle} charges the real cost (gives back the unused part, or takes
 * the extra: never refused, the call happened); {@link cancel} gives it all back; a handle not settled
 * within its TTL counts at its estimate. The spend in any window stays within the limit plus the sum,
 * over the reservations in flight, of max(actual − estimate, 0) (plus the outage share in mode `'local'`):
 * see docs/budgets.md. No timer: the TTL is checked when `settle()` or `cancel()` comes.
 * @example
 * const budget = new Budget(limiter);
 * const r = await budget.reserve(`tenant:${id}`, prompt + maxTokens);
 * if (!r.allowed) return reply429(r.decision.retryAfterMs);
 * const usage = await callModel();
 * await budget.settle(r, usage.totalTokens);
 */
export class Budget {
  readonly #limiter: ResilientLimiter;
  readonly #port: Charger;
  /** The handles this Budget made (weakly: a handle dropped unsettled costs nothing and counts at its estimate). */
  readonly #handles = new WeakMap<object, Entry>();
  /** The group reservations of {@link reserveAll}. */
  readonly #groups: BudgetGroups;

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` unless `limiter` is a `ResilientLimiter`. */
  constructor(limiter: ResilientLimiter) {
    requireRuntime();
    const port = typeof limiter === 'object' && limiter !== null ? (limiter as { [charge]?: Charger })[charge] : undefined;
    if (port === undefined) throw invalidOption('limiter', 'a ResilientLimiter', limiter);
    this.#limiter = limiter;
    this.#port = port;
    this.#groups = new BudgetGroups(limiter, port);
  }

  /**
   * Reserves `estimate` permits of `key`: `limit(key, { cost: estimate, id })`, admitted or refused
   * as it decides (whatever Redis does). An admitted handle must be settled or cancelled within `ttlMs`,
   * or it counts at its estimate.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_COST` (`estimate`: an
   *   integer from 1 to the key's limit), `ERR_RESILIMIT_INVALID_OPTION` (`ttlMs`, an unknown option),
   *   `ERR_RESILIMIT_INVALID_ID`, `ERR_RESILIMIT_CLOSED` (rejections of the returned promise).
   */
  async reserve(key: string, estimate: number, options?: ReserveOptions): Promise<Reservation> {
    const port = this.#port;
    port.open('reserve()');
    checkKey(key);
    const given = knownOptions('reserve()', options, ['ttlMs', 'id'], { optional: true });
    const windowMs = port.windowMs();
    const ttlMs = given['ttlMs'] ?? windowMs;
    if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > windowMs) {
      throw invalidOption('ttlMs', `an integer from 1 to the window (windowMs: ${windowMs})`, ttlMs);
    }
    const limit = port.limitOf(key);
    if (typeof estimate !== 'number' || !Number.isInteger(estimate) || estimate < 1 || estimate > limit) {
      throw new ResilimitError(
        ErrorCode.INVALID_COST,
        `Expected \`estimate\` to be an integer from 1 to the limit (${limit}), got ${describe(estimate)}`,
      );
    }
    // The deadline counts from before the decision: the reservation is in Redis's window at least until then.
    const expiresAt = port.now() + ttlMs;
    const id = given['id'] as string | undefined;
    const decision = await this.#limiter.limit(key, id === undefined ? { cost: estimate } : { cost: estimate, id });
    const counted = decision.allowed && decision.id !== undefined && decision.source !== 'disabled' && decision.source !== 'fail-open';
    const handle: Reservation = Object.freeze({
      key,
      id: counted ? decision.id : undefined,
      estimate,
      allowed: decision.allowed,
      counted,
      decision,
      expiresAt,
    });
    this.#handles.set(handle, { done: undefined });
    return handle;
  }

  /**
   * Charges the real cost of a reservation, never refused: `actual` equal to the estimate sends nothing;
   * below it, `actual` is charged at now and the reservation given back; above it, `actual − estimate`
   * is charged at now. After the TTL, the handle counts at its estimate: nothing is given back, the
   * extra above it is still charged (`late: true`). A second `settle()` or `cancel()` of a handle does
   * nothing and resolves with the first one's result (`repeated: true`).
   * @throws {ResilimitError} `ERR_RESILIMIT_UNKNOWN_RESERVATION` for a handle this Budget did not make
   *   or a refused one, `ERR_RESILIMIT_INVALID_COST` unless `actual` is an integer from 0 to 2^31 − 1,
   *   `ERR_RESILIMIT_CLOSED` after the limiter's `close()`, `ERR_RESILIMIT_REDIS_REPLY` when Redis refused
   *   a script (rejections of the returned promise).
   */
  async settle(handle: Reservation, actual: number): Promise<SettleResult> {
    const entry = this.#entryOf(handle, 'settle()');
    if (typeof actual !== 'number' || !Number.isInteger(actual) || actual < 0 || actual > MAX_INT) {
      throw new ResilimitError(
        ErrorCode.INVALID_COST,
        `Expected \`actual\` to be an integer from 0 to ${MAX_INT}, got ${describe(actual)}`,
      );
    }
    this.#port.open('settle()');
    if (entry.done !== undefined) return repeated(entry.done);
    entry.done = this.#settle(handle, actual);
    return entry.done;
  }

  /**
   * Gives the whole reservation back (the call was not made), unless its TTL has passed (`late`: it
   * counts at its estimate). Repeated, or after `settle()`: as `settle()`'s repeat.
   * @throws {ResilimitError} as {@link settle}, but for `actual`.
   */
  async cancel(handle: Reservation): Promise<SettleResult> {
    const entry = this.#entryOf(handle, 'cancel()');
    this.#port.open('cancel()');
    if (entry.done !== undefined) return repeated(entry.done);
    entry.done = this.#cancel(handle);
    return entry.done;
  }

  /**
   * Reserves several measures together, all or none (input tokens, output tokens, cost): `limitAll(items,
   * { id })`, each item's `cost` its estimate, each `{ key, limit, windowMs }` its own window (never
   * `limit()`'s). Settle the handle with {@link settleAll} (one actual a measure) or {@link cancelAll}; a
   * handle not settled within `ttlMs` (default and at most the shortest `windowMs` of the items) counts
   * at its estimates. The exact log only (not with `resolutionMs`).
   * @throws {ResilimitError} as `limitAll()` (`ERR_RESILIMIT_INVALID_OPTION` naming the item and the field),
   *   `ERR_RESILIMIT_INVALID_OPTION` for `ttlMs` and with `resolutionMs`, `ERR_RESILIMIT_CLOSED`.
   * @example
   * const r = await budget.reserveAll([
   *   { key: `in:${tenant}`, limit: 100_000, windowMs: 60_000, cost: promptTokens },
   *   { key: `out:${tenant}`, limit: 50_000, windowMs: 60_000, cost: maxTokens },
   * ]);
   * if (r.allowed) await budget.settleAll(r, [usage.input, usage.output]);
   */
  reserveAll(items: readonly LimitAllItem[], options?: ReserveOptions): Promise<GroupReservation> {
    return this.#groups.reserve(items, options);
  }

  /**
   * Settles each measure of a {@link reserveAll} handle at its actual cost, as {@link settle} does for
   * one, in its own window (`actuals`: one a measure, in the order of the items). Never refused.
   * @throws {ResilimitError} `ERR_RESILIMIT_UNKNOWN_RESERVATION`, `ERR_RESILIMIT_INVALID_COST` (naming
   *   `actuals` or `actuals[i]`), `ERR_RESILIMIT_CLOSED`, `ERR_RESILIMIT_REDIS_REPLY`.
   */
  settleAll(handle: GroupReservation, actuals: readonly number[]): Promise<SettleAllResult> {
    return this.#groups.settle(handle, actuals);
  }

  /** Gives every measure of a {@link reserveAll} handle back, unless late. @throws {ResilimitError} as {@link settleAll}. */
  cancelAll(handle: GroupReservation): Promise<SettleAllResult> {
    return this.#groups.cancel(handle);
  }

  #entryOf(handle: unknown, name: string): Entry {
    const entry = typeof handle === 'object' && handle !== null ? this.#handles.get(handle) : undefined;
    if (entry === undefined && this.#groups.has(handle)) {
      throw new ResilimitError(
        ErrorCode.UNKNOWN_RESERVATION,
        `Expected \`handle\` of ${name} to be a reservation of reserve(), got one of reserveAll(): settle it with settleAll() or cancelAll()`,
      );
    }
    if (entry === undefined) {
      throw new ResilimitError(
        ErrorCode.UNKNOWN_RESERVATION,
        `Expected \`handle\` of ${name} to be a reservation made by this Budget's reserve(), got ${describe(handle)}`,
      );
    }
    const r = handle as Reservation;
    if (!r.allowed) {
      throw new ResilimitError(
        ErrorCode.UNKNOWN_RESERVATION,
        `Expected \`handle\` of ${name} to be an admitted reservation, got one that was refused (key ${describe(r.key)}): nothing to settle`,
      );
    }
    return entry;
  }

  async #settle(r: Reservation, actual: number): Promise<SettleResult> {
    const late = this.#port.now() > r.expiresAt;
    if (!r.counted || r.id === undefined) return { kind: 'settle', ...measured(0, 0), late, pending: false, repeated: false };
    const done = await settleMeasure(this.#measureOf(r.key, r.id, r.estimate), actual, late);
    return { kind: 'settle', ...done, late, repeated: false };
  }

  async #cancel(r: Reservation): Promise<SettleResult> {
    const late = this.#port.now() > r.expiresAt;
    if (!r.counted || r.id === undefined) return { kind: 'cancel', ...measured(0, 0), late, pending: false, repeated: false };
    const done = await cancelMeasure(this.#measureOf(r.key, r.id, r.estimate), late);
    return { kind: 'cancel', ...done, late, repeated: false };
  }

  /** The reservation `id` of `estimate` permits in `limit()`'s window of `key`, to settle. */
  #measureOf(key: string, id: string, estimate: number): Measure {
    return {
      estimate,
      charge: (cost) => this.#port.charge(key, cost, id),
      giveBack: () => this.#limiter.refund(key, id, { cost: estimate }),
    };
  }
}

/** The first settle's or cancel's result, marked repeated. */
async function repeated(first: Promise<SettleResult>): Promise<SettleResult> {
  return { ...(await first), repeated: true };
}
