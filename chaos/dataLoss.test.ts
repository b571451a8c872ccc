/**
 * Redis losing data without a reconnect:
 * - `FLUSHALL` mid-traffic, three times, under two service processes sharing one limit (each its own
 *   process, `chaos/bound/worker.ts`): before, 39 admitted in a window of 20 in one run of five;
 * - `maxmemory 4mb` with `volatile-lru`, a limit of 1 a minute and 20,000 users each calling twice:
 *   before, about 4,000 users were admitted a second time within the minute, and nothing warned.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter } from '../src/index.ts';
import { startRedisServer, waitReady, type RedisChild } from '../test/support/redis.ts';
import { startFleet, summary } from './bound/fleet.ts';
import type { Setup } from './bound/worker.ts';

let server: RedisChild;
let admin: Redis;

beforeAll(async () => {
  server = await startRedisServer();
  admin = server.client();
  await waitReady(admin);
});

afterAll(async () => {
  await server?.close();
});

describe('FLUSHALL mid-traffic', () => {
  it('two processes, limit 20 a second, flushed three times: within 1.1 × the limit in every window', async () => {
    const limit = 20;
    const windowMs = 1000;
    const setup: Setup = {
      port: server.port,
      prefix: `flush:${randomUUID()}:`,
      limit,
      windowMs,
      mode: 'local',
      perSecond: 100,
      keys: 2,
      instances: 2,
    };
    const fleet = await startFleet([setup, setup]);
    try {
      const at = fleet.go();
      for (const ms of [2000, 3500, 5000]) {
        await at(ms);
        await admin.flushall();
      }
      await at(7000);
      const r = await fleet.stop();
      const { all } = summary('FLUSHALL ×3', r, windowMs, limit);
      expect(r.errors).toEqual([]);
      expect(all.maxExcess).toBeLessThanOrEqual(Math.floor(limit * 0.1));
    } finally {
      fleet.kill();
    }
  }, 60_000);
});

describe('eviction under maxmemory', () => {
  it('maxmemory 4mb, volatile-lru, limit 1 a minute, 20,000 users calling twice: warned, and no user admitted twice', async () => {
    const users = 20_000;
    await admin.config('SET', 'maxmemory', '4mb', 'maxmemory-policy', 'volatile-lru');
    const codes: string[] = [];
    const onWarning = (w: Error & { code?: string }): void => void (w.code !== undefined && codes.push(w.code));
    process.on('warning', onWarning);
    const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
    await waitReady(redis);
    // The warm window holds every user (local.maxKeys): a key Redis evicted is answered by it.
    // heartbeatMs paces the data watch: it reads the server's eviction settings a beat after the client is ready, then every beat.
    const limiter = new ResilientLimiter({
      redis,
      prefix: `evict:${randomUUID()}:`,
      limit: 1,
      windowMs: 60_000,
      heartbeatMs: 100,
      local: { instances: 1, maxKeys: 50_000 },
      breaker: { timeoutMs: 2_000 },
    });
    const lost: number[] = [];
    limiter.on('dataLost', (loss) => void lost.push(loss.evictedKeys ?? 0));
    try {
      await new Promise((resolve) => setTimeout(resolve, 1000)); // the watch's first read (100 ms), with 900 ms for a loaded machine
      const round = async (): Promise<number> => {
        let admitted = 0;
        for (let i = 0; i < users; i += 500) {
          const ds = await Promise.all(Array.from({ length: 500 }, (_, j) => limiter.limit(`user:${i + j}`)));
          admitted += ds.filter((d) => d.allowed).length;
        }
        return admitted;
      };
      const first = await round();
      const evicted = Number(/^evicted_keys:(\d+)/m.exec(await admin.info('stats'))?.[1]);
      const second = await round();
      await new Promise((resolve) => setTimeout(resolve, 1000)); // a watch read (every beat, 100 ms) and the warnings' tick
      console.log(
        `eviction: first round admitted ${first} of ${users}, Redis evicted ${evicted} keys, second round admitted ${second}; dataLost events ${lost.length}; warnings ${codes.join(', ')}`,
      );
      expect(first).toBe(users);
      expect(evicted).toBeGreaterThan(0);
      expect(second).toBe(0);
      expect(codes).toContain('RESILIMIT_EVICTION_POLICY');
      expect(codes).toContain('RESILIMIT_KEYS_EVICTED');
      expect(lost.length).toBeGreaterThan(0);
    } finally {
      process.off('warning', onWarning);
      await limiter.close();
      redis.disconnect();
      await admin.config('SET', 'maxmemory', '0', 'maxmemory-policy', 'noeviction');
    }
  }, 120_000);
});
