/**
 * The repository's own configuration for the chaos suite, run through the public harness
 * (`resilimit/chaos`): a limit of 20 per 1 s window, a 50 ms deadline with a short open period, from
 * the built package. `CHAOS_OPTIONS` (JSON, merged over these) and `CHAOS_KEYS` / `CHAOS_RATE` let a
 * test vary it; each instance's process inherits them from the test.
 */
import { createRedisClient, ResilientLimiter } from '../../dist/index.js';

export default {
  // Getters: a process imports this module once, and a test varies the environment between runs.
  get keys() {
    return Number(process.env.CHAOS_KEYS ?? 10);
  },
  get rate() {
    return Number(process.env.CHAOS_RATE ?? 400);
  },
  createLimiter,
};

function createLimiter({ host, port }) {
  const extra = JSON.parse(process.env.CHAOS_OPTIONS ?? '{}');
  const redis = createRedisClient({ host, port });
  const limiter = new ResilientLimiter({
    redis,
    prefix: 'chaos:',
    limit: 20,
    windowMs: 1000,
    heartbeatMs: 100,
    ...extra,
    breaker: { timeoutMs: 50, resetTimeoutMs: 200, maxResetTimeoutMs: 800, volumeThreshold: 5, ...extra.breaker },
  });
  return { limiter, close: () => redis.disconnect() };
}
