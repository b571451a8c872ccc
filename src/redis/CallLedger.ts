/**
 * The calls outstanding at Redis that decide something, kept by `RedisTier.call`: their start times
 * in call order, the decisions they carry, when the last one settled, and the average latency of
 * those answered in time. The gate's rules (stall, saturation, slowness) read it (`Gate.ts`).
 *
 * Invariant: `outstandingDecisions` is the sum of the decisions of the calls in the ledger, and a
 * call leaves it when it settles, a late one included (a timed-out command still runs).
 */
export class CallLedger {
  readonly #outstanding = new Map<number, number>();
  #sequence = 0;
  #outstandingDecisions = 0;
  #lastReplyAt = 0;
  #latencyMs = 1;

  constructor(
    readonly perf: { now(): number },
    /** A reply later than this (ms) says how slow Redis was, not how slow it is: not averaged. */
    readonly timeoutMs: number,
  ) {}

  /** When the oldest outstanding call was sent (perf clock), or undefined when none is. */
  get oldestCallAt(): number | undefined {
    return this.#outstanding.size === 0 ? undefined : (this.#outstanding.values().next().value as number);
  }

  /** When the last call settled (perf clock), 0 before any. */
  get lastReplyAt(): number {
    return this.#lastReplyAt;
  }

  /** Calls in the ledger not yet settled (timed-out ones still running included). */
  get callsInFlight(): number {
    return this.#outstanding.size;
  }

  /** Decisions in calls not yet settled (timed-out ones still running included). */
  get outstandingDecisions(): number {
    return this.#outstandingDecisions;
  }

  /** The average latency of recent decision calls answered within the deadline, ms. */
  get latencyMs(): number {
    return this.#latencyMs;
  }

  /** Enters a call of `decisions` decisions sent now: its sequence, for {@link settle}. */
  enter(decisions: number): number {
    const sequence = ++this.#sequence;
    this.#outstanding.set(sequence, this.perf.now());
    this.#outstandingDecisions += decisions;
    return sequence;
  }

  /** The call entered as `sequence` settled now: `'answered'` with a reply (an error reply included), or `'failed'`. */
  settle(sequence: number, decisions: number, outcome: 'answered' | 'failed'): void {
    const at = this.perf.now();
    const sentAt = this.#outstanding.get(sequence) as number;
    this.#outstanding.delete(sequence);
    this.#outstandingDecisions -= decisions;
    this.#lastReplyAt = at;
    const latency = at - sentAt;
    if (outcome === 'answered' && decisions > 0 && latency <= this.timeoutMs) this.#latencyMs += (latency - this.#latencyMs) * 0.05;
  }
}
