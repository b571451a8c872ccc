/**
 * iovalkey (ioredis's fork for Valkey) as the limiter's client, typed without a cast: decisions by
 * Redis, a frozen server answered within the deadline by the fallback, recovery, refund, shutdown.
 * A real redis-server child process (Valkey speaks the same protocol; no Valkey server here).
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import { Redis as Valkey } from 'iovalkey';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeRedisClient, ResilientLimiter, SAFE_CLIENT_OPTIONS, waitForRedis } from '../../src/index.js';
import { startRedisServer, type RedisChild } from '../support/redis.js';
import { whileFrozen } from '../support/wait.js';

let server: RedisChild;

beforeAll(async () => {
  server = await startRedisServer();
});

afterAll(async () => {
  await server?.stop();
});

describe('an iovalkey client', () => {
  it('is taken as the redis option: Redis decides, a freeze is answered locally within the deadline, then Redis again', async () => {
    const redis = new Valkey({ host: server.host, port: server.port, ...SAFE_CLIENT_OPTIONS });
    expect(await waitForRedis(redis)).toBe(true);
    const limiter = new ResilientLimiter({
      redis,
      limit: 3,
      windowMs: 60_000,
      prefix: `t:${randomUUID()}:`,
      local: { instances: 1 },
      breaker: { timeoutMs: 100, resetTimeoutMs: 200 },
    });
    try {
      const first = await Promise.all(Array.from({ length: 4 }, () => limiter.limit('k')));
      expect(first.map((d) => [d.allowed, d.source])).toEqual([
        [true, 'redis'],
        [true, 'redis'],
        [true, 'redis'],
        [false, 'redis'],
      ]);
      const admitted = first[0];
      if (admitted?.allowed !== true || admitted.shadowRejected) throw new Error('the first call was admitted');
      expect(await limiter.refund('k', admitted.id)).toEqual({ refunded: true, permits: 1, pending: false });
      const frozen = await whileFrozen(server, () => limiter.limit('other'));
      expect(frozen.result.source).toBe('local');
      // The deadline (100 ms) plus a loaded machine's timer slack: the call never waits on Redis past it.
      expect(frozen.ms).toBeLessThan(100 + 400);
      const back = performance.now();
      while ((await limiter.limit('again')).source !== 'redis') {
        if (performance.now() - back > 10_000) throw new Error('Redis did not decide again within 10 s of the thaw');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      await limiter.close();
      await closeRedisClient(redis);
    }
    // QUIT was answered: the socket ends right after (2 s: a loaded machine's slack, far above it).
    if (redis.status !== 'end') await Promise.race([once(redis, 'end'), sleep(2_000)]);
    expect(redis.status).toBe('end');
  });
});
