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

  it('resolves false after timeoutMs when nothing listens, says so in one warning, and leaves no listener of its own', async () => {
    const port = await freePort();
    const redis = createRedisClient({ host: '127.0.0.1', port });
    const before = { ready: redis.listenerCount('ready'), error: redis.listenerCount('error') };
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'RESILIMIT_WAIT_FOR_REDIS' && w.message.includes(`:${port}`)) warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      const started = performance.now();
      expect(await waitForRedis(redis, { timeoutMs: 300 })).toBe(false);
      expect(performance.now() - started).toBeGreaterThanOrEqual(299); // a timer fires late, never early
      expect({ ready: redis.listenerCount('ready'), error: redis.listenerCount('error') }).toEqual(before);
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
      expect(warnings).toEqual([
        expect.stringMatching(
          new RegExp(
            `^waitForRedis: the client \\(connecting to 127\\.0\\.0\\.1:${port}, status '(re)?connecting'; its last error: connect ECONNREFUSED 127\\.0\\.0\\.1:${port}\\) was not ready within 300 ms\\. Starting without Redis`,
          ),
        ),
      ]);
    } finally {
      process.off('warning', onWarning);
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
