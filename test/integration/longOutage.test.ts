/**
 * Both halves of the promise through a long total outage, with the defaults: a service at limit 100
 * per 1 s, offered 200 calls a second, Redis killed for 80 s. The limiter's clock is injected (it
 * also stands for Redis's TIME, which this test never reads after the kill): each simulated second is
 * 200 calls at one instant, then the clock moves on a second. Before, the default lease (60 s) ended
 * during the outage and every instance fell silently to a tenth: 100 admitted a second until 60 s,
 * then 10. Now the lease lasts 10 minutes, and a drop, when it comes, is announced once.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CapacityChange, closeRedisClient, createRedisClient, ResilientLimiter } from '../../src/index.js';
import { type RedisChild, useRedis } from '../support/redis.js';

let server: RedisChild;

beforeAll(async () => {
  const handle = await useRedis();
  if (handle.kind !== 'child') throw new Error('this test kills its Redis: it needs a redis-server child, not REDIS_URL');
  server = handle as RedisChild;
});
afterAll(async () => {
  await server?.close();
});

/** The admitted calls of `calls` calls of one key at the clock's instant. */
async function burst(l: ResilientLimiter, calls: number): Promise<number> {
  const ds = await Promise.all(Array.from({ length: calls }, () => l.limit('route')));
  return ds.filter((d) => d.allowed).length;
}

describe('an 80 s total outage with the defaults', () => {
  it('keeps every second at the limit, and announces a drop once, when the lease ends after 10 minutes', async () => {
    let now = Date.UTC(2026, 0, 1);
    const redis = createRedisClient(server.url);
    const l = new ResilientLimiter({ redis, limit: 100, windowMs: 1000, prefix: `outage:${randomUUID()}:`, clock: () => now });
    const changes: CapacityChange[] = [];
    l.on('capacity', (change) => changes.push(change));
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'RESILIMIT_REDUCED_CAPACITY') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      // A heartbeat answered: this instance holds a lease and a claim (the whole limit: it is alone).
      for (let i = 0; (l.stats().leaseLeftMs ?? 0) === 0; i++) {
        if (i > 250) throw new Error('no heartbeat answered in 5 s');
        await sleep(20);
      }
      const perSecond: number[] = [];
      for (let s = 0; s < 3; s++, now += 1000) perSecond.push(await burst(l, 200));
      await server.kill();
      for (let s = 0; s < 80; s++, now += 1000) perSecond.push(await burst(l, 200));
      const before = perSecond.slice(0, 3);
      const outage = perSecond.slice(3);
      console.log(`admitted a second before the kill ${before.join(' ')}; during the 80 s outage ${outage.join(' ')}`);
      expect(before).toEqual([100, 100, 100]);
      // The first second after the kill keeps the ghosts of the calls that left meanwhile (a quarter of
      // the window at most: `LocalWindow.lost`); every later one is at the limit.
      expect(outage[0]).toBeGreaterThanOrEqual(75);
      expect(outage.slice(1)).toEqual(Array(79).fill(100));
      expect(changes).toEqual([]);

      // Past the lease (10 minutes from the last beat Redis answered): a tenth, said once.
      now += 600_000;
      const after = [];
      for (let s = 0; s < 3; s++, now += 1000) after.push(await burst(l, 200));
      expect(after).toEqual([10, 10, 10]);
      expect(changes).toEqual([
        { reason: 'lease-ended', from: 100, to: 10, windowMs: 1000, until: 'until a heartbeat reaches Redis again' },
      ]);
      await sleep(0); // warnings are emitted on the next tick
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain('answers on 10 calls a 1000 ms window on this instance, down from 100');
      now -= 1000; // the last burst's instant: its window is full
      const d = await l.limit('route');
      expect(d).toMatchObject({ allowed: false, source: 'local', reason: 'lease-ended', reducedCapacity: true });
    } finally {
      process.off('warning', onWarning);
      await l.close();
      await closeRedisClient(redis);
    }
  });
});
