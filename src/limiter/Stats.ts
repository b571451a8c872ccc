import { channel } from 'node:diagnostics_channel';
import type { EventEmitter } from 'node:events';
import type { BreakerState } from '../redis/Breaker.js';
import { REASONS, type LimitAllDecision, type LimitDecision, type LimiterDecision, type ShadowedDecision } from '../path/decisions.js';
import type { Parts } from '../path/parts.js';
import type { LimiterEvents } from './events.js';
import type { Mode } from '../options/options.js';
import type { Settings } from '../path/Settings.js';
import type { DecisionReason, DecisionSource } from '../types.js';

/** Counters since the limiter was created; read with `ResilientLimiter.stats()`. */
export type LimiterStats = {
  state: BreakerState;
  mode: Mode;
  enabled: boolean;
  /** Shadow mode is on (the `shadow` option, `setShadow()`). */
  shadow: boolean;
  limit: number;
  windowMs: number;
  /** The local window's limit: `local.limit`, or `ceil(limit / instances)`. */
  localLimit: number;
  instances: number;
  /**
   * Other instances that may be answering locally with calls Redis has not seen yet (after an outage,
   * until they beat again): Redis's decisions leave their local shares free meanwhile. 0 unless
   * `instances: 'auto'`.
   */
  unrecovered: number;
  /**
   * Ms left on this instance's lease to answer locally at its share (`local.leaseMs`), renewed by every
   * heartbeat Redis answers; 0 once it has ended (then `local.afterLease` applies). Absent unless
   * `instances: 'auto'`.
   */
  leaseLeftMs?: number;
  /** The lease an instance answers locally on after its last heartbeat (`local.leaseMs`). Absent unless `instances: 'auto'`. */
  leaseMs?: number;
  /** The breaker's deadline on every Redis call (`breaker.timeoutMs`). */
  timeoutMs: number;
  decisions: number;
  /** Decisions that admitted the call, shadowed ones included: `allowed - shadowRejected` is what enforcing the limit would have admitted. */
  allowed: number;
  /** Decisions shadow mode admitted though the limit refused them (`shadowRejected: true`), counted in `allowed` too. */
  shadowRejected: number;
  bySource: Record<DecisionSource, number>;
  byReason: Record<DecisionReason, number>;
  /** Decisions waiting on Redis now: sent (timed-out calls still running included) or queued to be. */
  inFlight: number;
  /** Average latency of recent successful Redis calls, ms. */
  redisLatencyMs: number;
  /** The slow-call threshold in force, ms. */
  slowCallMs: number;
  /** Times the breaker opened. */
  opened: number;
  /** The client is ready now. */
  redisReady: boolean;
  /**
   * How long the client has gone without ever being ready since the limiter was made, ms (see the
   * `notReady` event); 0 once it has been ready (an outage after that shows in `state`).
   */
  notReadyForMs: number;
  reconcile: { pending: number; written: number; expired: number; present: number; dropped: number };
  /**
   * Refunds kept for Redis (see `refund()`): those it could not make when asked, and those asked while
   * a write-back pass ran (made again after it). Waiting now, written since, and dropped (past
   * `maxPending` or `maxPendingBytes`, the oldest first, or refused by Redis).
   */
  refunds: { pending: number; written: number; dropped: number };
};

/**
 * Published on the `resilimit:decision` diagnostics channel for every decision (free without
 * subscribers). `durationMs` is the time `limit()` took, measured only when the channel had
 * subscribers as the call began (0 otherwise).
 */
export type DecisionMessage<L = unknown> = {
  limiter: L;
  key: string;
  cost: number;
  /** `limit()`'s decision, or one limit's within a `limitAll()` answer (a `LimitDecision`: no `id`). */
  decision: LimiterDecision | LimitDecision;
  durationMs: number;
};

const decisionChannel = channel('resilimit:decision');

/**
 * The decision counters of one limiter, and the one place a decision is published. Every decision
 * passes through {@link publish} once; the counters are kept by it alone (and `opened` by the breaker's
 * state changes).
 */
