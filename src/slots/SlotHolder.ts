import { performance } from 'node:perf_hooks';
import { nextId } from '../base/call.js';
import { integer, MAX_INT } from '../base/checks.js';
import { ErrorCode, ResilimitError } from '../base/errors.js';
import type { SlotSource, SlotTier } from './SlotTier.js';

/** A slot of a concurrency limit, held until {@link HeldSlot.release} or until it is lost. */
export type HeldSlot = {
  readonly key: string;
  readonly id: string;
  readonly cost: number;
  /** Who gave it: Redis, or, while Redis could not answer, this instance's share (`local`) or `fail-open`. */
  readonly source: SlotSource;
  /**
   * Aborted when the slot is lost: this process could not renew it within its lease (it was frozen or
   * starved for `ttlMs`), so Redis may have given it to another holder. Its reason is a
   * {@link SlotLostError}. Never thrown: the work it guards should stop.
   */
  readonly signal: AbortSignal;
  /**
   * Gives the slot back. Idempotent: the first call gives it back, later ones return its result.
   * Resolves true when it was held, false when it was lost (`close()` gives it back by this same call). A release
   * Redis cannot take now is sent when it answers again (the lease ends by itself meanwhile).
   */
  release(): Promise<boolean>;
};

/** A call of {@link SlotHolder.acquire} waiting for room. */
type Waiter = {
  readonly cost: number;
  /** When it gives up, on the perf clock. */
  readonly deadline: number;
  readonly resolve: (slot: HeldSlot | undefined) => void;
  readonly reject: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
};

/** A key's waiters: its first asks Redis (`asking`), or sleeps on `timer` until it asks again. */
type Queue = { readonly waiters: Waiter[]; timer: NodeJS.Timeout | undefined; asking: boolean; again: boolean };

/** The reason a held slot's signal is aborted with: `ERR_RESILIMIT_SLOT_LOST`. */
export class SlotLostError extends ResilimitError {
  /** The slot lost. */
  readonly slot: Pick<HeldSlot, 'key' | 'id' | 'cost'>;

  constructor(slot: Pick<HeldSlot, 'key' | 'id' | 'cost'>, stalledMs: number) {
    // The key is a property, not part of the message: messages end up in logs, keys may be personal.
    super(
      ErrorCode.SLOT_LOST,
      `The slot ${slot.id} was lost: this process could not renew it for ${Math.round(stalledMs)} ms, past its lease`,
    );
    this.slot = { key: slot.key, id: slot.id, cost: slot.cost };
  }
}

/** A held slot, its renewal timer, and when its last renewal tick ran (perf clock). */
type Entry = { readonly slot: HeldSlot; readonly timer: NodeJS.Timeout; readonly abort: AbortController; aliveAt: number };

/**
 * Holds the slots of a {@link SlotTier} for their holders: takes one, renews it every `renewEveryMs`
 * while it is held, and gives it back once. A renewal that cannot reach Redis is tried again at the
 * next tick: the slot stays held here (the tier writes it back when Redis answers). A slot is lost
 * only when this process could not run its renewal for a whole lease (`ttlMs`: it was frozen or
 * starved, and Redis may have given the slot away): its `signal` is aborted and `onLost` told. No
 * timer is left once a slot is released or lost, nor after {@link close}.
 */
export class SlotHolder {
  readonly #held = new Map<string, Entry>();
  /** The waiters of each key, oldest first, while it has any. */
  readonly #queues = new Map<string, Queue>();
  #closed = false;

  constructor(
    readonly tier: SlotTier,
    readonly options: {
      /** How long a slot is held without a renewal, ms: a tick later than this finds it lost. */
      readonly ttlMs: number;
      /** How often a held slot's lease is renewed, ms: a third of the lease leaves two renewals to fail. */
      readonly renewEveryMs: number;
      /**
       * How often the first waiter of a key asks again, ms: slots given back by other processes, or
       * whose lease ended, are seen this late at most (one given back here wakes it at once).
       */
      readonly pollMs: number;
      /** Called once for each slot lost, after its signal is aborted. */
      readonly onLost?: (slot: HeldSlot) => void;
    },
  ) {}

