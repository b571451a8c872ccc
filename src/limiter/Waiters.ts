import type { WindowModel } from '../redis/models/WindowModel.js';
import { knownOptions } from '../base/checks.js';
import type { LimiterDecision } from '../path/decisions.js';
import { ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { checkCost, checkId, checkKey, nextId } from '../base/call.js';
import { integer, MAX_INT } from '../options/options.js';
import type { LimitOptions } from '../types.js';

/** Options of `acquire()`. */
export type AcquireOptions = {
  /**
   * The longest wait for a permit, in ms from the call of `acquire()`: once the window's
   * `retryAfterMs` says a permit would come later, `acquire()` resolves with that refusal at once.
   * 0 makes one attempt, as `limit()` does. Integer 0 … 2^31 - 1. Required.
   */
  maxWaitMs: number;
  /** Permits the call takes, as `limit()`'s `cost`. @default 1 */
  cost?: number;
  /**
   * The call's id, as `limit()`'s `id`; every attempt of this call uses it, so an attempt Redis
   * admitted after its deadline (the answer came from the fallback) is not counted again.
   * @default one generated id for all the call's attempts
   */
  id?: string;
  /** Aborting it rejects the call with `signal.reason` and takes it out of the queue. */
  signal?: AbortSignal;
};

const ACQUIRE_OPTIONS = ['maxWaitMs', 'cost', 'id', 'signal'] as const satisfies readonly (keyof AcquireOptions)[];

/** A call of `acquire()` waiting for its permit. */
type Waiter = {
  readonly cost: number;
  /** Its id, the same for every ask (undefined when the window's model names no call: see `WindowModel.namesCalls`). */
  readonly id: string | undefined;
  /** When its wait ends, on `perf`. */
  readonly deadline: number;
  readonly resolve: (decision: LimiterDecision) => void;
  readonly reject: (error: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
};

/**
 * What a key's queue is doing: its head's `limit()` call is out (`asking`), or it waits for the
 * window's `retryAfterMs` (`sleeping`, one timer for the whole queue) before asking again.
 */
type Turn =
  | { readonly kind: 'asking' }
  | { readonly kind: 'sleeping'; readonly timer: NodeJS.Timeout; readonly wakeAt: number; readonly refusal: LimiterDecision };

/** The waiters of one key, in arrival order (a Set keeps it, and deletes an aborted one in O(1)). */
type Queue = { readonly key: string; readonly waiters: Set<Waiter>; turn: Turn };

/**
 * The waiting calls of `acquire()`: per key, a FIFO queue of which only the head calls `limit()`.
 * Admitted: the head resolves and the next asks at once. Refused with `retryAfterMs` R: every waiter
 * whose deadline comes before R resolves with the refusal now (under FIFO none of them could be
 * served before the head), and the queue sleeps R on one timer, then the head asks again. No
 * polling: the only calls are the one per waiter admitted and the one per `retryAfterMs` refusal.
 *
 * A queue exists while it has waiters or a call out; `#count` is the waiters of all queues.
 */
export class Waiters {
  readonly #queues = new Map<string, Queue>();
  #count = 0;
  #closed = false;
  /** The calls of the queues' heads on their way, and the refunds of permits admitted for waiters gone by then (see {@link settled}). */
  readonly #pending = new Set<Promise<void>>();

  constructor(
    /** `limit()` of the limiter. */
    readonly decide: (key: string, options: LimitOptions) => Promise<LimiterDecision>,
    /** The limit of a key's calls, to check a cost before the call waits. */
    readonly limit: (key: string) => number,
    /** `refund()` of the limiter: gives back a permit admitted for a waiter that is gone. */
    readonly refund: (key: string, id: string) => Promise<unknown>,
    readonly options: { readonly maxWaiters: number; readonly perf: { now(): number } },
    /** The window's counting model: a model that does not name calls refuses a caller's id, and none is made. */
    readonly model: WindowModel,
  ) {}

  /** Waiters of every key. */
  get size(): number {
    return this.#count;
  }

  /** See `ResilientLimiter.acquire`. */
  async acquire(key: string, options: AcquireOptions): Promise<LimiterDecision> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'acquire() was called after close()');
    checkKey(key);
    const raw = knownOptions('acquire()', options, ACQUIRE_OPTIONS);
    const maxWaitMs = integer('maxWaitMs', raw['maxWaitMs'], 0, MAX_INT);
    const signal = raw['signal'];
    if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalidOption('signal', 'an AbortSignal', signal);
    const cost = checkCost(raw['cost'], this.limit(key));
    if (raw['id'] !== undefined) this.model.checkCallerId(raw['id']);
    const id = raw['id'] !== undefined ? checkId(raw['id']) : this.model.namesCalls ? nextId() : undefined;
    signal?.throwIfAborted();
    if (this.#count >= this.options.maxWaiters) {
      throw new ResilimitError(
        ErrorCode.TOO_MANY_WAITERS,
        `acquire(): \`maxWaiters\` (${this.options.maxWaiters}) calls are already waiting`,
      );
    }
    const { promise, resolve, reject } = Promise.withResolvers<LimiterDecision>();
    const now = this.options.perf.now();
    const waiter: Waiter = { cost, id, deadline: now + maxWaitMs, resolve, reject, signal, onAbort: () => this.#abort(key, waiter) };
    signal?.addEventListener('abort', waiter.onAbort, { once: true });
    this.#count += 1;
    const queue = this.#queues.get(key);
    if (queue === undefined) {
      const fresh: Queue = { key, waiters: new Set([waiter]), turn: { kind: 'asking' } };
      this.#queues.set(key, fresh);
      this.#ask(fresh);
    } else {
      queue.waiters.add(waiter);
      const turn = queue.turn;
      if (turn.kind === 'sleeping' && waiter.deadline < turn.wakeAt && this.#take(queue, waiter))
        resolve(refusalAt(turn.refusal, turn.wakeAt - now));
    }
    return promise;
  }

  /**
   * Every sleeping queue asks again now rather than at the end of its refusal's wait: shadow mode went
   * on, and its head's next `limit()` call is admitted (shadowed, if still refused).
   */
  wake(): void {
    for (const queue of this.#queues.values()) {
      if (queue.turn.kind !== 'sleeping') continue;
      clearTimeout(queue.turn.timer);
      this.#ask(queue);
    }
  }

  /** Settles every waiter with `ERR_RESILIMIT_CLOSED` and clears every timer; later calls are refused. */
  close(): void {
    this.#closed = true;
    const error = new ResilimitError(ErrorCode.CLOSED, 'acquire(): the limiter was closed while the call waited');
    for (const queue of this.#queues.values()) {
      if (queue.turn.kind === 'sleeping') clearTimeout(queue.turn.timer);
      for (const waiter of queue.waiters) if (this.#take(queue, waiter)) waiter.reject(error);
    }
    this.#queues.clear();
  }

  /** The head of `queue` calls `limit()`; an empty queue is forgotten. */
  /**
   * Resolves once the heads' calls on their way have been answered and the permits admitted for waiters
   * already gone are given back: `close()` waits for it before it lets go of the client.
   */
  async settled(): Promise<void> {
    while (this.#pending.size !== 0) await Promise.all([...this.#pending]);
  }

  #ask(queue: Queue): void {
    const head = queue.waiters.values().next().value;
    if (head === undefined) {
      this.#queues.delete(queue.key);
      return;
    }
    queue.turn = { kind: 'asking' };
    const asking = this.decide(queue.key, head.id === undefined ? { cost: head.cost } : { cost: head.cost, id: head.id }).then(
      (decision) => this.#answered(queue, head, decision),
      (error: unknown) => {
        // limit() refuses the call itself (the limit function fell below its cost, say): the head ends, the next asks.
        if (this.#closed) return;
        if (this.#take(queue, head)) head.reject(error);
        this.#ask(queue);
      },
    );
    this.#pending.add(asking);
    void asking.finally(() => this.#pending.delete(asking));
  }

  #answered(queue: Queue, head: Waiter, decision: LimiterDecision): void {
    // Aborted during the call, or close() settled every waiter: a permit admitted for nobody is given back.
    const gone = this.#closed || !queue.waiters.has(head);
    if (gone && decision.id !== undefined) {
      const refunding = this.refund(queue.key, decision.id).then(
        () => undefined,
        () => undefined,
      );
      this.#pending.add(refunding);
      void refunding.finally(() => this.#pending.delete(refunding));
    }
    if (this.#closed) return;
    if (gone) {
      this.#ask(queue);
      return;
    }
    if (decision.allowed) {
      if (this.#take(queue, head)) head.resolve(decision);
      this.#ask(queue);
      return;
    }
    const now = this.options.perf.now();
    // At least 1 ms: a refusal that says "now" must not turn into a loop of calls.
    const wait = Math.max(1, decision.retryAfterMs);
    const wakeAt = now + wait;
    for (const waiter of queue.waiters) if (waiter.deadline < wakeAt && this.#take(queue, waiter)) waiter.resolve(decision);
    if (queue.waiters.size === 0) {
      this.#queues.delete(queue.key);
      return;
    }
    // Not unref'd, unlike the limiter's own timers: a waiter is the caller's work in progress (as a
    // `setTimeout` of node:timers/promises), and it never outlives the waiter's `maxWaitMs`.
    const timer = setTimeout(() => this.#ask(queue), wait);
    queue.turn = { kind: 'sleeping', timer, wakeAt, refusal: decision };
  }

  #abort(key: string, waiter: Waiter): void {
    const queue = this.#queues.get(key);
    if (queue === undefined || !queue.waiters.has(waiter)) return;
    if (this.#take(queue, waiter)) waiter.reject(waiter.signal?.reason);
    if (queue.waiters.size === 0 && queue.turn.kind === 'sleeping') {
      clearTimeout(queue.turn.timer);
      this.#queues.delete(key);
    }
  }

  /** Takes `waiter` out of `queue` before it is settled: false when it already was. */
  #take(queue: Queue, waiter: Waiter): boolean {
    if (!queue.waiters.delete(waiter)) return false;
    this.#count -= 1;
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    return true;
  }
}

/** A refusal given again `waitMs` before the queue asks next: the same answer, with the wait left. */
function refusalAt(d: LimiterDecision, waitMs: number): LimiterDecision {
  return {
    allowed: false,
    limit: d.limit,
    remaining: d.remaining,
    retryAfterMs: Math.max(1, Math.ceil(waitMs)),
    resetAtMs: d.resetAtMs,
    source: d.source,
    reason: d.reason,
    reducedCapacity: d.reducedCapacity,
    id: undefined,
  };
}
