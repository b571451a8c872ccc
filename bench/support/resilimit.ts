/**
 * The library under test, loaded from `src/` (see `sourceHooks.ts` for why this is a dynamic
 * import). Bench files take values from here and types from `../src/index.ts` (`import type`).
 */
import './sourceHooks.ts';

const lib = await import('../../src/index.ts');

export const { ResilientLimiter, LocalWindow, RedisWindow, ConcurrencyLimiter, Budget, createRedisClient } = lib;
