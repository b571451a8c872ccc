import { performance } from 'node:perf_hooks';
import { nextId } from '../base/call.js';
import { integer, MAX_INT } from '../base/checks.js';
import { ErrorCode, ResilimitError } from '../base/errors.js';
import type { RedisSlots } from '../redis/RedisSlots.js';

/** A slot of a concurrency limit, held until {@link HeldSlot.release} or until it is lost. */
export type HeldSlot = {
  readonly key: string;
  readonly id: string;
  readonly cost: number;
  /**
   * Aborted when the slot is lost: a renewal found it no longer held (it was not renewed within its
   * lease: this process was frozen, or Redis could not be reached for a whole lease). Its reason is a
   * {@link SlotLostError}. Never thrown: the work it guards should stop.
   */
  readonly signal: AbortSignal;
  /**
   * Gives the slot back. Idempotent: the first call sends the release, later ones return its result.
   * Resolves true when Redis held the slot, false when it did not (lost, or its lease ended); rejects
   * with `ERR_RESILIMIT_REDIS_UNAVAILABLE` when Redis could not be reached (the slot is then free when
   * its lease ends, `ttlMs` at most).
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

/**
 * The reason a held slot's signal is aborted with. Not a `ResilimitError` yet: its code comes with
 * the public concurrency limit (issue 38).
 */
export class SlotLostError extends Error {
  override readonly name = 'SlotLostError';

  constructor(readonly slot: Pick<HeldSlot, 'key' | 'id' | 'cost'>) {
    super(`The slot ${slot.id} of ${JSON.stringify(slot.key)} was lost: its lease ended before it was renewed`);
  }
}

/**
 * Holds slots of a {@link RedisSlots} for their holders: takes one, renews its lease every
 * `renewEveryMs` while it is held, reports it lost on its `signal` (and to `onLost`) when a renewal
 * finds it gone, and gives it back once. A renewal that cannot reach Redis is tried again at the next
 * tick: the lease, not this process, says when the slot is lost. No timer is left once a slot is
 * released or lost, nor after {@link close}.
 *
 * Internal for now: the answers while Redis is down, and the write-back of slots held then, come next
 * (issue 38).
 */
export class SlotHolder {
  readonly #held = new Map<string, { readonly slot: HeldSlot; readonly timer: NodeJS.Timeout }>();
  /** The waiters of each key, oldest first, while it has any. */
  readonly #queues = new Map<string, Queue>();
  #closed = false;

  constructor(
    readonly slots: RedisSlots,
    readonly options: {
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
   * @throws {ResilimitError} as `RedisSlots.acquire`; `ERR_RESILIMIT_CLOSED` after {@link close} (a
   *   waiter too); the signal's reason when it is aborted.
   */
  async acquire(key: string, options: { cost?: number; maxWaitMs?: number; signal?: AbortSignal } = {}): Promise<HeldSlot | undefined> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'acquire() was called after close()');
    const { cost = 1, maxWaitMs = 0, signal } = options;
    integer('maxWaitMs', maxWaitMs, 0, MAX_INT);
    this.slots.check(key, cost);
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
    const reply = await this.slots.acquire(key, id, cost);
    if (!reply.ok) return undefined;
    const abort = new AbortController();
    let released: Promise<boolean> | undefined;
    const slot: HeldSlot = {
      key,
      id,
      cost,
      signal: abort.signal,
      release: () => {
        released ??= this.#release(slot);
        return released;
      },
    };
    const timer = setInterval(() => void this.#renew(slot, abort), this.options.renewEveryMs);
    timer.unref();
    this.#held.set(id, { slot, timer });
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

  #forget(id: string): void {
    const entry = this.#held.get(id);
    if (entry === undefined) return;
    clearInterval(entry.timer);
    this.#held.delete(id);
  }

  async #release(slot: HeldSlot): Promise<boolean> {
    this.#forget(slot.id);
    const ok = (await this.slots.release(slot.key, slot.id, slot.cost)).ok;
    // A slot of this process came back: the key's first waiter asks now, not at its next poll.
    const queue = this.#queues.get(slot.key);
    if (queue !== undefined) void this.#ask(slot.key, queue);
    return ok;
  }

  async #renew(slot: HeldSlot, abort: AbortController): Promise<void> {
    let ok: boolean;
    try {
      ok = (await this.slots.renew(slot.key, slot.id, slot.cost)).ok;
    } catch {
      return; // Redis could not answer: the next tick tries again, within the lease
    }
    if (ok || !this.#held.has(slot.id)) return; // renewed, or released meanwhile (a release wins)
    this.#forget(slot.id);
    abort.abort(new SlotLostError(slot));
    try {
      this.options.onLost?.(slot);
    } catch (error) {
      // The caller's callback threw: said as a warning, never as an unhandled rejection of a timer.
      process.emitWarning(`onLost threw for the slot ${slot.id} of ${JSON.stringify(slot.key)}: ${String(error)}`, {
        type: 'ResilimitWarning',
        code: 'RESILIMIT_CALLBACK_THREW',
      });
    }
  }
}
