/**
 * limitAll() on a real three-master Redis Cluster: one script call when the keys share a slot;
 * slot by slot, giving back what earlier slots took, when a later slot refuses.
 */
import { randomUUID } from 'node:crypto';
import calculateSlot from 'cluster-key-slot';
import type { Cluster } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { ResilientLimiter } from '../../src/index.js';
import { allKey } from '../../src/redis/allWindows.js';
import { windowModel } from '../../src/redis/models/choose.js';
import { slicedFields } from '../support/slicedHash.js';
import { useCluster } from '../support/useCluster.js';

const cluster = useCluster({ clients: 1 });
let redis: Cluster;
beforeAll(() => {
  redis = cluster.redis;
});

/** Script calls (EVALSHA and EVAL) made on every master so far. */
async function scriptCalls(): Promise<number> {
  let total = 0;
  for (const node of redis.nodes('master')) {
    const stats = await node.info('commandstats');
    for (const name of ['evalsha', 'eval']) total += Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
  }
  return total;
}

async function used(key: string): Promise<number> {
  return redis.zcard(key);
}

describe('limitAll() on a Redis Cluster', () => {
  it('decides keys of one slot in one script call, and keys of several slots slot by slot', async () => {
    const prefix = `allc:${randomUUID()}:`;
    const l = new ResilientLimiter({ redis, limit: 100, windowMs: 60_000, prefix, local: { instances: 1 }, breaker: { timeoutMs: 1000 } });
    try {
      await l.limitAll([{ key: 'warm', limit: 5, windowMs: 1000 }]); // the script is loaded on that master
      // The same user key under two window lengths: one hash tag, one slot, one script call.
      const before = await scriptCalls();
      const same = await l.limitAll([
        { key: 'user:1', limit: 5, windowMs: 60_000 },
        { key: 'user:1', limit: 50, windowMs: 3_600_000 },
      ]);
      expect(same.allowed).toBe(true);
      const oneCall = (await scriptCalls()) - before;
      expect(oneCall).toBeLessThanOrEqual(2); // 1, or 2 when that master first gets the script (NOSCRIPT, then EVAL)
      expect(calculateSlot(allKey(prefix, 'user:1', 60_000))).toBe(calculateSlot(allKey(prefix, 'user:1', 3_600_000)));
      // Keys on different slots.
      const keys = ['a', 'b', 'c', 'd', 'e'].map((k) => `spread:${k}`);
      expect(new Set(keys.map((k) => calculateSlot(allKey(prefix, k, 60_000)))).size).toBe(5);
      const d = await l.limitAll(keys.map((key) => ({ key, limit: 2, windowMs: 60_000 })));
      expect(d.allowed).toBe(true);
      expect(d.decisions.every((x) => x.source === 'redis' && x.remaining === 1)).toBe(true);
      for (const k of keys) expect(await used(allKey(prefix, k, 60_000))).toBe(1);
    } finally {
      await l.close();
    }
  });

  it('gives back what the earlier slots took when a later slot refuses', async () => {
    const prefix = `allc:${randomUUID()}:`;
    const l = new ResilientLimiter({ redis, limit: 100, windowMs: 60_000, prefix, local: { instances: 1 }, breaker: { timeoutMs: 1000 } });
    try {
      // Slots are decided in slot order: fill the limit of the key with the highest slot.
      const keys = ['p', 'q', 'r', 's'].map((k) => `gb:${k}`);
      const bySlot = [...keys].sort((x, y) => calculateSlot(allKey(prefix, x, 60_000)) - calculateSlot(allKey(prefix, y, 60_000)));
      const last = bySlot.at(-1) as string;
      expect((await l.limitAll([{ key: last, limit: 1, windowMs: 60_000 }])).allowed).toBe(true);
      const d = await l.limitAll(keys.map((key) => ({ key, limit: 1, windowMs: 60_000 })));
      expect(d.allowed).toBe(false);
      expect(d.decisions.map((x, i) => [keys[i], x.allowed])).toEqual(keys.map((k) => [k, k !== last]));
      // Nothing stays taken on the other slots, and they report their room as before the call.
      for (const k of keys) expect(await used(allKey(prefix, k, 60_000))).toBe(k === last ? 1 : 0);
      expect(d.decisions.filter((_, i) => keys[i] !== last).every((x) => x.remaining === 1)).toBe(true);
      // So a call without the full key is admitted on all of them.
      const rest = keys.filter((k) => k !== last);
      expect((await l.limitAll(rest.map((key) => ({ key, limit: 1, windowMs: 60_000 })))).allowed).toBe(true);
    } finally {
      await l.close();
    }
  });

  it('with resolutionMs, gives back from the slice the earlier slots took in when a later slot refuses', async () => {
    const prefix = `allcs:${randomUUID()}:`;
    let t = 1_700_000_000_000;
    const l = new ResilientLimiter({
      redis,
      limit: 100,
      windowMs: 60_000,
      resolutionMs: 1_000,
      clock: () => t,
      prefix,
      local: { instances: 1 },
      breaker: { timeoutMs: 1000 },
    });
    const windowOf = (key: string) => windowModel({ windowMs: 60_000, resolutionMs: 1_000 }).allWindow(prefix, key, 60_000).redisKey;
    const used = async (key: string) => Number((await slicedFields(redis, windowOf(key)))['n'] ?? 0);
    try {
      const keys = ['p', 'q', 'r', 's'].map((k) => `gb:${k}`);
      const bySlot = [...keys].sort((x, y) => calculateSlot(windowOf(x)) - calculateSlot(windowOf(y)));
      expect(new Set(keys.map((k) => calculateSlot(windowOf(k)))).size).toBe(4);
      const last = bySlot.at(-1) as string;
      const all = (limit: number, of = keys) => l.limitAll(of.map((key) => ({ key, limit, windowMs: 60_000 })));
      // Every key holds one call from slices ago, and the last one is full.
      expect((await all(2)).allowed).toBe(true);
      t += 5_000;
      expect((await l.limitAll([{ key: last, limit: 2, windowMs: 60_000 }])).allowed).toBe(true);
      t += 3_000;
      const d = await all(2);
      expect(d.allowed).toBe(false);
      expect(d.decisions.map((x, i) => [keys[i], x.allowed])).toEqual(keys.map((k) => [k, k !== last]));
      // The other slots took in the current slice and gave it back: one call each, from the first slice.
      for (const k of keys) expect(await used(k)).toBe(k === last ? 2 : 1);
      expect(d.decisions.filter((_, i) => keys[i] !== last).every((x) => x.remaining === 1)).toBe(true);
      const rest = keys.filter((k) => k !== last);
      expect((await all(2, rest)).allowed).toBe(true);
      for (const k of rest) expect(await used(k)).toBe(2);
    } finally {
      await l.close();
    }
  });
});
