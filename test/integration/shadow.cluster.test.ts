import { randomUUID } from 'node:crypto';
import calculateSlot from 'cluster-key-slot';
import type { Cluster } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { ResilientLimiter } from '../../src/index.js';
import { allKey } from '../../src/redis/allWindows.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';

// Shadow mode on a Redis Cluster: each master's refusals are admitted, shadowRejected, and no master's
// window takes the call; a limitAll() across slots gives back what the earlier slots took, as it does
// when it enforces.

const cluster = useCluster({ clients: 1 });
let redis: Cluster;
beforeAll(() => {
  redis = cluster.redis;
});

/** The calls a window holds (one member per admitted call, scored with its time). */
function calls(key: string): Promise<number> {
  return redis.zcount(key, 0, '+inf');
}

describe('shadow mode on a Cluster', () => {
  it("admits each master's refusals, shadowRejected, taking no permit of any window; limitAll() across slots too", async () => {
    const prefix = `shadowc:${randomUUID()}:`;
    const windowMs = 60_000;
    const l = new ResilientLimiter({
      redis,
      prefix,
      limit: 2,
      windowMs,
      shadow: true,
      local: { instances: 1 },
      breaker: { timeoutMs: 1_000 },
    });
    try {
      const keys = cluster.keysOnEveryMaster(1, (k) => redisKey(prefix, k));
      expect(new Set(keys.map((k) => cluster.nodeOf(redisKey(prefix, k)))).size).toBe(cluster.nodes.length);
      for (const key of keys) {
        const decisions = [await l.limit(key), await l.limit(key), await l.limit(key)];
        expect(decisions.map((d) => [d.allowed, d.source, d.shadowRejected])).toEqual([
          [true, 'redis', undefined],
          [true, 'redis', undefined],
          [true, 'redis', true],
        ]);
        expect(decisions[2]).toMatchObject({ remaining: 0, reason: 'decided', id: undefined });
        expect(await calls(redisKey(prefix, key))).toBe(2);
      }
      expect(l.stats()).toMatchObject({ decisions: 3 * keys.length, allowed: 3 * keys.length, shadowRejected: keys.length });

      // limitAll() over keys on every master, the last slot full: the earlier slots' permits are given
      // back, the answer is admitted, shadowed, and every window holds what it held.
      const bySlot = [...keys].sort((x, y) => calculateSlot(allKey(prefix, x, windowMs)) - calculateSlot(allKey(prefix, y, windowMs)));
      const last = bySlot.at(-1) as string;
      expect(await l.limitAll([{ key: last, limit: 1, windowMs }])).toMatchObject({ allowed: true });
      const d = await l.limitAll(keys.map((key) => ({ key, limit: 1, windowMs })));
      expect(d).toMatchObject({ allowed: true, shadowRejected: true, source: 'redis', reason: 'decided' });
      expect(d.retryAfterMs).toBeGreaterThan(windowMs - 5_000);
      expect(d.decisions.map((x, i) => [keys[i], x.allowed, x.shadowRejected])).toEqual(
        keys.map((k) => [k, true, k === last ? true : undefined]),
      );
      for (const k of keys) expect(await calls(allKey(prefix, k, windowMs))).toBe(k === last ? 1 : 0);
    } finally {
      await l.close();
    }
  });
});
