import type { Coalescer } from './Coalescer.js';
import type { DenyCache } from './DenyCache.js';
import type { ResilimitError } from '../options/errors.js';
import type { Fallback } from './Fallback.js';
import type { Gate } from './Gate.js';
import type { LocalTier } from '../local/LocalTier.js';
import type { Recovery } from '../recovery/Recovery.js';
import { reasonOf } from './failures.js';
import type { RedisTier } from '../redis/RedisTier.js';
import type { Reservations } from './Reservations.js';
import type { DecisionReason } from '../types.js';

/** The parts a call on the decision path uses, wired once by `ResilientLimiter`. */
export type Parts = {
  /** The local clock (the `clock` option, or a steady one that a wall-clock step does not move). */
  readonly now: () => number;
  readonly tier: RedisTier;
  readonly gate: Gate;
  readonly coalescer: Coalescer;
  /** `coalesce` option. */
  readonly coalesce: boolean;
  readonly local: LocalTier;
  readonly deny: DenyCache;
  readonly reserved: Reservations;
  readonly recovery: Recovery;
  readonly fallback: Fallback;
};

/**
 * One call on the decision path: what differs between `limit()` (`OneCall`), `limitAll()`
 * (`AllCall`) and `peek()` (`PeekCall`). `R` is Redis's reply, `D` the decision.
 */
export interface PathCall<R, D> {
  /** Reserves its permits while it waits on Redis (`sign` 1), or releases them (-1). */
  reserve(sign: 1 | -1): void;
  /** Asks Redis; rejects when Redis did not decide (the rejection says why). */
  ask(): Promise<R>;
  /**
   * Redis answered: record what it admitted in the warm window, or remember what it refused; the
   * decision. Throws, as `ask` rejects, when the reply holds no decision for this call (its key
   * holds another type while the other calls of its script call were decided).
   */
  settle(reply: R): D;
  /** The answer by mode when Redis did not decide, for `reason`. */
  fallback(reason: DecisionReason): D;
}

/**
 * The one decision path of `limit()`, `limitAll()` and `peek()`: gate → Redis → record or deny →
 * fallback. The gate (`Gate.ts`) and the fallback (`Fallback.ts`) are shared parts; a call the gate
 * lets through runs {@link run}: Redis, then record or deny, or the fallback when Redis did not
 * decide. The caller asks the gate first, so that a diverted call is answered synchronously, with no
 * call object, no promise and no microtask: the whole path while Redis is down.
 *
 * It owns the count of calls on their way to Redis, which `close()` waits for.
 */
export class DecisionPath {
  #unsettled = 0;
  #whenSettled: (() => void) | undefined;

  constructor(readonly onReplyError: (error: ResilimitError) => void) {}

  /** Asks Redis for `call`; records or denies what it decided, or answers by the fallback when it did not. */
  async run<R, D>(call: PathCall<R, D>): Promise<D> {
    this.#unsettled += 1;
    call.reserve(1);
    let reserved = true;
    try {
      const reply = await call.ask();
      call.reserve(-1);
      reserved = false;
      return call.settle(reply);
    } catch (error) {
      if (reserved) {
        call.reserve(-1);
        reserved = false;
      }
      return call.fallback(reasonOf(error, this.onReplyError));
    } finally {
      if (reserved) call.reserve(-1);
      this.#unsettled -= 1;
      if (this.#unsettled === 0) this.#whenSettled?.();
    }
  }

  /** Resolves once no call waits on Redis. */
  settled(): Promise<void> {
    if (this.#unsettled === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      this.#whenSettled = resolve;
    });
  }
}
