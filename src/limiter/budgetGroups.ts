import { knownOptions } from '../base/checks.js';
import { nextId } from '../base/call.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { MAX_INT } from '../options/options.js';
import type { LimitAllDecision } from '../path/decisions.js';
import type { LimitAllItem } from '../redis/allWindows.js';
import type { Charger } from './charge.js';
import type { ResilientLimiter } from './ResilientLimiter.js';
import { cancelMeasure, measured, settleMeasure, type Measure, type Measured } from './settling.js';

/** One measure of {@link GroupReservation}: a window of `limitAll()`'s, and its estimate. */
export type GroupItemReservation = {
  /** The key of the measure's window. */
  readonly key: string;
  /** The window's limit, as given. */
  readonly limit: number;
  /** The window's length, as given: one window of `limitAll()`'s per key and length. */
  readonly windowMs: number;
  /** The permits reserved in this window (the item's `cost`). */
  readonly estimate: number;
};

/**
 * A handle of `Budget.reserveAll()`: several measures (input tokens, output tokens, cost) reserved
 * together, all or none, in `limitAll()`'s windows. Settle it with `settleAll()`, or `cancelAll()`.
 */
export type GroupReservation = {
  /** The measures, in the order given. */
  readonly items: readonly GroupItemReservation[];
  /** The reservation's id in every window, undefined when it was refused or consumed nothing. */
  readonly id: string | undefined;
  /** Whether every window admitted it (and all were consumed). */
  readonly allowed: boolean;
  /** False when it was admitted without consuming anything (as `Reservation.counted`). */
  readonly counted: boolean;
  /** `limitAll()`'s decision of the estimates. */
  readonly decision: LimitAllDecision;
  /** The TTL's deadline, in ms on the limiter's clock. */
  readonly expiresAt: number;
};

/** What `settleAll()` or `cancelAll()` did: per measure, in the order given, as `SettleResult` tells for one. */
export type SettleAllResult = {
  /** Which call settled the handle: `settleAll()` or `cancelAll()` (a repeat tells the first one's). */
  readonly kind: 'settle' | 'cancel';
  /** Per measure: `charged`, `givenBack`, `extra` (see `SettleResult`). */
  readonly items: readonly Measured[];
  /** True when the handle's TTL had passed: every measure counted at its estimate, nothing given back. */
  readonly late: boolean;
  /** True when a part of it waits for Redis (see `SettleResult.pending`). */
  readonly pending: boolean;
  /** True on a second or later `settleAll()`/`cancelAll()`: nothing was done, this is the first one's result. */
  readonly repeated: boolean;
};

type Entry = { done: Promise<SettleAllResult> | undefined };

/**
 * The group reservations of one `Budget`: `limitAll()` under one id, each window's part then charged
 * and given back in that window alone (`charge.ts`). The exact log only: a window counted by slices
 * cannot name one call of `limitAll()`.
 */
export class BudgetGroups {
  readonly #handles = new WeakMap<object, Entry>();

  constructor(
    readonly limiter: ResilientLimiter,
    readonly port: Charger,
  ) {}

  /** Whether `handle` is a group reservation of this Budget. */
  has(handle: unknown): boolean {
    return typeof handle === 'object' && handle !== null && this.#handles.has(handle);
  }

