export type { Decision, DecisionSource, LimitOptions, RateWindow } from './types.js';
export type { LocalWindowOptions, RedisWindowOptions, WindowOptions } from './options.js';
export { MAX_ID_LENGTH, MAX_INT, MAX_KEY_LENGTH, MAX_PREFIX_LENGTH } from './options.js';
export { LocalWindow } from './LocalWindow.js';
export { RedisWindow, type RedisDecision } from './RedisWindow.js';
export { ErrorCode, ResilimitError, isResilimitError } from './errors.js';
export { isRedisUnavailable } from './failures.js';
