import { memberOf, type GeneratedId, type SentId } from '../base/call.js';
import type { RedisDecision } from '../redis/RedisWindow.js';
import type { Decision, DecisionReason, DecisionSource } from '../types.js';

/**
 * What every decision of `ResilientLimiter` holds besides `allowed`: it always says why it was made
 * where it was, and whether a refusal was one of reduced capacity (see {@link Decision.reducedCapacity}).
 */
type DecisionFields = Omit<Decision, 'allowed' | 'reducedCapacity'> & { reason: DecisionReason; reducedCapacity: boolean };

/** An admitted call of `limit()`: its cost was consumed, and `id` is what `refund()` takes (the caller's, or the one generated for it). */
export type AdmittedDecision = DecisionFields & { allowed: true; id: string; shadowRejected?: never };

/**
 * A call the limit would have refused, admitted all the same in shadow mode (the `shadow` option,
 * `setShadow(true)`): it consumed no permit, no window recorded it (so `id` is undefined), and
 * `remaining`, `retryAfterMs`, `resetAtMs`, `source` and `reason` are the refusal's: what enforcing
 * the limit would have answered.
 */
export type ShadowedDecision = DecisionFields & { allowed: true; id: undefined; shadowRejected: true };

/** A refused call: nothing was consumed; retry after `retryAfterMs`. */
export type RefusedDecision = DecisionFields & { allowed: false; id: undefined; shadowRejected?: never };

/**
 * A decision of `ResilientLimiter.limit()` (and `acquire()`): admitted with an `id`, refused, or (in
 * shadow mode only) a refusal admitted with `shadowRejected: true`. `if (d.allowed && !d.shadowRejected)`
 * leaves an {@link AdmittedDecision}, whose `id` is a string.
 */
export type LimiterDecision = AdmittedDecision | ShadowedDecision | RefusedDecision;

/**
 * A decision that admits or refuses without taking a call's permits under an id: `peek()`'s, and
 * each limit's within a `limitAll()` answer. `shadowRejected`: as on {@link ShadowedDecision}.
 */
export type LimitDecision = Decision & { reason: DecisionReason; reducedCapacity: boolean; shadowRejected?: true };

/** What the builders below make, before its type says which of the above it is. */
type Made = Decision & { reason: DecisionReason; reducedCapacity: boolean; id: string | undefined; shadowRejected?: true };

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
   * True when it refused, and every limit that refused did so for this instance's reduced capacity
   * (see {@link Decision.reducedCapacity}): none refused for want of permits under its whole limit.
   * In shadow mode, the refusal's.
   */
  reducedCapacity: boolean;
  /**
   * One decision per limit, in the order given: `allowed` tells whether that limit alone had room,
   * `remaining` counts after this call when it was admitted, before it otherwise.
   */
  decisions: LimitDecision[];
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
  'lease-ended',
  'no-lease',
  'no-share',
];

// The builders below are every place a limiter decision is made (and `Waiters`' repeated refusal,
// `refusalAt`, which keeps their order). Each returns an object literal with the same fields in the
// same order (one hidden class on the hot path), never a spread: allowed, limit, remaining,
// retryAfterMs, resetAtMs, source, reason, reducedCapacity, id (then shadowRejected, when shadowed). `reducedCapacity` is false but on refusals of the local tier and of
// `'fail-closed'` (`localDecision`, `failClosedDecision`, `noShareDecision`).

/**
 * Redis's decision of one limit of `limitAll()`, as the limiter answers it: the script's `reply` for
 * that limit, with `remaining` counted after the call (see `AllCall.settle`).
 */
export function decided(
  reply: { fits: boolean; retryAfterMs: number; resetAtMs: number },
  limit: number,
  remaining: number,
): LimitDecision {
  const d: Made = {
    allowed: reply.fits,
    limit,
    remaining,
    retryAfterMs: reply.retryAfterMs,
    resetAtMs: reply.resetAtMs,
    source: 'redis',
    reason: 'decided',
    reducedCapacity: false,
    id: undefined,
  };
  return d;
}

/** Redis's decision of a call of `limit()` (with its `id`, kept when admitted) or of `peek()`, as the limiter answers it. */
export function redisDecision(d: RedisDecision, id: string): LimiterDecision;
export function redisDecision(d: RedisDecision): LimitDecision;
export function redisDecision(d: RedisDecision, id?: string): Made {
  return {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    retryAfterMs: d.retryAfterMs,
    resetAtMs: d.resetAtMs,
    source: 'redis',
    reason: 'decided',
    reducedCapacity: false,
    id: d.allowed ? id : undefined,
  };
}

/** A local window's decision, as the limiter answers it with `reason` (with `id`: a call of `limit()`). This is the whole path while Redis is down. */
export function localDecision(d: Decision, reason: DecisionReason, id: SentId): LimiterDecision;
export function localDecision(d: Decision, reason: DecisionReason): LimitDecision;
export function localDecision(d: Decision, reason: DecisionReason, id?: SentId): Made {
  return {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    retryAfterMs: d.retryAfterMs,
    resetAtMs: d.resetAtMs,
    source: 'local',
    reason,
    reducedCapacity: d.reducedCapacity === true,
    id: d.allowed && id !== undefined ? memberOf(id) : undefined,
  };
}

// The decisions that consult no window, one builder each (no flag says which: each is on a path of
// its own, and none allocates more than its answer).

