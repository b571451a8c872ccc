/**
 * This process's clock seconds away from Redis's (both tiers on their own clock, no injected
 * `clock`): Redis decides on its `TIME`, the local window on this process's clock, and every time
 * moved from one to the other (the warm standby's record of Redis's admissions, the write-back of
 * local ones, the re-seed after a data loss, the staleness deadline) must go through the offset
 * between them, with the right sign. On one host the two clocks agree, so these tests skew this
 * process's `Date.now` by ±3 s against a real Redis (the limiter reads it once, when it is made, and
 * counts on `performance.now()` from there): a missing or inverted offset makes a call leave a window
 * 3 s early (a window is 2 s here) or run after its deadline. A clock that steps later is played by
 * stepping `performance.now()`, which the limiter's clock follows: to the offset, this process's
 * clock stepping back is Redis's stepping ahead.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createRedisClient, ResilientLimiter, type LimiterDecision, type ResilientLimiterOptions } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { restartEmpty, startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

let server: RedisChild;
let admin: Redis;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];
const realNow = Date.now;
const WINDOW_MS = 2000;

beforeAll(async () => {
  server = await startRedisServer();
  admin = server.client();
  await waitReady(admin);
});
afterEach(async () => {
  Date.now = realNow;
  vi.restoreAllMocks();
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
});
afterAll(async () => {
  Date.now = realNow;
  await server?.close();
});

/** A limiter whose clock (`Date.now`, read at construction) runs `skew` ms away from Redis's. */
async function skewedLimiter(skew: number, options: Partial<ResilientLimiterOptions> & { limit: number }) {
  const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
  clients.push(redis);
  await waitReady(redis);
  Date.now = () => realNow() + skew;
  const prefix = `skew:${randomUUID()}:`;
  const l = new ResilientLimiter({
    redis,
    prefix,
    windowMs: WINDOW_MS,
    local: { instances: 1 },
    breaker: { timeoutMs: 50, resetTimeoutMs: 100 },
    ...options,
  });
  limiters.push(l);
  // A few round trips on other keys teach the limiter the offset.
  for (let i = 0; i < 5; i++) await l.limit(`warm-up-${i}`);
  return { l, redisKey: (key: string) => redisKey(prefix, key) };
}

/**
 * From now on, Redis's clock runs `stepMs` further ahead of the limiter's: the limiter's clock (and
 * every `perf` reading, which nothing here depends on) steps the other way.
 */
function stepRedisClock(stepMs: number): void {
  const real = performance.now.bind(performance);
  vi.spyOn(performance, 'now').mockImplementation(() => real() - stepMs);
}

async function run(l: ResilientLimiter, key: string, n: number): Promise<LimiterDecision[]> {
  const out: LimiterDecision[] = [];
  for (let i = 0; i < n; i++) out.push(await l.limit(key));
  return out;
}

const admitted = (decisions: readonly LimiterDecision[]): number => decisions.filter((d) => d.allowed).length;