  /** Slots held now by this holder (renewed). */
  get size(): number {
    return this.#held.size;
  }

  /**
   * Takes `cost` slots of `key`: the held slot, or undefined when none came within `maxWaitMs` (0, the
   * default: now or never). Waiters of a key are served in the order they came (FIFO within this
   * process); a call that finds others waiting waits behind them.
   * @throws {ResilimitError} as `SlotTier.take`; `ERR_RESILIMIT_CLOSED` after {@link close} (a
   *   waiter too); the signal's reason when it is aborted.
   */
  async acquire(key: string, options: { cost?: number; maxWaitMs?: number; signal?: AbortSignal } = {}): Promise<HeldSlot | undefined> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'acquire() was called after close()');
    const { cost = 1, maxWaitMs = 0, signal } = options;
    integer('maxWaitMs', maxWaitMs, 0, MAX_INT);
    this.tier.slots.check(key, cost);
    signal?.throwIfAborted();
    if (maxWaitMs === 0) {
      // Now or never: never ahead of the key's waiters.
      if (this.#queues.has(key)) return undefined;
      const slot = await this.#take(key, cost);
      if (signal?.aborted) {
        await slot?.release().catch(() => false); // aborted while it was asked: not the caller's
        signal.throwIfAborted();
      }
      return slot;
    }
    const { promise, resolve, reject } = Promise.withResolvers<HeldSlot | undefined>();
    const waiter: Waiter = {
      cost,
      deadline: performance.now() + maxWaitMs,
      resolve,
      reject,
      signal,
      onAbort: () => this.#abort(key, waiter),
    };
    signal?.addEventListener('abort', waiter.onAbort, { once: true });
    const queue = this.#queues.get(key);
    if (queue === undefined) {
      const fresh: Queue = { waiters: [waiter], timer: undefined, asking: false, again: false };
      this.#queues.set(key, fresh);
      void this.#ask(key, fresh);
    } else {
      queue.waiters.push(waiter);
    }
    return promise;
  }

  /** Takes `cost` slots of `key` now (no queue): the held slot, renewed from now on, or undefined. */
  async #take(key: string, cost: number): Promise<HeldSlot | undefined> {
    const id = nextId();
    const source = await this.tier.take(key, id, cost);
    if (source === undefined) return undefined;
    const abort = new AbortController();
    let released: Promise<boolean> | undefined;
    const slot: HeldSlot = {
      key,
      id,
      cost,
      source,
      signal: abort.signal,
      release: () => {
        released ??= this.#release(slot);
        return released;
      },
    };
    const timer = setInterval(() => void this.#renew(id), this.options.renewEveryMs);
    timer.unref();
    this.#held.set(id, { slot, timer, abort, aliveAt: performance.now() });
    // Closed while the acquire was on its way: given back at once, and the call refused.
    if (this.#closed) {
      await slot.release().catch(() => false);
      throw new ResilimitError(ErrorCode.CLOSED, 'acquire(): the holder was closed while the call was on its way');
    }
    return slot;
  }

  /**
   * The first waiter of `queue` asks now; then the next, or the queue sleeps `pollMs` (less when a
   * deadline comes first). Asked while it asks (a slot of the key came back), it asks again after.
   * Invariant: a queue in `#queues` has waiters, and is asking or has a timer.
   */
  async #ask(key: string, queue: Queue): Promise<void> {
    if (queue.asking) {
      queue.again = true;
      return;
    }
    clearTimeout(queue.timer);
    queue.timer = undefined;
    const now = performance.now();
    for (const late of queue.waiters.filter((w) => w.deadline <= now)) this.#leave(key, queue, late)?.resolve(undefined);
    const head = queue.waiters[0];
    if (head === undefined) return;
    queue.asking = true;
    queue.again = false;
    let slot: HeldSlot | undefined;
    let failed: { error: unknown } | undefined;
    try {
      slot = await this.#take(key, head.cost);
    } catch (error) {
      failed = { error };
    }
    queue.asking = false;
    if (failed !== undefined) this.#leave(key, queue, head)?.reject(failed.error);
    else if (slot !== undefined) {
      const taker = this.#leave(key, queue, head);
      if (taker === undefined)
        void slot.release().catch(() => false); // it left meanwhile (aborted, closed)
      else taker.resolve(slot);
    }
    if (queue.waiters.length === 0) {
      this.#queues.delete(key);
    } else if (slot !== undefined || queue.again) {
      void this.#ask(key, queue);
    } else {
      this.#sleep(key, queue);
    }
  }

  #sleep(key: string, queue: Queue): void {
    const head = queue.waiters[0];
    if (head === undefined || queue.timer !== undefined || queue.asking) return;
    const ms = Math.max(0, Math.min(this.options.pollMs, head.deadline - performance.now()));
    queue.timer = setTimeout(() => {
      queue.timer = undefined;
      void this.#ask(key, queue);
    }, ms);
  }

  /** Takes `waiter` out of `queue` (forgetting an empty queue): the waiter, or undefined when it had left. */
  #leave(key: string, queue: Queue, waiter: Waiter): Waiter | undefined {
    const at = queue.waiters.indexOf(waiter);
    if (at < 0) return undefined;
    queue.waiters.splice(at, 1);
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    if (queue.waiters.length === 0 && !queue.asking) {
      clearTimeout(queue.timer);
      this.#queues.delete(key);
    }
    return waiter;
  }

  #abort(key: string, waiter: Waiter): void {
    const queue = this.#queues.get(key);
    if (queue !== undefined) this.#leave(key, queue, waiter)?.reject(waiter.signal?.reason);
  }

  /** Gives back every slot held and stops every renewal; later acquires are refused. */
  async close(): Promise<void> {
    this.#closed = true;
    const error = new ResilimitError(ErrorCode.CLOSED, 'acquire(): the holder was closed while the call waited');
    for (const [key, queue] of [...this.#queues]) for (const waiter of [...queue.waiters]) this.#leave(key, queue, waiter)?.reject(error);
    await Promise.all([...this.#held.values()].map(({ slot }) => slot.release().catch(() => false)));
  }

  #forget(id: string): Entry | undefined {
    const entry = this.#held.get(id);
    if (entry === undefined) return undefined;
    clearInterval(entry.timer);
    this.#held.delete(id);
    return entry;
  }

  async #release(slot: HeldSlot): Promise<boolean> {
    if (this.#forget(slot.id) === undefined) return false; // lost, or given back by close()
    const ok = await this.tier.give(slot.id);
    // A slot of this process came back: the key's first waiter asks now, not at its next poll.
    const queue = this.#queues.get(slot.key);
    if (queue !== undefined) void this.#ask(slot.key, queue);
    return ok;
  }

  async #renew(id: string): Promise<void> {
    const entry = this.#held.get(id);
    if (entry === undefined) return;
    const now = performance.now();
    const stalledMs = now - entry.aliveAt;
    entry.aliveAt = now;
    if (stalledMs <= this.options.ttlMs) {
      await this.tier.keep(id);
      return;
    }
    // No tick for a whole lease: Redis may have ended it and given the slot to another holder.
    const { slot, abort } = entry;
    this.#forget(id);
    this.tier.drop(id);
    abort.abort(new SlotLostError(slot, stalledMs));
    try {
      this.options.onLost?.(slot);
    } catch (error) {
      // The caller's callback threw: said as a warning, never as an unhandled rejection of a timer.
      process.emitWarning(`onLost threw for the slot ${slot.id}: ${String(error)}`, {
        type: 'ResilimitWarning',
        code: 'RESILIMIT_CALLBACK_THREW',
      });
    }
  }
}
