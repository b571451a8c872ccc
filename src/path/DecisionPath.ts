import type { ResilimitError } from '../base/errors.js';
import type { SentId } from '../base/call.js';
import { AllCall } from './AllCall.js';
import {
  combine,
  denyCacheDecision,
  disabledDecision,
  shadowed,
  shadowedAll,
  type LimitAllDecision,
  type LimitDecision,
  type LimiterDecision,
  type ShadowedDecision,
} from './decisions.js';
import { reasonOf } from '../redis/failures.js';
import type { CheckedItem } from '../redis/allWindows.js';
import { LeaseCall } from './HotKeys.js';
import { OneCall } from './OneCall.js';
import type { Parts, PathCall } from './parts.js';
import { PeekCall } from './PeekCall.js';

export type { Parts, PathCall } from './parts.js';

/**
 * The one decision path of `limit()`, `limitAll()` and `peek()`, every step in order:
 *
 *   kill switch → deny cache (`limit()` only) → gate → Redis → record or deny
 *                                                  ↘ fallback (diverted, or Redis did not decide)
 *   → shadow (a refusal admitted, in shadow mode)
 *
 * A call the gate diverts is answered synchronously (no call object, no promise, no microtask: the
 * whole path while Redis is down); one that goes to Redis is a call object (`OneCall`, `AllCall`,
 * `PeekCall`) run by {@link run}, and its answer is a promise. The front door checks the arguments
 * before, and counts and publishes the decision after (`Stats`).
 *
 * It owns the count of calls on their way to Redis, which `close()` waits for.
 */
export class DecisionPath {
  #unsettled = 0;
  #whenSettled: (() => void) | undefined;

  constructor(
    readonly parts: Parts,
    /** Redis answered a call with an error about the request (the `redisReplyError` event). */
    readonly onReplyError: (error: ResilimitError) => void,
  ) {}

  /** `limit()`'s decision of a call of `cost` under `limit` (`Settings.limitOf`). */
  one(key: string, cost: number, id: SentId, limit: number): LimiterDecision | Promise<LimiterDecision> {
    const { parts } = this;
    const now = parts.now();
    if (!parts.settings.enabled) return disabledDecision(now, limit, id);
    // A hot key: admitted on its lease, or after the lease being taken, or this call takes one.
    const hot = parts.hotKeys === undefined || typeof id !== 'number' ? undefined : parts.hotKeys.use(key, cost, id, limit, now);
    if (hot !== undefined && hot !== 'take') return hot instanceof Promise ? this.#after(hot, () => this.one(key, cost, id, limit)) : hot;
    const { deny } = parts;
    const denial = deny.check(key, cost, limit);
    // A retry of a call Redis admitted (the caller's id, in the warm window) is Redis's to answer: a duplicate.
    if (denial !== undefined && (typeof id !== 'string' || !parts.local.main.holds(key, id))) {
      return this.#shadow(denyCacheDecision(limit, denial, deny.perf.now()));
    }
    const diverted = parts.gate.divert(key);
    if (diverted !== undefined) return this.#shadow(parts.fallback.one(key, cost, id, diverted, limit, now));
    return this.run(new (hot === 'take' ? LeaseCall : OneCall)(parts, key, cost, id, now, limit), this.#shadow);
  }

  /** `limitAll()`'s decision of `items` together (their local windows made first). */
  all(items: readonly CheckedItem[], id: SentId): LimitAllDecision | Promise<LimitAllDecision> {
    const { parts } = this;
    for (const item of items) parts.local.forWindow(item.windowMs);
    const now = parts.now();
    if (!parts.settings.enabled) {
      return combine(
        items.map((item) => disabledDecision(now, item.limit)),
        'disabled',
        'disabled',
      );
    }
    const diverted = parts.gate.divertAll(items);
    if (diverted !== undefined) return this.#shadowAll(parts.fallback.all(items, id, diverted));
    return this.run(new AllCall(parts, items, id, now), this.#shadowAll);
  }

  /** `peek()`'s answer for a call of cost 1 under `limit`: the deny cache is not consulted. */
  peek(key: string, limit: number): LimitDecision | Promise<LimitDecision> {
    const { parts } = this;
    if (!parts.settings.enabled) return disabledDecision(parts.now(), limit);
    const diverted = parts.gate.divert(key);
    if (diverted !== undefined) return this.#shadow(parts.fallback.peek(key, diverted, limit));
    return this.run(new PeekCall(parts, key, limit), this.#shadow);
  }

  /**
   * Asks Redis for `call`; records or denies what it decided, or answers by the fallback when it did
   * not; `finish` last (shadow mode).
   */
  async run<R, D>(call: PathCall<R, D>, finish: (decision: D) => D): Promise<D> {
    this.#unsettled += 1;
    call.reserve(1);
    let reserved = true;
    try {
      const reply = await call.ask();
      call.reserve(-1);
      reserved = false;
      return finish(call.settle(reply));
    } catch (error) {
      if (reserved) {
        call.reserve(-1);
        reserved = false;
      }
      return finish(call.fallback(reasonOf(error, this.onReplyError)));
    } finally {
      if (reserved) call.reserve(-1);
      this.#done();
    }
  }

  /** `then` once `before` settles, counted as a call waiting on Redis meanwhile (close() waits for it). */
  async #after<D>(before: Promise<unknown>, then: () => D | Promise<D>): Promise<D> {
    this.#unsettled += 1;
    try {
      await before;
      return await then();
    } finally {
      this.#done();
    }
  }

  /** A call counted by {@link run} or {@link #after} no longer waits. */
  #done(): void {
    this.#unsettled -= 1;
    if (this.#unsettled === 0) this.#whenSettled?.();
  }

  /** Resolves once no call waits on Redis. */
  settled(): Promise<void> {
    if (this.#unsettled === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      this.#whenSettled = resolve;
    });
  }

  /** Shadow mode: a refusal is admitted all the same, consuming nothing (`shadowRejected`). One flag read per refusal. */
  readonly #shadow = <D extends LimitDecision>(d: D): D | ShadowedDecision => (d.allowed || !this.parts.settings.shadow ? d : shadowed(d));

  /** {@link #shadow} for `limitAll()`: the refusing limits' decisions shadowed too. */
  readonly #shadowAll = (d: LimitAllDecision): LimitAllDecision =>
    d.allowed || !this.parts.settings.shadow ? d : shadowedAll(d, d.decisions.map(this.#shadow));
}
