/**
 * lua/reconcile.lua on a real Redis: the write-back of calls admitted locally.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { portOf } from '../../src/client/portOf.js';
import { loadScript } from '../../src/redis/scripts/script.js';
import { startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

const reconcile = loadScript('reconcile');
let server: RedisChild;
let redis: Redis;
let n = 0;

beforeAll(async () => {
  server = await startRedisServer();
  redis = server.client();
  await waitReady(redis);
});
afterAll(async () => {
  await server?.close();
});

/** Writes `[at, cost, id]` triples into a window of 1000 ms at `now` (the caller's clock). */
function write(key: string, now: number, ...calls: [number, number, string][]): Promise<unknown> {
  return portOf(redis).run(reconcile, [key], [1000, now, ...calls.flat()]);
}

describe('lua/reconcile.lua', () => {
  it('adds calls still in the window, skips expired ones, and counts a call already there once', async () => {
    const key = `r:${++n}`;
    expect(await write(key, 10_000, [9_500, 1, 'a'], [9_000, 1, 'old'], [9_600, 3, 'b'])).toEqual([2, 1, 0]);
    expect(await write(key, 10_000, [9_500, 1, 'a'])).toEqual([0, 0, 1]);
    expect(await redis.zrange(key, '0', '-1', 'WITHSCORES')).toEqual(['*', '-2', 'a', '9500', '3*b', '9600']);
  });

  it('keeps the later time of a call written twice: it leaves the window no earlier than the caller saw it admitted', async () => {
    // Redis admitted `late` at 9_500 but its reply came after the deadline: the fallback admitted it
    // at 9_550, and the caller saw that. Written back, it must stay until 10_550, not 10_500.
    const key = `r:${++n}`;
    await write(key, 10_000, [9_500, 1, 'late'], [9_400, 2, 'costly']);
    const ttlBefore = await redis.pttl(key);
    expect(await write(key, 10_000, [9_550, 1, 'late'], [9_450, 2, 'costly'])).toEqual([0, 0, 2]);
    expect(await redis.zscore(key, 'late')).toBe('9550');
    expect(await redis.zscore(key, '2*costly')).toBe('9450');
    expect(await redis.pttl(key)).toBeGreaterThan(ttlBefore + 40);
    // An earlier time changes nothing.
    expect(await write(key, 10_000, [9_300, 1, 'late'])).toEqual([0, 0, 1]);
    expect(await redis.zscore(key, 'late')).toBe('9550');
  });
});
