import { randomUUID } from 'node:crypto';
import type { Cluster } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { ResilientLimiter } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';

// Per-key limits and blocks on a Redis Cluster: keys on every master, calls coalesced per slot.

const cluster = useCluster({ clients: 1 });
let redis: Cluster;
beforeAll(() => {
  redis = cluster.redis;
});

describe('per-key limits and blocks on a Cluster', () => {
  it('decides each key against its own limit, and blocks keys on every master', async () => {
    const prefix = `pkc:${randomUUID()}:`;
    const c = { t: 1_800_000_000_000 };
    const keys = cluster.keysOnEveryMaster(2, (k) => redisKey(prefix, k));
    expect(keys.length).toBeGreaterThanOrEqual(6);
    const limitOf = (key: string): number => 1 + (keys.indexOf(key) % 4);
    // A generous deadline: on a loaded machine this must stay a test of Redis's answers, not of the fallback.
    const limiter = new ResilientLimiter({
      redis,
      prefix,
      limit: limitOf,
      windowMs: 1_000,
      blockMs: 2_000,
      clock: () => c.t,
      local: { instances: 1 },
      breaker: { timeoutMs: 2_000 },
    });
    try {
      // Every key at once, twice its limit: coalesced per slot, each decided against its own limit.
      const calls = keys.flatMap((key) => Array.from({ length: 2 * limitOf(key) }, () => key));
      const decisions = await Promise.all(calls.map((key) => limiter.limit(key)));
      for (const key of keys) {
        const own = decisions.filter((_, i) => calls[i] === key);
        expect({ key, admitted: own.filter((d) => d.allowed).length, reasons: new Set(own.map((d) => d.reason)) }).toEqual({
          key,
          admitted: limitOf(key),
          reasons: new Set(['decided']),
        });
        expect(own.every((d) => d.limit === limitOf(key))).toBe(true);
      }
      // Each refused key is blocked for blockMs: after the window, still refused until the block ends.
      c.t += 1_500;
      const [first, second] = keys as [string, string];
      expect(await limiter.limit(first)).toMatchObject({ allowed: false, retryAfterMs: 500 });
      c.t += 500;
      expect((await limiter.limit(first)).allowed).toBe(true);
      await limiter.block(second, 10_000);
      expect(await redis.zscore(redisKey(prefix, second), '*!')).toBe(String(-(c.t + 10_000)));
      expect(await limiter.limit(second)).toMatchObject({ allowed: false, retryAfterMs: 10_000 });
    } finally {
      await limiter.close();
    }
  });
});
