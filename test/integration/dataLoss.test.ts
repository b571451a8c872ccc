/**
 * Redis losing the limiter's data without a reconnect: a `FLUSHALL`, and eviction
 * under `maxmemory`. The run id does not change, so the re-seed that follows a restart never came:
 * a flushed window admitted a full limit again on top of the calls it lost. Now a decision that finds
 * Redis holding fewer of this instance's calls than its warm window is answered locally, the heartbeat
 * set's disappearance is the canary that re-seeds every window, and an eviction policy that can evict
 * the limiter's keys is warned about at start-up and again when keys are evicted.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { redisKey } from '../../src/redis/redisKey.js';
import { run, useLimiters } from '../support/limiters.js';

// A deadline a loaded machine does not miss: these tests are about what Redis holds.
const redis = useLimiters({ limit: 10, windowMs: 60_000, heartbeatMs: 100, breaker: { timeoutMs: 2_000 } });
const limiter = redis.limiter;
afterEach(async () => {
  await redis.admin.config('SET', 'maxmemory', '0', 'maxmemory-policy', 'noeviction');
});

/** Collects the process warnings of `code` until `stop()`. */
function warnings(code: string): { list: Error[]; stop(): void } {
  const list: Error[] = [];
  const on = (w: Error & { code?: string }): void => void (w.code === code && list.push(w));
  process.on('warning', on);
  return { list, stop: () => void process.off('warning', on) };
}

describe('FLUSHALL without a reconnect', () => {
  it('answers locally while Redis holds fewer of its calls, then re-seeds every window: no fresh limit on top of the lost calls', async () => {
    const prefix = `loss:${randomUUID()}:`;
    const l = await limiter({ prefix });
    expect((await run(l, 'k', 10)).filter((d) => d.allowed && d.source === 'redis')).toHaveLength(10);
    expect((await run(l, 'other', 4)).filter((d) => d.allowed)).toHaveLength(4);
    const lost = once(l, 'dataLost');
    await redis.admin.flushall();
    // Before: Redis's window was empty and admitted 10 more (20 in a window of 10).
    const after = await run(l, 'k', 10);
    expect(after.filter((d) => d.allowed)).toEqual([]);
    expect(after[0]).toMatchObject({ source: 'local', reason: 'reconciling' });
    // The heartbeat that follows finds its set gone: every warm window is written back.
    expect(await lost).toEqual([{ reason: 'flushed' }]);
    await l.reconcile();
    expect(await redis.admin.zcard(redisKey(prefix, 'k'))).toBe(10);
    expect(await redis.admin.zcard(redisKey(prefix, 'other'))).toBe(4);
    expect(await l.limit('k')).toMatchObject({ allowed: false, source: 'redis' });
    expect(await l.limit('other')).toMatchObject({ allowed: true, source: 'redis', remaining: 5 });
  });
});

describe('eviction', () => {
  it("warns once at start-up when the server can evict the limiter's keys, and not under noeviction", async () => {
    const warned = warnings('RESILIMIT_EVICTION_POLICY');
    try {
      await limiter();
      await sleep(200); // the read is asynchronous: an INFO round trip, 200 ms for a loaded machine
      expect(warned.list).toEqual([]);
      await redis.admin.config('SET', 'maxmemory', '1gb', 'maxmemory-policy', 'volatile-lru');
      await limiter();
      for (let i = 0; warned.list.length === 0 && i < 100; i++) await sleep(20);
      expect(warned.list).toHaveLength(1);
      expect(warned.list[0]?.message).toMatch(/maxmemory-policy volatile-lru.*noeviction/);
    } finally {
      warned.stop();
    }
  });

  it('tells of keys evicted (event and warning), and a key whose calls were evicted is answered locally', async () => {
    const evictedWarning = warnings('RESILIMIT_KEYS_EVICTED');
    try {
      const used = Number(/^used_memory:(\d+)/m.exec(await redis.admin.info('memory'))?.[1]);
      await redis.admin.config('SET', 'maxmemory', String(used + 2 * 2 ** 20), 'maxmemory-policy', 'allkeys-random');
      const l = await limiter({ limit: 1 });
      await run(l, 'user:1', 1);
      // The first to tell may be the heartbeat set's disappearance ('flushed': allkeys-random evicts it too).
      const lost = new Promise<{ reason: string; evictedKeys?: number }[]>((resolve) => {
        const on = (loss: { reason: string; evictedKeys?: number }): void => {
          if (loss.reason !== 'evicted') return;
          l.off('dataLost', on);
          resolve([loss]);
        };
        l.on('dataLost', on);
      });
      // Other keys through a 2 MiB margin, 64 KiB at a time, until the watch (a read every beat) has seen
      // Redis evict some: it reads its baseline a beat after ready, so evictions before that go unseen.
      const filler = await redis.client();
      let seen = false;
      void lost.then(() => (seen = true));
      for (let i = 0; !seen; i++) {
        if (i > 500) throw new Error('no eviction seen after 500 writes of 64 KiB');
        await filler.set(`filler:${i}`, 'x'.repeat(64 * 1024)).catch(() => undefined);
        if (i >= 48) await sleep(20);
      }
      const [loss] = (await lost) as [{ reason: string; evictedKeys: number }];
      expect(loss.reason).toBe('evicted');
      expect(loss.evictedKeys).toBeGreaterThan(0);
      await new Promise((resolve) => setImmediate(resolve)); // process warnings are emitted on the next tick
      expect(evictedWarning.list).toHaveLength(1);
      // Whether or not Redis still has it, user:1 is not admitted a second time within its window.
      expect(await l.limit('user:1')).toMatchObject({ allowed: false });
    } finally {
      evictedWarning.stop();
    }
  });
});