export class Stats {
  readonly byReason = Object.fromEntries(REASONS.map((r) => [r, 0])) as Record<DecisionReason, number>;
  readonly bySource: Record<DecisionSource, number> = { redis: 0, local: 0, 'fail-open': 0, 'fail-closed': 0, disabled: 0 };
  allowed = 0;
  shadowRejected = 0;
  opened = 0;

  constructor(
    /** The limiter: the channel's `limiter`, and where the `shadowRejected` event is emitted. */
    readonly limiter: EventEmitter<LimiterEvents>,
    readonly perf: { now(): number },
  ) {}

  /** The start of a call, for its `durationMs`: read only when the channel has subscribers. */
  started(): number {
    return decisionChannel.hasSubscribers ? this.perf.now() : 0;
  }

  /**
   * Counts a decision and publishes it. A refusal shadow mode admitted (`shadowRejected`, made on the
   * decision path) is counted apart too, and told to the `shadowRejected` listeners.
   */
  publish<D extends LimiterDecision | LimitDecision>(key: string, cost: number, d: D, started: number): D {
    if (d.allowed) {
      this.allowed += 1;
      if (d.shadowRejected === true) this.#shadowed(key, cost, d as ShadowedDecision); // the flag is a ShadowedDecision's alone
    }
    this.byReason[d.reason] += 1;
    this.bySource[d.source] += 1;
    if (decisionChannel.hasSubscribers) {
      const durationMs = started === 0 ? 0 : this.perf.now() - started;
      decisionChannel.publish({ limiter: this.limiter, key, cost, decision: d, durationMs } satisfies DecisionMessage);
    }
    return d;
  }

  /** Publishes the per-limit decisions of a `limitAll()` answer (each through {@link publish}) and returns the answer. */
  publishAll(
    items: readonly { readonly key: string; readonly cost: number }[],
    result: LimitAllDecision,
    started: number,
  ): LimitAllDecision {
    const { decisions } = result;
    for (let i = 0; i < items.length; i += 1) {
      const item = items[i] as { key: string; cost: number };
      this.publish(item.key, item.cost, decisions[i] as LimitDecision, started);
    }
    return result;
  }

  /** A refusal admitted in shadow mode: counted, and told to the `shadowRejected` listeners (if any: it is on the call's path). */
  #shadowed(key: string, cost: number, decision: ShadowedDecision): void {
    this.shadowRejected += 1;
    if (this.limiter.listenerCount('shadowRejected') > 0) this.limiter.emit('shadowRejected', { key, cost, decision });
  }

  /** The counters and the state of the parts, for `ResilientLimiter.stats()`. */
  snapshot(
    parts: Pick<Parts, 'tier' | 'gate' | 'coalescer' | 'local' | 'recovery'>,
    settings: Settings,
    counter: { readonly unrecovered: number; readonly leaseLeftMs: number; readonly beats: { readonly leaseMs: number } } | undefined,
    notReadyForMs: number,
  ): LimiterStats {
    const { tier, recovery } = parts;
    return {
      state: tier.state,
      mode: settings.mode,
      enabled: settings.enabled,
      shadow: settings.shadow,
      limit: settings.limit,
      windowMs: settings.windowMs,
      localLimit: settings.shareOf(settings.limit),
      instances: settings.instances,
      unrecovered: counter?.unrecovered ?? 0,
      ...(counter === undefined ? {} : { leaseLeftMs: counter.leaseLeftMs, leaseMs: counter.beats.leaseMs }),
      timeoutMs: tier.timeoutMs,
      decisions: this.decisions,
      allowed: this.allowed,
      shadowRejected: this.shadowRejected,
      bySource: { ...this.bySource },
      byReason: { ...this.byReason },
      inFlight: tier.ledger.outstandingDecisions + parts.coalescer.size,
      redisLatencyMs: tier.ledger.latencyMs,
      slowCallMs: parts.gate.slowCallMs(),
      opened: this.opened,
      redisReady: tier.ready,
      notReadyForMs,
      reconcile: { pending: recovery.journal.pending, ...recovery.totals, dropped: recovery.journal.dropped },
      refunds: { pending: recovery.refunds.size, written: recovery.refunds.written, dropped: recovery.refunds.dropped },
    };
  }

  /** Decisions made, all sources together. */
  get decisions(): number {
    return Object.values(this.bySource).reduce((a, b) => a + b, 0);
  }
}
