/**
 * A concurrency limit for the chaos suite, run through the public harness (`resilimit/chaos`): at
 * most 10 slots of a key held at once, a lease of 3 s, a 50 ms deadline with a short open period,
 * heartbeats of 200 ms, from the built package. Each instance runs `parallel` tasks holding a slot
 * 100–150 ms. `CHAOS_SLOTS` (JSON, merged over the limiter's options) and `CHAOS_PARALLEL` /
 * `CHAOS_KEYS` let a test vary it; `CHAOS_PREFIX_PER_INSTANCE=1` breaks it on purpose (each instance
 * its own prefix: the limit is no longer shared). Each instance's process inherits them from the test.
 */
import { ConcurrencyLimiter, createRedisClient } from '../../dist/index.js';

export default {
  // Getters: a process imports this module once, and a test varies the environment between runs.
  get keys() {
    return Number(process.env.CHAOS_KEYS ?? 2);
  },
  get parallel() {
    return Number(process.env.CHAOS_PARALLEL ?? 8);
  },
  holdMs: [100, 150],
  maxWaitMs: 200,
  createLimiter,
};

function createLimiter({ host, port, instance }) {
  const extra = JSON.parse(process.env.CHAOS_SLOTS ?? '{}');
  const redis = createRedisClient({ host, port });
  const prefix = process.env.CHAOS_PREFIX_PER_INSTANCE === '1' ? `slots-${instance}:` : 'slots:';
  const limiter = new ConcurrencyLimiter({
    redis,
    prefix,
    max: 10,
    ttlMs: 3000,
    heartbeatMs: 200,
    ...extra,
    breaker: { timeoutMs: 50, resetTimeoutMs: 200, maxResetTimeoutMs: 800, volumeThreshold: 5, ...extra.breaker },
  });
  return { limiter, close: () => redis.disconnect() };
}
