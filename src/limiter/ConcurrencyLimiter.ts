import { EventEmitter } from 'node:events';
import { ErrorCode, ResilimitError } from '../base/errors.js';
import { mode as checkMode, type Mode } from '../options/options.js';
import { resolveSlotOptions, type ConcurrencyLimiterOptions, type ResolvedSlotOptions } from '../options/slotOptions.js';
import type { BreakerState } from '../redis/Breaker.js';
import { type HeldSlot, SlotHolder } from '../slots/SlotHolder.js';
import { type SlotSource, SlotTier } from '../slots/SlotTier.js';

export type { ConcurrencyLimiterOptions } from '../options/slotOptions.js';
export { SlotLostError, type HeldSlot } from '../slots/SlotHolder.js';
export type { SlotSource } from '../slots/SlotTier.js';

/** The options of {@link ConcurrencyLimiter.acquire}. */
export type SlotOptions = {
  /** Slots this holder takes, integer 1 … max. @default 1 */
  cost?: number;
  /** How long to wait for room, ms (FIFO within this process). 0: now or never. @default 0 */
  maxWaitMs?: number;
  /** Aborts the wait: the call rejects with the signal's reason. */
  signal?: AbortSignal;
};

/** The events of a {@link ConcurrencyLimiter}. */
export type ConcurrencyEvents = {
  /** A held slot was lost (its `signal` is aborted with a `SlotLostError`). */
  lost: [slot: HeldSlot];
  /** The breaker changed state. */
  state: [state: BreakerState, previous: BreakerState];
};

/** What {@link ConcurrencyLimiter.stats} counts since the limiter was made. */
export type ConcurrencyStats = {
  /** Slots held by this instance now (costs summed), and those of them Redis does not hold yet. */
  readonly held: number;
  readonly heldUnwritten: number;
  /** Acquires that got a slot, by source; and those that got none. */
  readonly acquired: Readonly<Record<SlotSource, number>>;
  readonly refused: number;
  /** Slots lost (see `HeldSlot.signal`). */
  readonly lost: number;
  /** The slots of a key this instance may hold while Redis cannot answer, in mode `'local'`. */
  readonly share: number;
  readonly state: BreakerState;
};

/**
 * A concurrency limit: at most `max` slots of a key held at once across every instance, each for a
 * lease timed by Redis's clock and renewed while it is held (`lua/slots.lua`, one sorted set per key).
 * A holder that crashes gives its slots back when their lease ends (`ttlMs`). Every Redis call goes
 * through a circuit breaker; while Redis cannot answer, the `mode` answers (`'local'`: this instance's
 * share of `max`), and what was held meanwhile is written into Redis when it answers again, before
 * this instance takes a new slot there. The bounds, measured, are in docs/concurrency.md.
 *
 * @example
 * const jobs = new ConcurrencyLimiter({ redis, max: 20 });
 * const slot = await jobs.acquire(`export:${tenant}`, { maxWaitMs: 5_000 });
 * if (slot === undefined) return reply429();
 * try { await runExport({ signal: slot.signal }); } finally { await slot.release(); }
 */
export class ConcurrencyLimiter extends EventEmitter<ConcurrencyEvents> {
  readonly options: ResolvedSlotOptions;
  readonly #tier: SlotTier;
  readonly #holder: SlotHolder;
  readonly #acquired: Record<SlotSource, number> = { redis: 0, local: 0, 'fail-open': 0 };
  #refused = 0;
  #lost = 0;
  #closing: Promise<void> | undefined;

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming the option, what was expected and what was given. */
  constructor(options: ConcurrencyLimiterOptions) {
    super();
    this.options = resolveSlotOptions(options);
    this.#tier = new SlotTier(this.options, (state, previous) => this.emit('state', state, previous));
    const { ttlMs, renewEveryMs, pollMs } = this.options;
    this.#holder = new SlotHolder(this.#tier, {
      ttlMs,
      renewEveryMs,
      pollMs,
      onLost: (slot) => {
        this.#lost += 1;
        this.emit('lost', slot);
      },
    });
  }

  /** The breaker's state: `closed` (Redis decides), `open` (the mode answers), `half-open` (one trial). */
  get state(): BreakerState {
    return this.#tier.breaker.state;
  }

  /** What answers while Redis cannot. */
  get mode(): Mode {
    return this.#tier.mode;
  }

  /**
   * Takes `cost` slots of `key`: the held slot, or undefined when there was no room within `maxWaitMs`.
   * Release it with `slot.release()` (in a `finally`); stop the work when `slot.signal` aborts.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_OPTION` (a cost outside
   *   1 … max, a bad `maxWaitMs`), `ERR_RESILIMIT_CLOSED` after `close()`, `ERR_RESILIMIT_REDIS_REPLY` when
   *   Redis refused the script (a key of another type); the signal's reason when it is aborted.
   */
  async acquire(key: string, options: SlotOptions = {}): Promise<HeldSlot | undefined> {
    if (this.#closing !== undefined) throw new ResilimitError(ErrorCode.CLOSED, 'acquire() was called after close()');
    const slot = await this.#holder.acquire(key, options);
    if (slot === undefined) this.#refused += 1;
    else this.#acquired[slot.source] += 1;
    return slot;
  }

  /**
   * Runs `work` holding `cost` slots of `key`, given back when it settles: its result, or
   * `{ ran: false }` when no slot came within `maxWaitMs`. `work` gets the slot's signal.
   */
  async run<T>(
    key: string,
    work: (signal: AbortSignal) => Promise<T> | T,
    options?: SlotOptions,
  ): Promise<{ ran: true; value: T } | { ran: false }> {
    const slot = await this.acquire(key, options);
    if (slot === undefined) return { ran: false };
    try {
      return { ran: true, value: await work(slot.signal) };
    } finally {
      await slot.release();
    }
  }

  /** Counts since the limiter was made, and the slots held now. */
  stats(): ConcurrencyStats {
    const { slots, unwritten } = this.#tier.held;
    return {
      held: slots,
      heldUnwritten: unwritten,
      acquired: { ...this.#acquired },
      refused: this.#refused,
      lost: this.#lost,
      share: this.#tier.share(),
      state: this.state,
    };
  }

  /** Switches what answers while Redis cannot, at once. */
  setMode(mode: Mode): void {
    this.#tier.mode = checkMode('mode', mode);
  }

  /** Holds the breaker open (Redis is not asked) until {@link forceClose}: for drills and incidents. */
  forceOpen(): void {
    this.#tier.breaker.forceOpen();
  }

  /** Closes the breaker; slots held meanwhile are written into Redis before the next acquire there. */
  forceClose(): void {
    this.#tier.breaker.forceClose();
    void this.#tier.sync();
  }

  /**
   * Gives back every slot held here, rejects the waiting acquires with `ERR_RESILIMIT_CLOSED`, leaves
   * the instance count and stops every timer. Idempotent. The Redis client is not closed.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#holder.close();
      await this.#tier.close();
    })();
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
