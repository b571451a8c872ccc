import { randomUUID } from 'node:crypto';
import calculateSlot from 'cluster-key-slot';
import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisWindow, ResilientLimiter } from '../../src/index.js';
import { startRedisCluster, type RedisCluster } from '../support/cluster.js';

let cluster: RedisCluster;
let redis: Cluster;

beforeAll(async () => {
  cluster = await startRedisCluster();
  redis = cluster.client({ enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } });
  await new Promise<void>((resolve) => redis.once('ready', () => resolve()));
});
afterAll(async () => {
  await cluster?.close();
});

describe('on a Redis Cluster of three masters', () => {
  it('keeps an exact window per key, with keys spread over every master', async () => {
    const w = new RedisWindow({ redis, prefix: `t:${randomUUID()}:`, limit: 5, windowMs: 60_000 });
    const keys = Array.from({ length: 30 }, (_, i) => `user:${i}{x}`);
    const slots = new Set(keys.map((k) => calculateSlot(w.keyOf(k))));
    expect(slots.size).toBeGreaterThan(20);
    const decisions = await Promise.all(keys.flatMap((k) => Array.from({ length: 8 }, () => w.limit(k))));
    expect(decisions.filter((d) => d.allowed)).toHaveLength(30 * 5);
    for (const k of keys) expect((await w.peek(k)).remaining).toBe(0);
    const perNode = await Promise.all(
      cluster.nodes.map(async (n) => Number(/keys=(\d+)/.exec((await n.info('keyspace'))['db0'] ?? '')?.[1] ?? 0)),
    );
    expect(perNode.every((count) => count > 0)).toBe(true);
  });

  it('runs the resilient limiter, its reconciliation and its heartbeats', async () => {
    const l = new ResilientLimiter({ redis, prefix: `t:${randomUUID()}:`, limit: 4, windowMs: 60_000, heartbeatMs: 100 });
    try {
      const first = await Promise.all(Array.from({ length: 6 }, () => l.limit('k')));
      expect(first.filter((d) => d.allowed && d.source === 'redis')).toHaveLength(4);
      l.forceOpen();
      const local = await l.limit('other');
      expect(local).toMatchObject({ allowed: true, source: 'local' });
      l.forceClose();
      await l.reconcile();
      expect(l.stats().reconcile).toMatchObject({ written: 1, pending: 0 });
      expect(await l.limit('other')).toMatchObject({ source: 'redis', remaining: 2 });
      await new Promise((r) => setTimeout(r, 250));
      expect(l.stats().instances).toBe(1);
    } finally {
      await l.close();
    }
  });

  it('coalesces a turn of calls into one script call per hash slot', async () => {
    const l = new ResilientLimiter({
      redis,
      prefix: `t:${randomUUID()}:`,
      limit: 3,
      windowMs: 60_000,
      coalesce: true,
      local: { instances: 1 },
      breaker: { timeoutMs: 2000 },
    });
    try {
      const keys = Array.from({ length: 12 }, (_, i) => `key${i}`);
      const decisions = await Promise.all(keys.flatMap((k) => Array.from({ length: 5 }, () => l.limit(k))));
      expect(decisions.every((d) => d.source === 'redis')).toBe(true);
      expect(decisions.filter((d) => d.allowed)).toHaveLength(12 * 3);
    } finally {
      await l.close();
    }
  });
});
