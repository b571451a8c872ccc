import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisWindow } from '../../src/index.js';
import { loadScript } from '../../src/redis/scripts/script.js';
import { startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

let server: RedisChild;
const { sha } = loadScript('sliding-window');

beforeAll(async () => {
  server = await startRedisServer();
});
afterAll(async () => {
  await server?.close();
});

describe('RedisWindow across a Redis restart', () => {
  it('loads its script again on a restarted server, which starts from empty windows', async () => {
    const redis = server.client({ maxRetriesPerRequest: 0 });
    await waitReady(redis);
    const w = new RedisWindow({ redis, prefix: `t:${randomUUID()}:`, limit: 2, windowMs: 60_000 });
    await w.limit('k');
    await w.limit('k');
    expect((await w.limit('k')).allowed).toBe(false);
    expect(await redis.script('EXISTS', sha)).toEqual([1]);
    const pidBefore = server.pid;

    await server.kill();
    await expect(w.limit('k')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_REDIS_UNAVAILABLE' });
    await server.restart();
    expect(server.pid).not.toBe(pidBefore);
    await waitReady(redis, 10_000);

    expect(await redis.script('EXISTS', sha)).toEqual([0]);
    expect(await w.limit('k')).toMatchObject({ allowed: true, remaining: 1, source: 'redis' });
    expect(await redis.script('EXISTS', sha)).toEqual([1]);
  });
});