/** The kill switch's answer (`setEnabled(false)`): admitted, nothing consumed (with `id`: a call of `limit()`). */
export function disabledDecision(now: number, limit: number, id: SentId): LimiterDecision;
export function disabledDecision(now: number, limit: number): LimitDecision;
export function disabledDecision(now: number, limit: number, id?: SentId): Made {
  return admittedUncounted('disabled', now, limit, id);
}

/** The fixed answer of mode `'fail-open'` when Redis does not decide, for `reason`: admitted, nothing consumed. */
export function failOpenDecision(reason: DecisionReason, now: number, limit: number, id: SentId): LimiterDecision;
export function failOpenDecision(reason: DecisionReason, now: number, limit: number): LimitDecision;
export function failOpenDecision(reason: DecisionReason, now: number, limit: number, id?: SentId): Made {
  return admittedUncounted(reason, now, limit, id);
}

/**
 * An admission that consumed nothing: the whole limit left. Reason `'disabled'` is the kill switch's
 * (its source too); any other is mode `'fail-open'`'s.
 */
function admittedUncounted(reason: DecisionReason, now: number, limit: number, id: SentId | undefined): Made {
  return {
    allowed: true,
    limit,
    remaining: limit,
    retryAfterMs: 0,
    resetAtMs: Math.ceil(now),
    source: reason === 'disabled' ? 'disabled' : 'fail-open',
    reason,
    reducedCapacity: false,
    id: id === undefined ? undefined : memberOf(id),
  };
}

/**
 * The fixed answer of mode `'fail-closed'` when Redis does not decide, for `reason`: refused until
 * `retryAfterMs` (the breaker's open period) has passed. For want of any capacity without Redis:
 * `reducedCapacity`.
 */
export function failClosedDecision(reason: DecisionReason, now: number, limit: number, retryAfterMs: number): RefusedDecision {
  return {
    allowed: false,
    limit,
    remaining: 0,
    retryAfterMs,
    resetAtMs: Math.ceil(now + retryAfterMs),
    source: 'fail-closed',
    reason,
    reducedCapacity: true,
    id: undefined,
  };
}

/**
 * A refusal of mode `'local'` with no share to answer on (a lease ended, or a share that rounds to
 * 0: `reason`), until `retryAfterMs` (the breaker's open period) has passed; `reducedCapacity`.
 */
export function noShareDecision(reason: DecisionReason, now: number, limit: number, retryAfterMs: number): RefusedDecision {
  return {
    allowed: false,
    limit,
    remaining: 0,
    retryAfterMs,
    resetAtMs: Math.ceil(now + retryAfterMs),
    source: 'local',
    reason,
    reducedCapacity: true,
    id: undefined,
  };
}

/** A refusal of the deny cache: what Redis said when it refused the key, until that wait has passed (`until` and `now` on one clock). */
export function denyCacheDecision(
  limit: number,
  denial: { until: number; remaining: number; resetAtMs: number },
  now: number,
): RefusedDecision {
  return {
    allowed: false,
    limit,
    remaining: denial.remaining,
    retryAfterMs: Math.ceil(denial.until - now), // whole ms, rounded up: the clocks read fractions
    resetAtMs: denial.resetAtMs,
    source: 'local',
    reason: 'deny-cache',
    reducedCapacity: false,
    id: undefined,
  };
}

/**
 * The refusal `refusal` admitted in shadow mode: `allowed: true`, `shadowRejected: true`, and the
 * refusal's other fields. A refusal recorded nothing in any window, so the call consumes no permit,
 * and its `id` is undefined. One field more than the other builders: a second hidden class, made
 * only in shadow mode, so that with shadow mode off every decision keeps the one it has.
 */
export function shadowed(refusal: LimitDecision): ShadowedDecision {
  return {
    allowed: true,
    limit: refusal.limit,
    remaining: refusal.remaining,
    retryAfterMs: refusal.retryAfterMs,
    resetAtMs: refusal.resetAtMs,
    source: refusal.source,
    reason: refusal.reason,
    reducedCapacity: refusal.reducedCapacity,
    id: undefined,
    shadowRejected: true,
  };
}

/** A refused `limitAll()` answer admitted in shadow mode, with its per-limit decisions as published (the refusing ones shadowed). */
export function shadowedAll(refusal: LimitAllDecision, decisions: LimitDecision[]): LimitAllDecision {
  return {
    allowed: true,
    retryAfterMs: refusal.retryAfterMs,
    source: refusal.source,
    reason: refusal.reason,
    reducedCapacity: refusal.reducedCapacity,
    decisions,
    shadowRejected: true,
  };
}

/** Puts the per-limit decisions of `limitAll()` together. */
export function combine(decisions: LimitDecision[], source: DecisionSource, reason: DecisionReason): LimitAllDecision {
  const allowed = decisions.every((d) => d.allowed);
  return {
    allowed,
    retryAfterMs: allowed ? 0 : Math.max(...decisions.map((d) => d.retryAfterMs)),
    source,
    reason,
    reducedCapacity: !allowed && decisions.every((d) => d.allowed || d.reducedCapacity),
    decisions,
  };
}

/** A call of `limit()` admitted on a hot key's lease (permits Redis counted when it granted them), as the limiter answers it. */
export function leaseDecision(limit: number, remaining: number, resetAtMs: number, seq: GeneratedId): LimiterDecision {
  const d: Made = {
    allowed: true,
    limit,
    remaining,
    retryAfterMs: 0,
    resetAtMs,
    source: 'redis',
    reason: 'decided',
    reducedCapacity: false,
    id: memberOf(seq),
  };
  return d as LimiterDecision;
}
