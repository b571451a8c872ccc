import type { CallId } from './input.js';
import type { BatchCall, BatchDecision } from './RedisWindow.js';

/**
 * The most calls one coalesced script call carries. Measured at 64 concurrent calls: 16 to 32 gave
 * about 1.2x the decisions/s of one script call for the whole turn (64), which leaves Redis idle
 * while this process reads the replies and this process idle while Redis runs the script.
 */
const MAX_BATCH = 16;

type QueuedCall = BatchCall & {
  resolve: (decision: BatchDecision) => void;
  reject: (error: unknown) => void;
};

/**
 * Coalescing (`coalesce: true`): the calls of `limit()` made in one event-loop turn leave together
 * on the next tick, as script calls of at most MAX_BATCH calls, one group per hash slot on a Cluster
 * (a script's keys must share one), all in one write to the socket. It owns the queue of this turn;
 * {@link size} counts it for the saturation gate.
 */
export class Coalescer {
  #queued: QueuedCall[] = [];

  constructor(
    /** Sends one batch. */
    readonly send: (calls: readonly BatchCall[]) => Promise<BatchDecision[]>,
    /** Groups calls by hash slot (a Cluster), or undefined on a single Redis. */
    readonly bySlot: ((calls: QueuedCall[]) => QueuedCall[][]) | undefined,
    /** Runs a flush so that its batches leave in one write to the socket (`RedisTier.together`). */
    readonly together: (write: () => void) => void,
  ) {}

  /** Calls queued for this turn's batch. */
  get size(): number {
    return this.#queued.length;
  }

  /** Queues a call for the batch of this turn; the batch leaves on the next tick. */
  enqueue(key: string, cost: number, id: CallId, limit: number): Promise<BatchDecision> {
    return new Promise<BatchDecision>((resolve, reject) => {
      this.#queued.push({ key, cost, id, limit, resolve, reject });
      if (this.#queued.length === 1) process.nextTick(this.#flush);
    });
  }

  readonly #flush = (): void => this.together(this.#sendQueued);

  readonly #sendQueued = (): void => {
    const queued = this.#queued;
    this.#queued = [];
    const groups = this.bySlot === undefined ? [queued] : this.bySlot(queued);
    for (const group of groups) {
      for (let i = 0; i < group.length; i += MAX_BATCH) {
        const chunk = group.slice(i, i + MAX_BATCH);
        this.send(chunk).then(
          (decisions) => chunk.forEach((call, j) => call.resolve(decisions[j] as BatchDecision)),
          (error: unknown) => chunk.forEach((call) => call.reject(error)),
        );
      }
    }
  };
}
