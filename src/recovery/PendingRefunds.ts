import { ErrorCode, isResilimitError } from '../base/errors.js';
import { refundCalls } from '../base/internal.js';
import { CALL_BYTES } from './Journal.js';
import type { RedisTier } from '../redis/RedisTier.js';
import { groupOf } from '../redis/allWindows.js';

/** The most refunds of one key in one script call. */
const BATCH = 200;

/**
 * A refund of `limit()`'s window, or with `windowMs` of one of `limitAll()`'s (a `Budget`'s give-back):
 * the call's key, its id as its decision gave it, and its cost when known.
 */
type Refund = { readonly key: string; readonly id: string; readonly cost: number | undefined; readonly windowMs?: number | undefined };

/**
 * What a pending refund counts for against `maxPendingBytes`, as a journalled call does (see
 * `pendingBytes`): CALL_BYTES, and 2 bytes per character of its key and of its id.
 */
function refundBytes(refund: Refund): number {
  return CALL_BYTES + 2 * (refund.key.length + refund.id.length);
}

/**
 * Removes calls from Redis's window of `limit()` (`RedisWindow`'s refund script), and keeps the removals Redis
 * could not make when they were asked for: the refunds of calls Redis holds, asked while it could not
 * answer. Those are written by the next write-back pass (`Recovery`), after the journal and any
 * re-seed, and until then Redis counts those calls. It owns, and alone changes, the pending refunds:
 * at most `maxPending` of them and `maxPendingBytes` bytes ({@link refundBytes}), apart from the
 * journal's calls (a refund never takes the room of a call Redis has not seen); past either bound the
 * oldest are dropped first and counted in `dropped` (Redis then counts that call until it leaves its
 * window: the safe side). A refund of an id already pending is not kept twice.
 */
export class PendingRefunds {
  /** By window (`groupOf`: a key of `limit()`, or a key and window of `limitAll()`), then by id, in the order of their first pending refund. */
  readonly #waiting = new Map<string, Map<string, Refund>>();
  #size = 0;
  #bytes = 0;
  /** Pending refunds Redis has since made (whatever each found), and those dropped past the bounds or refused by Redis. */
  written = 0;
  dropped = 0;

  constructor(
    readonly tier: RedisTier,
    readonly maxPending: number,
    readonly maxBytes: number,
  ) {}

  /** Refunds waiting for Redis. */
  get size(): number {
    return this.#size;
  }

  /**
   * Removes the call `id` of `key` from Redis's window now: one script call through the breaker, in
   * the ledger as no decision (as `reset()`). Resolves with the permits it gave back (0: not in the
   * window). `cost`: the call's cost when known, tried first (else a scan finds it).
   * @throws {ResilimitError} as the breaker and `redisCallError` reject: the call did not reach Redis
   *   or Redis refused it.
   */
  async send(key: string, id: string, cost: number | undefined, windowMs?: number): Promise<number> {
    const [permits] = await this.tier.call(0, this.#script([{ key, id, cost, windowMs }]));
    return permits as number;
  }

  /** Keeps a refund Redis could not make, for the next write-back pass (`windowMs`: of a `limitAll()` window). */
  add(key: string, id: string, cost: number | undefined, windowMs?: number): void {
    const group = groupOf({ key, windowMs });
    let ids = this.#waiting.get(group);
    if (ids === undefined) this.#waiting.set(group, (ids = new Map()));
    if (ids.has(id)) return;
    const refund = { key, id, cost, windowMs };
    ids.set(id, refund);
    this.#size += 1;
    this.#bytes += refundBytes(refund);
    while (this.#size > this.maxPending || (this.#bytes > this.maxBytes && this.#size > 1)) {
      const [oldest] = this.#waiting.values().next().value?.values() ?? [];
      if (oldest === undefined || !this.#remove(oldest)) break;
      this.dropped += 1;
    }
  }

  /**
   * Writes every pending refund, by key in batches of 200, `concurrency` batches at a time, inside the
   * breaker and outside the ledger (as the journal's write-backs). A batch Redis answered leaves
   * the pending ones; one it refused with a reply error too (it would refuse it again), counted as
   * dropped; one it could not answer stays. Resolves false when one could not be written.
   */
  async write(concurrency: number): Promise<boolean> {
    const batches: Refund[][] = [];
    for (const ids of this.#waiting.values()) {
      const all = [...ids.values()];
      for (let i = 0; i < all.length; i += BATCH) batches.push(all.slice(i, i + BATCH));
    }
    let next = 0;
    let failed = false;
    const worker = async (): Promise<void> => {
      while (next < batches.length) {
        const batch = batches[next++] as Refund[];
        try {
          await this.tier.breaker.fire(this.#script(batch));
          for (const refund of batch) if (this.#remove(refund)) this.written += 1;
        } catch (error) {
          if (!isResilimitError(error) || error.code !== ErrorCode.REDIS_REPLY) {
            failed = true;
            continue;
          }
          for (const refund of batch) if (this.#remove(refund)) this.dropped += 1;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, batches.length) }, worker));
    return !failed;
  }

  /** Removes `refund` if it is still the one pending for its key and id. */
  #remove(refund: Refund): boolean {
    const group = groupOf(refund);
    const ids = this.#waiting.get(group);
    if (ids?.get(refund.id) !== refund) return false;
    ids.delete(refund.id);
    if (ids.size === 0) this.#waiting.delete(group);
    this.#size -= 1;
    this.#bytes -= refundBytes(refund);
    return true;
  }

  /** One script call for `refunds`, all of one window (one key and `windowMs`): what the breaker runs. */
  #script(refunds: readonly Refund[]): () => Promise<number[]> {
    const { key, windowMs } = refunds[0] as Refund;
    return () => this.tier.window[refundCalls](key, refunds, windowMs);
  }
}
