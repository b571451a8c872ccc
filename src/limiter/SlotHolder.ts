import { nextId } from '../base/call.js';
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
 * Internal for now: waiting for a slot (FIFO per key) and the answers while Redis is down come next
 * (issue 38).
 */
export class SlotHolder {
  readonly #held = new Map<string, { readonly slot: HeldSlot; readonly timer: NodeJS.Timeout }>();
  #closed = false;

  constructor(
    readonly slots: RedisSlots,
    readonly options: {
      /** How often a held slot's lease is renewed, ms: a third of the lease leaves two renewals to fail. */
      readonly renewEveryMs: number;
      /** Called once for each slot lost, after its signal is aborted. */
      readonly onLost?: (slot: HeldSlot) => void;
    },
  ) {}

  /** Slots held now by this holder (renewed). */
  get size(): number {
    return this.#held.size;
  }

  /**
   * Takes `cost` slots of `key` now: the held slot, or undefined when there is no room.
   * @throws {ResilimitError} as `RedisSlots.acquire`; `ERR_RESILIMIT_CLOSED` after {@link close}.
   */
  async acquire(key: string, cost = 1): Promise<HeldSlot | undefined> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'acquire() was called after close()');
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
    // Closed while the acquire was on its way: given back at once.
    if (this.#closed) await slot.release().catch(() => false);
    return slot;
  }

  /** Gives back every slot held and stops every renewal; later acquires are refused. */
  async close(): Promise<void> {
    this.#closed = true;
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
    return (await this.slots.release(slot.key, slot.id, slot.cost)).ok;
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
    this.options.onLost?.(slot);
  }
}