describe.each([
  ['ahead of', 3000],
  ['behind', -3000],
])('this process 3 s %s Redis', (_, skewMs) => {
  it('the warm window holds what Redis admitted when the breaker opens', async () => {
    const { l } = await skewedLimiter(skewMs, { limit: 5 });
    expect(admitted(await run(l, 'k', 5))).toBe(5);
    l.forceOpen();
    expect(await l.limit('k')).toMatchObject({ source: 'local', allowed: false });
  });

  it('the warm windows of limitAll() hold what Redis admitted too', async () => {
    const { l } = await skewedLimiter(skewMs, { limit: 5 });
    const limits = [{ key: 'user', limit: 3, windowMs: WINDOW_MS }];
    for (let i = 0; i < 3; i++) expect(await l.limitAll(limits)).toMatchObject({ source: 'redis', allowed: true });
    l.forceOpen();
    expect(await l.limitAll(limits)).toMatchObject({ source: 'local', allowed: false });
  });

  it('writes locally admitted calls back at their time on Redis clock, so Redis counts them', async () => {
    const { l } = await skewedLimiter(skewMs, { limit: 5 });
    l.forceOpen();
    expect(admitted(await run(l, 'k', 3))).toBe(3);
    l.forceClose();
    await l.reconcile();
    expect(l.stats().reconcile).toMatchObject({ written: 3, expired: 0, pending: 0 });
    const after = await run(l, 'k', 5);
    expect(after.filter((d) => d.source === 'redis' && d.allowed)).toHaveLength(2);
  });

  it('re-seeds a restarted Redis with the calls it had, at their time on its clock', async () => {
    const { l } = await skewedLimiter(skewMs, { limit: 5 });
    expect(admitted(await run(l, 'k', 4))).toBe(4);
    await restartEmpty(server, clients.at(-1)!);
    await l.reconcile();
    expect(l.stats().reconcile.expired).toBe(0);
    expect(admitted(await run(l, 'k', 5))).toBe(1);
  });

  it('a call that reaches Redis after its deadline changes nothing there', async () => {
    // Without write-back, what Redis holds afterwards is only what the late call itself did.
    const { l, redisKey: keyOf } = await skewedLimiter(skewMs, { limit: 5, coalesce: false, reconcile: false });
    server.freeze();
    let decision: LimiterDecision;
    try {
      decision = await l.limit('k');
      await sleep(30); // Redis runs it well past its 50 ms deadline
    } finally {
      server.thaw();
    }
    expect(decision).toMatchObject({ source: 'local', reason: 'timeout', allowed: true });
    await sleep(50);
    expect(await admin.zcard(keyOf('k'))).toBe(0);
    // While a call in time does count.
    expect(await l.limit('k')).toMatchObject({ source: 'redis', allowed: true });
    expect(await admin.zcard(keyOf('k'))).toBe(1);
  });
});

describe('a clock that steps', () => {
  it.each([
    ['ahead of this process (a failover to a host whose clock is ahead, say)', 1000],
    ['back', -1000],
  ])('Redis decides again at once when its clock steps 1 s %s', async (_, stepMs) => {
    const { l } = await skewedLimiter(0, { limit: 1000 });
    stepRedisClock(stepMs);
    const after: LimiterDecision[] = [];
    for (let i = 0; i < 10; i++) {
      after.push(await l.limit('k'));
      await sleep(10);
    }
    // At most the first call finds the deadline it was given already past on Redis's clock (and
    // its key is answered locally until that call is written back).
    expect(after.slice(-8).map((d) => `${d.source}/${d.reason}`)).toEqual(Array(8).fill('redis/decided'));
    expect(l.state).toBe('closed');
  });
});

describe("Redis's clock stepping during an outage", () => {
  it.each([
    ['ahead (a failover to a host whose clock is ahead, say)', 10_000],
    ['back', -10_000],
  ])(
    'writes the calls admitted meanwhile at their time on its clock, read before the write-back, when it stepped 10 s %s',
    async (_, stepMs) => {
      const { l } = await skewedLimiter(0, { limit: 5 });
      l.forceOpen();
      stepRedisClock(stepMs);
      expect(admitted(await run(l, 'k', 3))).toBe(3);
      // No decision comes between the outage and the write-back: the offset learnt before it is stale.
      l.forceClose();
      await l.reconcile();
      // Ahead: with the stale offset, they were written 10 s in Redis's past, out of its 2 s window.
      expect(l.stats().reconcile).toMatchObject({ written: 3, expired: 0, pending: 0 });
      const during = await run(l, 'k', 5);
      expect(during.filter((d) => d.source === 'redis' && d.allowed)).toHaveLength(2);
      // Back: with the stale offset, they were written 10 s in its future, and kept for 12 s.
      await sleep(WINDOW_MS + 100);
      expect(admitted(await run(l, 'k', 5))).toBe(5);
    },
  );
});
