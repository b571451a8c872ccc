import { redisDecision, type LimiterDecision } from './decisions.js';
import type { Parts, PathCall } from './parts.js';
import { memberOf, type SentId } from '../base/call.js';
import { block } from '../base/internal.js';
import { decisionOf, type BatchOutcome } from '../redis/RedisWindow.js';
import type { LocalMs } from '../base/time.js';
import type { DecisionReason } from '../types.js';

/**
 * A call of `limit()` on the decision path. It is also the batch call Redis decides (key, cost, id,
 * limit), so that going to Redis allocates nothing more: `id` is the member string, made once, which
 * the script takes and the admitted decision carries; `callId` what the local window keeps (a
 * generated id stays a number there, see `CallId`).
 */
export class OneCall implements PathCall<BatchOutcome[], LimiterDecision> {
  constructor(
    readonly parts: Parts,
    readonly key: string,
    readonly cost: number,
    readonly callId: SentId,
    /** The local time the call was asked at. */
    readonly now: LocalMs,
    /** The limit the call is decided against (`Settings.limitOf`). */
    readonly limit: number,
  ) {
    this.id = memberOf(callId);
  }

  readonly id: string;
  /** Where its decision is in the reply of the script call it left in (set by `Coalescer.enqueue`; 0 sent alone). */
  index = 0;

  reserve(sign: 1 | -1): void {
    this.parts.reserved.add(this.key, sign * this.cost);
  }

  ask(): Promise<BatchOutcome[]> {
    return this.parts.coalescer.ask(this);
  }

  settle(reply: BatchOutcome[]): LimiterDecision {
    const { parts } = this;
    // Throws when Redis could not decide this call (its key holds another type), the others of its batch it did.
    const decision = decisionOf(reply[this.index] as BatchOutcome);
    // The local window learns this instance's part of the key's window (what it answers for Redis),
    // and, warm standby, holds this instance's recent traffic when it takes over: an admitted call at
    // the time Redis admitted it (on the local clock), with its id for re-seeding. The offset was
    // learnt from this very round trip: no drift to allow for (and no clock read).
    const admitted = decision.allowed && !decision.duplicate;
    const { offset, settings } = parts;
    const call = admitted ? { at: offset.localOf(decision.nowMs), cost: this.cost, id: this.callId } : undefined;
    const local = parts.local.main;
    // Only mode 'local' has a window to answer with instead: the others take Redis's word (the canary still re-seeds).
    const check = settings.mode === 'local' ? offset : undefined;
    if (!local.observe(this.key, decision.used, this.limit, settings.instances, settings.localShareOf(this.limit), call, check))
      return this.#lost(decision.nowMs);
    if (admitted) {
      // A denial that let this call through (a probe, a smaller cost) no longer holds in Redis; nor does
      // its block here (`observe` lifted it). A retry Redis counted already (a duplicate) proves no room.
      parts.deny.admitted(this.key);
    } else if (!decision.allowed) {
      // Counted from when the call was asked (before Redis decided: the denial may end early, never
      // late); the reply may have been read much later. A blocked key refuses every call, whatever its
      // cost, and the local tier keeps the block for an outage.
      const { blocked } = decision;
      parts.deny.deny(this.key, {
        until: parts.deny.untilFor(parts.now() - this.now, decision.retryAfterMs),
        cost: blocked ? 1 : this.cost,
        remaining: decision.remaining,
        resetAtMs: decision.resetAtMs,
        limit: blocked ? 0 : this.limit,
      });
      if (blocked) local[block](this.key, this.now + decision.retryAfterMs);
    }
    parts.recovery.schedule();
    return redisDecision(decision, this.#idAt(decision.nowMs));
  }

  /** The id Redis knows the call by, decided at `nowMs` (see `WindowModel.redisId`). */
  #idAt(nowMs: number): string {
    return this.parts.tier.window.model.redisId(this.id, nowMs);
  }

  fallback(reason: DecisionReason): LimiterDecision {
    return this.parts.fallback.one(this.key, this.cost, this.callId, reason, this.limit);
  }

  /**
   * Redis admitted the call, but holds fewer calls of the key than this instance's warm window knows
   * it has there (see `LocalWindow.observe`): it lost them (a `FLUSHALL`, an eviction, or another
   * instance's `reset()`). The local window answers instead (reason `'reconciling'`), as it does while
   * a re-seed is written, so that a window Redis emptied does not grant a fresh limit on top of the
   * calls it lost; a refusal gives the permit Redis took back (a pending refund, written by the next
   * pass), an admission is journalled under the same id (Redis counts it once). The heartbeat that
   * follows tells whether Redis lost more (its set vanished too): then every warm window is re-seeded.
   */
  #lost(nowMs: number): LimiterDecision {
    const { recovery } = this.parts;
    recovery.report.suspected();
    const decision = this.fallback('reconciling');
    if (!decision.allowed) recovery.refunds.add(this.key, this.#idAt(nowMs), this.cost);
    else recovery.markUnanswered(this.key, this.id); // Redis holds it: a refund goes there too
    recovery.schedule();
    return decision;
  }
}
