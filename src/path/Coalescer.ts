import type { BatchCall, BatchOutcome } from '../redis/RedisWindow.js';

/**
 * The most calls one coalesced script call carries. Measured at 64 concurrent calls: 16 to 32 gave
 * about 1.2x the decisions/s of one script call for the whole turn (64), which leaves Redis idle
 * while this process reads the replies and this process idle while Redis runs the script.
 */
const MAX_BATCH = 16;

/**
 * Script calls the coalescer keeps in flight when it can: with one, this process and Redis take
 * turns (one waits while the other works). Measured at 16 callers with one batch of 16 a turn:
 * batches of 8 made 1.44x the decisions/s, of 4 1.59x; at 64 callers the same small batches lost
 * 12–24 %. So a turn's calls are split only as far as needed to have two script calls out.
 */
const IN_FLIGHT = 2;

/** A call to coalesce, told by {@link Coalescer.enqueue} where its decision will be in its batch's. */
export type QueuedCall = BatchCall & { index: number };

/** Sends the calls of one script call: the tier's batch, or a call's own (a hot key's lease). */
type Send = (calls: readonly BatchCall[]) => Promise<BatchOutcome[]>;

/**
 * A script call being filled this turn: its calls, and the promise of their decisions in the same
 * order; `send`: a call that goes alone by a script of its own (a hot key's lease), in this turn's order.
 */
type Batch = PromiseWithResolvers<BatchOutcome[]> & { readonly slot: number; readonly calls: QueuedCall[]; readonly send?: Send };

/**
 * Coalescing (`coalesce: true`): the calls of `limit()` made in one event-loop turn leave together
 * on the next tick, as script calls of at most MAX_BATCH calls (fewer when fewer than IN_FLIGHT
 * script calls are out: see there), one group per hash slot on a Cluster
 * (a script's keys must share one). The calls of a batch share one promise, of the batch's
 * decisions: nothing is made per call. One caller at a time is not batched at all (see `#alone`).
 * It owns this turn's batches; {@link size} counts their calls for the saturation gate.
 */
export class Coalescer {
  /** This turn's batches, in the order they were opened. */
  #batches: Batch[] = [];
  /** The batch that each hash slot's calls join now (slot 0 on a single Redis), until it is full. */
  readonly #filling = new Map<number, Batch>();
  #size = 0;
  /** Script calls this turn's batches are to be spread over (see {@link IN_FLIGHT}). */
  #toSend = 1;
  /** Calls the last turn sent (1 after a call sent alone): the guess of how many this one will. */
  #lastTurn = 0;

  constructor(
    /** Sends one batch. */
    readonly send: Send,
    /** The hash slot of a call's key (a Cluster), or undefined on a single Redis. */
    readonly slotOf: ((call: BatchCall) => number) | undefined,
    /** Whether calls are coalesced now (the `coalesce` option, and the breaker closed). */
    readonly coalescing: () => boolean = () => true,
    /** Script calls sent and not yet settled. */
    readonly inFlight: () => number = () => 0,
  ) {}

  /**
   * Sends `call`: queued for this turn's batch while {@link coalescing}, else alone. As {@link enqueue}
   * resolves. With `alone`, the call goes by it, in a script call of its own, in this turn's order: its
   * reply is then read in the order Redis decided it, with the others (`OneCall.settle` relies on it).
   */
  ask(call: QueuedCall, alone?: Send): Promise<BatchOutcome[]> {
    if (this.coalescing() && !this.#alone()) return this.enqueue(call, alone);
    call.index = 0;
    return (alone ?? this.send)([call]);
  }

  /**
   * A call goes at once, by itself, when the last turn sent one call, none is queued this turn and no
   * script call is out: one caller at a time. It skips the wait for the tick (measured at one caller:
   * about a fifth of the Node CPU of a decision); should more calls follow it in the same turn, they
   * leave together on the tick, behind it (one script call more than before, once per such burst). Not
   * when the last turn sent several: a call sent at once there would leave the rest of its turn to
   * one uneven batch behind it (measured at 16 callers: 10–20 % fewer decisions/s). Not before the
   * first turn: nothing tells yet that calls come one at a time.
   */
  #alone(): boolean {
    return this.#lastTurn === 1 && this.#size === 0 && this.inFlight() === 0;
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
  enqueue(call: QueuedCall, alone?: Send): Promise<BatchOutcome[]> {
    // As many calls a batch as spreads the turn's calls, guessed from the last turn's, over the script
    // calls still to send to have IN_FLIGHT out; past the guess (a burst), batches are full again.
    if (this.#size === 0) this.#toSend = Math.max(1, IN_FLIGHT - this.inFlight());
    const cap = this.#size < this.#lastTurn ? Math.min(MAX_BATCH, Math.ceil(this.#lastTurn / this.#toSend)) : MAX_BATCH;
    const slot = this.slotOf === undefined ? 0 : this.slotOf(call);
    let batch = alone === undefined ? this.#filling.get(slot) : undefined;
    if (batch === undefined || batch.calls.length >= cap) {
      batch = Object.assign(Promise.withResolvers<BatchOutcome[]>(), { slot, calls: [], ...(alone === undefined ? {} : { send: alone }) });
      if (alone === undefined) this.#filling.set(slot, batch);
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
    this.#lastTurn = this.#size;
    this.#size = 0;
    // In slot order on a Cluster (a stable sort: a slot's batches keep theirs).
    if (this.slotOf !== undefined) batches.sort((a, b) => a.slot - b.slot);
    for (const batch of batches) (batch.send ?? this.send)(batch.calls).then(batch.resolve, batch.reject);
  };
}
