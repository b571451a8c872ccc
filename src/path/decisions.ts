import type { RedisDecision } from '../redis/RedisWindow.js';
import type { Decision, DecisionReason, DecisionSource } from '../types.js';

/**
 * A decision of `ResilientLimiter`: it always says why it was made where it was. `id`: the call's id
 * when it was admitted (the caller's, or the one generated for it), what `refund()` takes; undefined
 * when it was refused or shadowed, and on `limitAll()`'s per-limit decisions.
 */
export type LimiterDecision = Decision & {
  reason: DecisionReason;
  id: string | undefined;
  /**
   * Present, and true, only in shadow mode (the `shadow` option, `setShadow(true)`) on a call the limit
   * would have refused: it was admitted all the same (`allowed: true`) but consumed no permit, no window
   * recorded it (so `id` is undefined), and `remaining`, `retryAfterMs`, `resetAtMs`, `source` and
   * `reason` are the refusal's: what enforcing the limit would have answered. Absent on every other decision.
   */
  shadowRejected?: true;
};

/** The answer of `limitAll()`: all admitted and consumed, or none. */
export type LimitAllDecision = {
  /**
   * True when every limit admitted the call and all were consumed; false when none was consumed. True
   * too, with `shadowRejected`, when a limit refused in shadow mode: then none was consumed.
   */
  allowed: boolean;
  /** 0 when every limit admitted the call; otherwise the longest wait among the limits that refused (the wait until all fit, other traffic aside). */
  retryAfterMs: number;
  /** Which tier decided (the tier of the last limit decided, when they differ). */
  source: DecisionSource;
  /** Why there. */
  reason: DecisionReason;
  /**
   * One decision per limit, in the order given: `allowed` tells whether that limit alone had room,
   * `remaining` counts after this call when it was admitted, before it otherwise.
   */
  decisions: LimiterDecision[];
  /**
   * Present, and true, only in shadow mode when a limit refused: the call was admitted all the same,
   * no limit was consumed, `retryAfterMs` is the refusal's, and each refusing limit's decision is
   * shadowed (see {@link LimiterDecision.shadowRejected}).
   */
  shadowRejected?: true;
};

/** Every reason, in the order the stats list them. */
export const REASONS: readonly DecisionReason[] = [
  'decided',
  'breaker-open',
  'timeout',
  'redis-error',
  'redis-reply-error',
  'not-ready',
  'saturated',
  'slow',
  'deny-cache',
  'reconciling',
  'disabled',
];

// The builders below are every place a limiter decision is made. Each returns an object literal with
// the same fields in the same order (one hidden class on the hot path), never a spread.

/** A decision of Redis's, as the limiter answers it. */
export function decided(allowed: boolean, limit: number, remaining: number, retryAfterMs: number, resetAtMs: number, id?: string): LimiterDecision {
  return { allowed, limit, remaining, retryAfterMs, resetAtMs, source: 'redis', reason: 'decided', id };
}

/** Redis's decision of a call of `limit()` (or `peek()`), as the limiter answers it; `id` when admitted. */
export function redisDecision(d: RedisDecision, id?: string): LimiterDecision {
  return decided(d.allowed, d.limit, d.remaining, d.retryAfterMs, d.resetAtMs, d.allowed ? id : undefined);
}

/** A local window's decision, as the limiter answers it with `reason`. This is the whole path while Redis is down. */
export function localDecision(d: Decision, reason: DecisionReason, id?: string): LimiterDecision {
  return {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    retryAfterMs: d.retryAfterMs,
    resetAtMs: d.resetAtMs,
    source: 'local',
    reason,
    id: d.allowed ? id : undefined,
  };
}

/**
 * A decision that consults no window: the kill switch (`'disabled'`), or the fixed answer of mode
 * `'fail-open'` / `'fail-closed'`. A refusal asks to retry after `retryAfterMs` (the breaker's open period).
 */
export function fixedDecision(
  allowed: boolean,
  source: DecisionSource,
  reason: DecisionReason,
  now: number,
  limit: number,
  retryAfterMs: number,
  id?: string,
): LimiterDecision {
  const wait = allowed ? 0 : retryAfterMs;
  return { allowed, limit, remaining: allowed ? limit : 0, retryAfterMs: wait, resetAtMs: Math.ceil(now + wait), source, reason, id: allowed ? id : undefined };
}

/** A refusal of the deny cache: what Redis said when it refused the key, until that wait has passed (`until` and `now` on one clock). */
export function denyCacheDecision(
  limit: number,
  denial: { until: number; remaining: number; resetAtMs: number },
  now: number,
): LimiterDecision {
  return {
    allowed: false,
    limit,
    remaining: denial.remaining,
    retryAfterMs: Math.ceil(denial.until - now), // whole ms, rounded up: the clocks read fractions
    resetAtMs: denial.resetAtMs,
    source: 'local',
    reason: 'deny-cache',
    id: undefined,
  };
}

/**
 * The refusal `refusal` admitted in shadow mode: `allowed: true`, `shadowRejected: true`, and the
 * refusal's other fields. A refusal recorded nothing in any window, so the call consumes no permit,
 * and its `id` is undefined. One field more than the other builders: a second hidden class, made
 * only in shadow mode, so that with shadow mode off every decision keeps the one it has.
 */
export function shadowed(refusal: LimiterDecision): LimiterDecision {
  return {
    allowed: true,
    limit: refusal.limit,
    remaining: refusal.remaining,
    retryAfterMs: refusal.retryAfterMs,
    resetAtMs: refusal.resetAtMs,
    source: refusal.source,
    reason: refusal.reason,
    id: undefined,
    shadowRejected: true,
  };
}

/** A refused `limitAll()` answer admitted in shadow mode, with its per-limit decisions as published (the refusing ones shadowed). */
export function shadowedAll(refusal: LimitAllDecision, decisions: LimiterDecision[]): LimitAllDecision {
  return { allowed: true, retryAfterMs: refusal.retryAfterMs, source: refusal.source, reason: refusal.reason, decisions, shadowRejected: true };
}

/** Puts the per-limit decisions of `limitAll()` together. */
export function combine(decisions: LimiterDecision[], source: DecisionSource, reason: DecisionReason): LimitAllDecision {
  const allowed = decisions.every((d) => d.allowed);
  return {
    allowed,
    retryAfterMs: allowed ? 0 : Math.max(...decisions.map((d) => d.retryAfterMs)),
    source,
    reason,
    decisions,
  };
}
