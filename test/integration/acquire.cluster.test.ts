import { randomUUID } from 'node:crypto';
import type { Cluster } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { ResilientLimiter } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';

// acquire() on a Redis Cluster: its attempts are limit() calls, so keys on several masters wait and
// are admitted each by its own master's window.

const cluster = useCluster({ clients: 1 });
let redis: Cluster;
beforeAll(() => {
  redis = cluster.redis;
});

describe('acquire() on a Cluster', () => {
  it("waits for the window of keys on every master, each key's waiters in order", async () => {
    const prefix = `acq:${randomUUID()}:`;
    const limiter = new ResilientLimiter({
      redis,
      prefix,
      limit: 2,
      windowMs: 300,
      local: { instances: 1 },
      breaker: { timeoutMs: 1_000 },
    });
    try {
      const keys = cluster.keysOnEveryMaster(1, (k) => redisKey(prefix, k));
      expect(keys.length).toBeGreaterThanOrEqual(3);
      const start = performance.now();
      const order = new Map<string, number[]>(keys.map((k) => [k, []]));
      const results = await Promise.all(
        keys.flatMap((key) =>
          [0, 1, 2].map(async (i) => {
            const d = await limiter.acquire(key, { maxWaitMs: 5_000 });
            order.get(key)!.push(i);
            return { d, i, at: performance.now() - start };
          }),
        ),
      );
      expect(results.every((r) => r.d.allowed && r.d.source === 'redis')).toBe(true);
      for (const key of keys) expect(order.get(key)).toEqual([0, 1, 2]);
      for (const r of results.filter((x) => x.i === 2)) expect(r.at).toBeGreaterThanOrEqual(250);
    } finally {
      await limiter.close();
    }
  });
});
