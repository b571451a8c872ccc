export type { Decision, DecisionReason, DecisionSource, LimitOptions, RateWindow } from './types.js';
export type {
  AfterLease,
  BreakerOptions,
  HotKeyOptions,
  LimitFunction,
  LocalTierOptions,
  LocalWindowOptions,
  Mode,
  RedisWindowOptions,
  ResilientLimiterOptions,
  WindowOptions,
} from './options/options.js';
export { MAX_ID_LENGTH, MAX_INT, MAX_KEY_LENGTH, MAX_PREFIX_LENGTH } from './options/options.js';
export { LocalWindow } from './local/LocalWindow.js';
export { RedisWindow, type RedisDecision } from './redis/RedisWindow.js';
export {
  ResilientLimiter,
  type DecisionMessage,
  type LimiterDecision,
  type LimiterEvents,
  type LimiterStats,
  type RefundOptions,
  type RefundResult,
} from './limiter/ResilientLimiter.js';
export type { AcquireOptions } from './limiter/Waiters.js';
export { Budget, type Reservation, type ReserveOptions, type SettleResult } from './limiter/Budget.js';
export type { GroupItemReservation, GroupReservation, SettleAllResult } from './limiter/budgetGroups.js';
export type { Measured } from './limiter/settling.js';
export type { BreakerState } from './redis/Breaker.js';
export type { CapacityChange, CapacityReason } from './path/capacity.js';
export type { ReconcileResult } from './recovery/Journal.js';
export { closeRedisClient, type CloseRedisClientOptions } from './client/closeRedisClient.js';
export { createRedisClient, SAFE_CLIENT_OPTIONS, type ClientOptions } from './client/redisClient.js';
export { waitForRedis, type WaitForRedisOptions } from './client/waitForRedis.js';
export type { IoredisCompatible, RedisClient } from './client/clientType.js';
export { ErrorCode, ResilimitError, isResilimitError } from './base/errors.js';
export { isRedisUnavailable } from './redis/failures.js';
export type { LimitAllItem } from './redis/allWindows.js';
export type { AdmittedDecision, LimitAllDecision, LimitDecision, RefusedDecision, ShadowedDecision } from './path/decisions.js';
export { adaptiveLimit, type AdaptiveLimit, type AdaptiveLimitOptions, type LoadSignal } from './limiter/adaptive.js';
export { rateLimited, RateLimitedError, wrap, type Limiter, type WrapOptions } from './limiter/wrap.js';
export {
  ConcurrencyLimiter,
  SlotLostError,
  type ConcurrencyEvents,
  type ConcurrencyLimiterOptions,
  type ConcurrencyStats,
  type HeldSlot,
  type SlotOptions,
  type SlotSource,
} from './limiter/ConcurrencyLimiter.js';
