import type { Coalescer } from './Coalescer.js';
import type { PollWatch } from '../redis/PollWatch.js';
import type { Recovery } from '../recovery/Recovery.js';
import type { RedisTier } from '../redis/RedisTier.js';
import type { DecisionReason } from '../types.js';

/** After a failed write-back pass, how long calls of keys held by the journal wait to start another, in ms. */
export const HELD_RETRY_MS = 50;

/** What the gate needs of the options. */
export type GateOptions = { timeoutMs: number; maxInFlight: number; slowCallMs: number | 'auto' };

/**
 * Why a call does not go to Redis: every rule, in the order they apply (the deny cache and the kill
 * switch come before, in `ResilientLimiter`). The first that holds names the reason:
 *
 * 1. `reconciling`: a catch-up is writing the journal back (after an outage or a reconnect);
 * 2. `breaker-open`: the breaker is open, or half-open for a PING trial on a sign of life; half-open
 *    otherwise sends (opossum lets exactly one trial through);
 * 3. `not-ready`: the client has never been ready;
 * 4. `breaker-open`: a stall — Redis silent for longer than the deadline while calls wait on it
 *    (this opens the breaker);
 * 5. `saturated`: `maxInFlight` decisions are waiting on Redis (sent, or queued for this turn);
 * 6. `slow`: Redis silent for longer than `slowCallMs` while calls wait on it;
 * 7. `reconciling`: calls of this key (journal group) are journalled and not yet sent (this starts a
 *    write-back pass unless one runs or one failed less than HELD_RETRY_MS ago).
 *
 * "Silent" is counted from the later of the oldest outstanding call and the last reply, as far as
 * this process can vouch for it (`tier.polls`, see `PollWatch`): up to the start of the latest I/O
 * poll known to have completed (it read every reply that had come), or the time the event loop spent
 * waiting for I/O meanwhile. Time that this process's own event loop was busy (its handlers, a GC)
 * is not Redis's silence: a reply may lie unread in the socket meanwhile; nor is a burst of calls
 * made in one turn. The gate shows the watch the loop once per event-loop turn, as the turn's first
 * call is asked while calls wait on Redis, and again in the check phase right after the next poll
 * (one setImmediate per turn, none per call); the breaker shows it each missed deadline, the ledger
 * marks when the wait began. Time is the injectable `perf` clock. It owns only whether the current
 * turn was shown.
 */
export class Gate {
  /** The watch has seen the current turn (set as its first call is asked, cleared after the next poll). */
  #looked = false;

  constructor(
    readonly tier: RedisTier,
    readonly recovery: Recovery,
    readonly coalescer: Coalescer,
    readonly options: GateOptions,
    readonly perf: { now(): number },
  ) {}

  /**
   * Why a call of `group` must not go to Redis now, or undefined when it may. Acts on what it finds:
   * a stall opens the breaker (rule 4), a held key starts a write-back pass (rule 7).
   */
  divert(group: string): DecisionReason | undefined {
    return this.#health() ?? this.#held(group);
  }

  /** {@link divert} for the windows of one `limitAll()` call (rule 7 for each, in order). */
  divertAll(groups: readonly { readonly group: string }[]): DecisionReason | undefined {
    let reason = this.#health();
    for (let i = 0; reason === undefined && i < groups.length; i += 1) reason = this.#held((groups[i] as { group: string }).group);
    return reason;
  }

  /** The slow-call threshold in force, ms: the option, or 4 × the average latency within [5, timeoutMs]. */
  slowCallMs(): number {
    const set = this.options.slowCallMs;
    if (set !== 'auto') return set;
    return Math.min(Math.max(5, 4 * this.tier.ledger.latencyMs), this.options.timeoutMs);
  }

  /** Rules 1 to 6. */
  #health(): DecisionReason | undefined {
    if (this.recovery.catchingUp) return 'reconciling';
    const { tier } = this;
    const state = tier.state;
    if (state === 'open') return 'breaker-open';
    // Half-open: the trial call goes (opossum lets exactly one through), unless the trial is a PING
    // on a sign of life (see Breaker.trial): opossum refuses every call then, so none is made.
    if (state === 'half-open') return tier.breaker.trying ? 'breaker-open' : undefined;
    if (!tier.everReady) return 'not-ready';
    const oldest = tier.ledger.oldestCallAt;
    const silentMs = oldest === undefined ? 0 : this.#look().silentMs(Math.max(oldest, tier.ledger.lastReplyAt));
    if (silentMs > this.options.timeoutMs) {
      // Evidence enough to open at once; an error rate would need calls that we are not sending.
      tier.breaker.open();
      return 'breaker-open';
    }
    if (tier.ledger.outstandingDecisions + this.coalescer.size >= this.options.maxInFlight) return 'saturated';
    if (silentMs > this.slowCallMs()) return 'slow';
    return undefined;
  }

  /** Rule 7. A client that is not connected fails the call anyway (and the breaker counts it): no hold. */
  #held(group: string): DecisionReason | undefined {
    const { recovery } = this;
    if (!recovery.holds(group) || !this.tier.ready) return undefined;
    const failedAt = recovery.passFailedAt;
    if (failedAt !== undefined && this.perf.now() - failedAt >= HELD_RETRY_MS) {
      // The pass sends this key's calls before it returns when it can: then this call goes right behind them.
      recovery.schedule();
      if (!recovery.holds(group)) return undefined;
    }
    return 'reconciling';
  }

  /** The poll watch, shown this turn (see the class comment). */
  #look(): PollWatch {
    const { polls } = this.tier;
    if (!this.#looked) {
      this.#looked = true;
      polls.observe('any');
      setImmediate(this.#endTurn).unref();
    }
    return polls;
  }

  readonly #endTurn = (): void => {
    this.tier.polls.observe('check');
    this.#looked = false;
  };
}
