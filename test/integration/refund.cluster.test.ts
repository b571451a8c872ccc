import { randomUUID } from 'node:crypto';
import type { Cluster } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { ResilientLimiter } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';

// refund() on a Redis Cluster: the refund script touches one key (one slot), on each key's own master,
// also when written later, after the breaker was held open.

const cluster = useCluster({ clients: 2 });
let redis: Cluster;
let other: Cluster;
beforeAll(() => {
  [redis, other] = cluster.clients as [Cluster, Cluster];
});

describe('refund() on a Cluster', () => {
  it('gives back calls of keys on every master, by this instance and by another that never saw them', async () => {
    const prefix = `refund:${randomUUID()}:`;
    const options = { prefix, limit: 4, windowMs: 60_000, local: { instances: 1 }, breaker: { timeoutMs: 1_000, resetTimeoutMs: 50 } };
    const a = new ResilientLimiter({ redis, ...options });
    const b = new ResilientLimiter({ redis: other, ...options });
    try {
      const keys = cluster.keysOnEveryMaster(1, (k) => redisKey(prefix, k));
      expect(new Set(keys.map((k) => cluster.nodeOf(redisKey(prefix, k)))).size).toBe(3);
      for (const key of keys) {
        const own = await a.limit(key, { cost: 2 });
        const others = await a.limit(key, { cost: 2 });
        expect((await a.limit(key)).allowed).toBe(false);
        expect(await a.refund(key, own.id as string)).toEqual({ refunded: true, permits: 2, pending: false });
        expect(await b.refund(key, others.id as string, { cost: 2 })).toEqual({ refunded: true, permits: 2, pending: false });
        expect(await b.refund(key, others.id as string, { cost: 2 })).toEqual({ refunded: false, permits: 0, pending: false });
        // a's warm window still holds `others`, which Redis no longer does: a takes it for a loss and its
        // local window answers (conservatively: it still counts the call) until a refund of its own.
        expect(await a.limit(key, { cost: 4 })).toMatchObject({ allowed: false, source: 'local', reason: 'reconciling' });
        await a.refund(key, others.id as string);
        await a.reconcile(); // the refund of the call Redis admitted and a refused (written by a pass)
        expect(await a.limit(key, { cost: 4 })).toMatchObject({ allowed: true, source: 'redis', remaining: 0 });
      }

      // Held open: kept, then written on each key's master once the breaker closes.
      const heldKeys = cluster.keysOnEveryMaster(1, (k) => redisKey(prefix, k), { stem: 'held' });
      const writtenBefore = a.stats().refunds.written; // the refunds of the calls a refused above
      const held = await Promise.all(heldKeys.map((key) => a.limit(key)));
      a.forceOpen();
      for (const [i, key] of heldKeys.entries()) {
        expect(await a.refund(key, held[i]?.id as string)).toEqual({ refunded: true, permits: 1, pending: true });
      }
      for (const key of heldKeys) expect(await redis.exists(redisKey(prefix, key))).toBe(1);
      a.forceClose();
      await a.reconcile();
      expect(a.stats().refunds).toEqual({ pending: 0, written: writtenBefore + heldKeys.length, dropped: 0 });
      for (const key of heldKeys) expect(await redis.exists(redisKey(prefix, key))).toBe(0);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
