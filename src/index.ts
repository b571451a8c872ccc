export type { Decision, DecisionReason, DecisionSource, LimitOptions, RateWindow } from './types.js';
export type {
  AfterLease,
  BreakerOptions,
  LimitFunction,
  LocalTierOptions,
  LocalWindowOptions,
  Mode,
  RedisWindowOptions,
  ResilientLimiterOptions,
  WindowOptions,
} from './options.js';
export { MAX_ID_LENGTH, MAX_INT, MAX_KEY_LENGTH, MAX_PREFIX_LENGTH } from './options.js';
export { LocalWindow } from './LocalWindow.js';
export { RedisWindow, type RedisDecision } from './RedisWindow.js';
export {
  ResilientLimiter,
  type DecisionMessage,
  type LimiterDecision,
  type LimiterEvents,
  type LimiterStats,
  type RefundOptions,
  type RefundResult,
} from './ResilientLimiter.js';
export type { AcquireOptions } from './Waiters.js';
export type { BreakerState } from './breaker.js';
export type { ReconcileResult } from './Reconciler.js';
export { closeRedisClient, type CloseRedisClientOptions } from './closeRedisClient.js';
export { createRedisClient, SAFE_CLIENT_OPTIONS, type ClientOptions } from './redisClient.js';
export { ErrorCode, ResilimitError, isResilimitError } from './errors.js';
export { isRedisUnavailable } from './failures.js';
export type { LimitAllDecision, LimitAllItem } from './limitAll.js';
export { adaptiveLimit, type AdaptiveLimit, type AdaptiveLimitOptions, type LoadSignal } from './adaptive.js';
export { rateLimited, RateLimitedError, wrap, type Limiter, type WrapOptions } from './wrap.js';
