import type { BatchCall, BatchOutcome } from '../redis/RedisWindow.js';

/**
 * The most calls one coalesced script call carries. Measured at 64 concurrent calls: 16 to 32 gave
 * about 1.2x the decisions/s of one script call for the whole turn (64), which leaves Redis idle
 * while this process reads the replies and this process idle while Redis runs the script.
 */
const MAX_BATCH = 16;

/** A call to coalesce, told by {@link Coalescer.enqueue} where its decision will be in its batch's. */
export type QueuedCall = BatchCall & { index: number };

/** A script call being filled this turn: its calls, and the promise of their decisions in the same order. */
type Batch = PromiseWithResolvers<BatchOutcome[]> & { readonly slot: number; readonly calls: QueuedCall[] };

/**
 * Coalescing (`coalesce: true`): the calls of `limit()` made in one event-loop turn leave together
 * on the next tick, as script calls of at most MAX_BATCH calls, one group per hash slot on a Cluster
 * (a script's keys must share one). The calls of a batch share one promise, of the batch's
 * decisions: nothing is made per call. It owns this turn's batches; {@link size} counts their calls
 * for the saturation gate.
 */
export class Coalescer {
  /** This turn's batches, in the order they were opened. */
  #batches: Batch[] = [];
  /** The batch that each hash slot's calls join now (slot 0 on a single Redis), until it is full. */
  readonly #filling = new Map<number, Batch>();
  #size = 0;

  constructor(
    /** Sends one batch. */
    readonly send: (calls: readonly BatchCall[]) => Promise<BatchOutcome[]>,
    /** The hash slot of a call's key (a Cluster), or undefined on a single Redis. */
    readonly slotOf: ((call: BatchCall) => number) | undefined,
    /** Whether calls are coalesced now (the `coalesce` option, and the breaker closed). */
    readonly coalescing: () => boolean = () => true,
  ) {}

  /** Sends `call`: queued for this turn's batch while {@link coalescing}, else alone. As {@link enqueue} resolves. */
  ask(call: QueuedCall): Promise<BatchOutcome[]> {
    return this.coalescing() ? this.enqueue(call) : this.send([call]);
  }

  /** Calls queued for this turn's batches. */
  get size(): number {
    return this.#size;
  }

  /**
   * Queues `call` for a batch of this turn, which leaves on the next tick. Resolves with the batch's
   * outcomes (a decision, or the error of a call Redis could not decide), `call`'s at `call.index`
   * (set here); rejects as the batch's script call does.
   */
  enqueue(call: QueuedCall): Promise<BatchOutcome[]> {
    const slot = this.slotOf === undefined ? 0 : this.slotOf(call);
    let batch = this.#filling.get(slot);
    if (batch === undefined || batch.calls.length === MAX_BATCH) {
      batch = Object.assign(Promise.withResolvers<BatchOutcome[]>(), { slot, calls: [] });
      this.#filling.set(slot, batch);
      this.#batches.push(batch);
    }
    call.index = batch.calls.length;
    batch.calls.push(call);
    this.#size += 1;
    if (this.#size === 1) process.nextTick(this.#flush);
    return batch.promise;
  }

  readonly #flush = (): void => {
    const batches = this.#batches;
    this.#batches = [];
    this.#filling.clear();
    this.#size = 0;
    // In slot order on a Cluster (a stable sort: a slot's batches keep theirs).
    if (this.slotOf !== undefined) batches.sort((a, b) => a.slot - b.slot);
    for (const batch of batches) this.send(batch.calls).then(batch.resolve, batch.reject);
  };
}