  async reserve(items: readonly LimitAllItem[], options: unknown): Promise<GroupReservation> {
    const { port } = this;
    port.open('reserveAll()');
    if (!port.namesCalls) {
      throw new ResilimitError(
        ErrorCode.INVALID_OPTION,
        'reserveAll() needs the exact log: a limiter with `resolutionMs` (windows counted by slices) cannot give one call of limitAll() back',
      );
    }
    const given = knownOptions('reserveAll()', options, ['ttlMs', 'id'], { optional: true });
    const windows = Array.isArray(items) ? items.map((item: { windowMs?: unknown } | null) => item?.windowMs).filter(Number.isInteger) : [];
    const shortest = Math.min(...(windows as number[]), MAX_INT);
    const ttlMs = given['ttlMs'] ?? shortest;
    if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > shortest) {
      throw invalidOption('ttlMs', `an integer from 1 to the shortest window of the items (windowMs: ${shortest})`, ttlMs);
    }
    const expiresAt = port.now() + ttlMs;
    const id = (given['id'] as string | undefined) ?? nextId();
    const decision = await this.limiter.limitAll(items, { id });
    const counted =
      decision.allowed && decision.shadowRejected !== true && decision.source !== 'disabled' && decision.source !== 'fail-open';
    const handle: GroupReservation = Object.freeze({
      items: Object.freeze(
        items.map((item) => Object.freeze({ key: item.key, limit: item.limit, windowMs: item.windowMs, estimate: item.cost ?? 1 })),
      ),
      id: counted ? id : undefined,
      allowed: decision.allowed,
      counted,
      decision,
      expiresAt,
    });
    this.#handles.set(handle, { done: undefined });
    return handle;
  }

  async settle(handle: GroupReservation, actuals: readonly number[]): Promise<SettleAllResult> {
    const entry = this.#entryOf(handle, 'settleAll()');
    const n = handle.items.length;
    if (!Array.isArray(actuals) || actuals.length !== n) {
      throw new ResilimitError(
        ErrorCode.INVALID_COST,
        `Expected \`actuals\` to be an array of ${n} integers (one a measure), got ${Array.isArray(actuals) ? `an array of ${actuals.length}` : describe(actuals)}`,
      );
    }
    actuals.forEach((actual: unknown, i) => {
      if (typeof actual !== 'number' || !Number.isInteger(actual) || actual < 0 || actual > MAX_INT) {
        throw new ResilimitError(
          ErrorCode.INVALID_COST,
          `Expected \`actuals[${i}]\` to be an integer from 0 to ${MAX_INT}, got ${describe(actual)}`,
        );
      }
    });
    this.port.open('settleAll()');
    if (entry.done !== undefined) return repeated(entry.done);
    entry.done = this.#run(handle, 'settle', (m, late, i) => settleMeasure(m, actuals[i] as number, late));
    return entry.done;
  }

  async cancel(handle: GroupReservation): Promise<SettleAllResult> {
    const entry = this.#entryOf(handle, 'cancelAll()');
    this.port.open('cancelAll()');
    if (entry.done !== undefined) return repeated(entry.done);
    entry.done = this.#run(handle, 'cancel', (m, late) => cancelMeasure(m, late));
    return entry.done;
  }

  async #run(
    r: GroupReservation,
    kind: SettleAllResult['kind'],
    each: (m: Measure, late: boolean, i: number) => Promise<Measured & { pending: boolean }>,
  ): Promise<SettleAllResult> {
    const late = this.port.now() > r.expiresAt;
    const { id } = r;
    if (!r.counted || id === undefined) return { kind, items: r.items.map(() => measured(0, 0)), late, pending: false, repeated: false };
    const ids = itemIds(id, r.items);
    const done = await Promise.all(r.items.map((item, i) => each(this.#measureOf(item, ids[i] as string), late, i)));
    const items = done.map(({ charged, givenBack, extra }) => ({ charged, givenBack, extra }));
    return { kind, items, late, pending: done.some((d) => d.pending), repeated: false };
  }

  #measureOf(item: GroupItemReservation, id: string): Measure {
    const { key, windowMs, estimate } = item;
    return {
      estimate,
      charge: (cost) => this.port.chargeIn(key, windowMs, cost, id),
      giveBack: () => this.port.giveBackIn(key, windowMs, id, estimate),
    };
  }

  #entryOf(handle: unknown, name: string): Entry {
    const entry = typeof handle === 'object' && handle !== null ? this.#handles.get(handle) : undefined;
    if (entry === undefined) {
      throw new ResilimitError(
        ErrorCode.UNKNOWN_RESERVATION,
        `Expected \`handle\` of ${name} to be a reservation made by this Budget's reserveAll(), got ${describe(handle)}`,
      );
    }
    if (!(handle as GroupReservation).allowed) {
      throw new ResilimitError(
        ErrorCode.UNKNOWN_RESERVATION,
        `Expected \`handle\` of ${name} to be an admitted reservation, got one that was refused: nothing to settle`,
      );
    }
    return entry;
  }
}

/** Each item's id in the windows, as `limitAll()` names its member: the id, `<id>#n` for the n-th item of one window (`itemId`). */
function itemIds(id: string, items: readonly GroupItemReservation[]): string[] {
  const seen = new Map<string, number>();
  return items.map((item) => {
    const window = `${item.windowMs}\u0000${item.key}`;
    const n = (seen.get(window) ?? 0) + 1;
    seen.set(window, n);
    return n === 1 ? id : `${id}#${n}`;
  });
}

/** The first settle's or cancel's result, marked repeated. */
async function repeated(first: Promise<SettleAllResult>): Promise<SettleAllResult> {
  return { ...(await first), repeated: true };
}
