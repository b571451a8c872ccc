/** A `limit` function on ResilientLimiter, on a real Redis: every call is decided with its current value, in both tiers. */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adaptiveLimit, createRedisClient, ResilientLimiter } from '../../src/index.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;
let redis: Redis;

beforeAll(async () => {
  server = await useRedis();
  redis = createRedisClient(server.url);
  await waitReady(redis);
});
afterAll(async () => {
  await redis?.quit();
  await server?.close();
});

describe('ResilientLimiter with a limit function', () => {
  it('decides every call with the value the function returns at that call, in Redis and in the local tier', async () => {
    let current = 5;
    const limiter = new ResilientLimiter({
      redis,
      limit: () => current,
      windowMs: 60_000,
      prefix: `adaptive:${randomUUID()}:`,
      local: { instances: 2 },
    });
    try {
      const first = [];
      for (let i = 0; i < 3; i++) first.push(await limiter.limit('k'));
      expect(first.map((d) => [d.allowed, d.limit, d.remaining, d.source])).toEqual([
        [true, 5, 4, 'redis'],
        [true, 5, 3, 'redis'],
        [true, 5, 2, 'redis'],
      ]);
      current = 3; // the load went up: 3 already used, nothing left
      const lowered = await limiter.limit('k');
      expect([lowered.allowed, lowered.limit, lowered.remaining, lowered.source]).toEqual([false, 3, 0, 'redis']);
      current = 10; // back down: the deny cache must not hold the old answer
      const raised = await limiter.limit('k');
      expect([raised.allowed, raised.limit, raised.remaining, raised.source]).toEqual([true, 10, 6, 'redis']);
      // The local tier's share follows too: ceil(limit / instances).
      limiter.forceOpen();
      current = 4;
      const local = await limiter.limit('other');
      expect([local.allowed, local.limit, local.source]).toEqual([true, 2, 'local']);
      expect((await limiter.limit('other')).allowed).toBe(true);
      expect((await limiter.limit('other')).allowed).toBe(false);
    } finally {
      await limiter.close();
    }
  });

  it('takes adaptiveLimit() with an injected load signal', async () => {
    let load = 0;
    let t = 0;
    const limit = adaptiveLimit({ limit: 4, min: 1, signal: () => load, from: 0.5, to: 0.9, intervalMs: 10, now: () => t });
    const limiter = new ResilientLimiter({ redis, limit, windowMs: 60_000, prefix: `adaptive:${randomUUID()}:`, local: { instances: 1 } });
    try {
      expect((await limiter.limit('a')).limit).toBe(4);
      load = 1;
      t += 10;
      const d = await limiter.limit('a');
      expect([d.allowed, d.limit, d.source]).toEqual([false, 1, 'redis']);
      expect(limiter.stats().bySource.redis).toBe(2);
    } finally {
      await limiter.close();
      limit.close();
    }
  });

  it('rejects a call, with a clear error, when the function returns something that is not a limit', async () => {
    let value: unknown = 2;
    const limiter = new ResilientLimiter({
      redis,
      limit: () => value as number,
      windowMs: 1000,
      prefix: `adaptive:${randomUUID()}:`,
      local: { instances: 1 },
    });
    try {
      value = 0;
      await expect(limiter.limit('k')).rejects.toThrow(
        /Expected the `limit` function to return an integer from 1 to 2147483647, got `0` \(number\) for key "k"/,
      );
      value = 3;
      expect((await limiter.limit('k')).limit).toBe(3);
      // Not called at construction (it takes a key): at the first call.
      const throwing = new ResilientLimiter({
        redis,
        limit: () => {
          throw new Error('boom');
        },
        windowMs: 1000,
        prefix: `adaptive:${randomUUID()}:`,
      });
      try {
        await expect(throwing.limit('k')).rejects.toThrow('The `limit` function threw for key "k": Error: boom');
      } finally {
        await throwing.close();
      }
    } finally {
      await limiter.close();
    }
  });
});
