/**
 * waitForRedis: the start-up that neither crashes nor hangs when Redis is down or refuses the
 * client, with real clients and a real Redis. Its bounds are the timeouts it is given (short here);
 * a loaded machine makes them late, never early.
 */
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeRedisClient, createRedisClient, waitForRedis } from '../../src/index.js';
import { freePort, startRedisServer, useRedis, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;

beforeAll(async () => {
  server = await useRedis();
});

afterAll(async () => {
  await server?.close();
});

describe('waitForRedis', () => {
  it('resolves true once the client is ready, at once when it already is', async () => {
    const redis = createRedisClient({ host: server.host, port: server.port });
    try {
      expect(await waitForRedis(redis)).toBe(true);
      expect(await waitForRedis(redis, { timeoutMs: 0 })).toBe(true);
    } finally {
      await closeRedisClient(redis);
    }
  });

  it('resolves false after timeoutMs when nothing listens, and leaves no listener of its own', async () => {
    const redis = createRedisClient({ host: '127.0.0.1', port: await freePort() });
    const before = { ready: redis.listenerCount('ready'), error: redis.listenerCount('error') };
    try {
      const started = performance.now();
      expect(await waitForRedis(redis, { timeoutMs: 300 })).toBe(false);
      expect(performance.now() - started).toBeGreaterThanOrEqual(299); // a timer fires late, never early
      expect({ ready: redis.listenerCount('ready'), error: redis.listenerCount('error') }).toEqual(before);
    } finally {
      await closeRedisClient(redis);
    }
  });

  it('resolves false, not a rejection, when Redis refuses the client (a password required)', async () => {
    // A server of its own (a shared REDIS_URL must not be locked), started open, then locked.
    const locked = await startRedisServer();
    const admin = locked.client();
    await admin.config('SET', 'requirepass', 'right');
    admin.disconnect();
    const redis = createRedisClient({ host: locked.host, port: locked.port });
    try {
      expect(await waitForRedis(redis, { timeoutMs: 500 })).toBe(false);
    } finally {
      await closeRedisClient(redis);
      await locked.stop();
    }
  });

  it('resolves false at once for a client already closed', async () => {
    const redis = createRedisClient({ host: server.host, port: server.port });
    await waitForRedis(redis);
    await closeRedisClient(redis);
    if (redis.status !== 'end') await new Promise((resolve) => redis.once('end', resolve));
    const started = performance.now();
    expect(await waitForRedis(redis, { timeoutMs: 5_000 })).toBe(false);
    expect(performance.now() - started).toBeLessThan(1_000); // not the 5 s timeout: it returns at once
  });

  it('names a bad option', async () => {
    const redis = createRedisClient({ host: server.host, port: server.port, lazyConnect: true });
    expect(() => waitForRedis(redis, { timeoutMs: -1 })).toThrow(
      expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION', message: expect.stringContaining('timeoutMs') }),
    );
    expect(() => waitForRedis({} as never)).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION' }));
    expect(() => waitForRedis(redis, { timeout: 1_000 } as never)).toThrow(
      expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION', message: expect.stringContaining('timeout') }),
    );
    redis.disconnect();
  });
});
