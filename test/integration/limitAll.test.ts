/**
 * limitAll(): several limits decided together, all or nothing, on a real Redis — against a reference
 * model, under concurrency, with costs, repeated keys and retried ids; and when Redis cannot answer.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter, type LimitAllItem, type ResilientLimiterOptions } from '../../src/index.js';
import { allKey } from '../../src/redis/allWindows.js';
import { expectGlobalLimitBinds } from '../support/limitAllBurst.js';
import { prng, ReferenceWindow } from '../support/model.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;
let redis: Redis;
let made: ResilientLimiter[] = [];
const prefixes = new Map<ResilientLimiter, string>();

beforeAll(async () => {
  server = await useRedis();
  redis = createRedisClient(server.url);
  await waitReady(redis);
});
afterEach(async () => {
  await Promise.all(made.map((l) => l.close()));
  made = [];
});
afterAll(async () => {
  await redis?.quit();
  await server?.close();
});

function limiter(options: Partial<ResilientLimiterOptions> = {}): ResilientLimiter {
  const prefix = options.prefix ?? `all:${randomUUID()}:`;
  const l = new ResilientLimiter({ redis, limit: 1000, windowMs: 60_000, local: { instances: 1 }, ...options, prefix });
  made.push(l);
  prefixes.set(l, prefix);
  return l;
}

/** Permits in use in one limitAll window, read from Redis. */
async function used(l: ResilientLimiter, key: string, windowMs: number): Promise<number> {
  const k = allKey(prefixes.get(l) as string, key, windowMs);
  const members = await redis.zrange(k, '0', '-1', 'WITHSCORES');
  let sum = 0;
  for (let i = 0; i < members.length; i += 2) {
    const member = members[i] as string;
    const score = Number(members[i + 1]);
    sum += member === '*' ? -score : 1;
  }
  return sum;
}

describe('limitAll()', () => {
  it('consumes every limit or none: a refusal by one limit leaves the others untouched', async () => {
    const l = limiter();
    const limits = (user: string): LimitAllItem[] => [
      { key: `user:${user}`, limit: 3, windowMs: 60_000 },
      { key: 'global', limit: 4, windowMs: 1_000 },
    ];
    const a = [];
    for (let i = 0; i < 3; i++) a.push(await l.limitAll(limits('a')));
    expect(a.map((d) => d.allowed)).toEqual([true, true, true]);
    expect(a[2]?.decisions.map((d) => [d.allowed, d.limit, d.remaining, d.source, d.reason])).toEqual([
      [true, 3, 0, 'redis', 'decided'],
      [true, 4, 1, 'redis', 'decided'],
    ]);
    // User a is at its limit: refused, and the global limit is not consumed.
    const refused = await l.limitAll(limits('a'));
    expect(refused.allowed).toBe(false);
    expect(refused.decisions.map((d) => [d.allowed, d.remaining])).toEqual([
      [false, 0],
      [true, 1],
    ]);
    expect(refused.retryAfterMs).toBe(refused.decisions[0]?.retryAfterMs);
    expect(refused.retryAfterMs).toBeGreaterThan(59_000);
    expect(await used(l, 'global', 1_000)).toBe(3);
    // User b: the global limit has one permit left, then refuses, and b's limit is not consumed.
    expect((await l.limitAll(limits('b'))).allowed).toBe(true);
    const globalFull = await l.limitAll(limits('b'));
    expect(globalFull.decisions.map((d) => d.allowed)).toEqual([true, false]);
    expect(globalFull.retryAfterMs).toBeGreaterThan(0);
    expect(globalFull.retryAfterMs).toBeLessThanOrEqual(1_000);
    expect(await used(l, 'user:b', 60_000)).toBe(1);
  });

  it('matches a model of all-or-nothing over exact sliding windows, call by call', async () => {
    let t = 1_000_000;
    // A test of Redis's decisions: a deadline a loaded machine cannot miss. Times are stretched 20×
    // so that every TTL (which Redis counts on its own clock) is seconds long.
    const l = limiter({ clock: () => t, breaker: { timeoutMs: 2000 } });
    const random = prng(7);
    const specs = [
      { key: 'u1', limit: 4, windowMs: 6_000 },
      { key: 'u2', limit: 3, windowMs: 10_000 },
      { key: 'route', limit: 6, windowMs: 4_000 },
      { key: 'global', limit: 8, windowMs: 8_000 },
    ];
    const models = new Map(specs.map((s) => [`${s.key}/${s.windowMs}`, new ReferenceWindow(s.limit, s.windowMs)]));
    for (let i = 0; i < 300; i++) {
      t += 20 * Math.floor(random() * 25);
      const chosen = specs.filter(() => random() < 0.6);
      if (chosen.length === 0) continue;
      const items = chosen.map((s) => ({ ...s, cost: random() < 0.25 ? 2 : 1 }));
      const got = await l.limitAll(items);
      const windows = items.map((item) => models.get(`${item.key}/${item.windowMs}`) as ReferenceWindow);
      const fits = items.map((item, j) => (windows[j] as ReferenceWindow).used(t) + item.cost <= item.limit);
      const all = fits.every(Boolean);
      expect({ i, allowed: got.allowed }).toEqual({ i, allowed: all });
      expect({ i, fits: got.decisions.map((d) => d.allowed) }).toEqual({ i, fits });
      if (all) for (const [j, item] of items.entries()) (windows[j] as ReferenceWindow).limitAt(t, item.cost);
      items.forEach((item, j) => {
        const w = windows[j] as ReferenceWindow;
        const view = w.check(t, item.cost);
        expect({ i, j, remaining: got.decisions[j]?.remaining }).toEqual({ i, j, remaining: Math.max(item.limit - w.used(t), 0) });
        if (!fits[j]) expect({ i, j, retry: got.decisions[j]?.retryAfterMs }).toEqual({ i, j, retry: view.retryAfterMs });
      });
    }
  });

  it('never lets any limit exceed under concurrent calls from several limiters', async () => {
    const prefix = `all:${randomUUID()}:`;
    // A burst of 600 script calls at once: a deadline that lets Redis decide them all.
    const ls = [0, 1, 2].map(() => limiter({ prefix, breaker: { timeoutMs: 5000 }, slowCallMs: 5000 }));
    await expectGlobalLimitBinds(ls, (key) => used(ls[0] as ResilientLimiter, key, 60_000));
  });

  it('counts a repeated key once per occurrence, and a retried id once', async () => {
    const l = limiter();
    const items = [
      { key: 'k', limit: 5, windowMs: 60_000, cost: 2 },
      { key: 'k', limit: 5, windowMs: 60_000, cost: 2 },
    ];
    const first = await l.limitAll(items, { id: 'req-1' });
    expect(first.allowed).toBe(true);
    expect(await used(l, 'k', 60_000)).toBe(4);
    const retry = await l.limitAll(items, { id: 'req-1' });
    expect(retry.allowed).toBe(true);
    expect(await used(l, 'k', 60_000)).toBe(4);
    // A new call needs 4 more: only 1 left.
    const next = await l.limitAll(items);
    expect(next.allowed).toBe(false);
    expect(next.decisions.map((d) => d.allowed)).toEqual([false, false]);
    expect(await used(l, 'k', 60_000)).toBe(4);
  });

  it('keeps its windows apart from limit() and from other window lengths', async () => {
    const l = limiter({ limit: 2, windowMs: 60_000 });
    expect((await l.limitAll([{ key: 'x', limit: 1, windowMs: 60_000 }])).allowed).toBe(true);
    expect((await l.limitAll([{ key: 'x', limit: 1, windowMs: 1_000 }])).allowed).toBe(true);
    expect((await l.limit('x')).remaining).toBe(1);
  });

  it('answers from the local windows, all or nothing, while the breaker is open, and writes those calls back', async () => {
    const l = limiter();
    l.forceOpen();
    const items = [
      { key: 'u', limit: 2, windowMs: 60_000 },
      { key: 'g', limit: 3, windowMs: 60_000 },
    ];
    const decisions = [];
    for (let i = 0; i < 3; i++) decisions.push(await l.limitAll(items));
    expect(decisions.map((d) => [d.allowed, d.source, d.reason])).toEqual([
      [true, 'local', 'breaker-open'],
      [true, 'local', 'breaker-open'],
      [false, 'local', 'breaker-open'],
    ]);
    expect(decisions[2]?.decisions.map((d) => d.allowed)).toEqual([false, true]);
    // The refused call took nothing from g locally: one more call on g alone fits.
    expect((await l.limitAll([{ key: 'g', limit: 3, windowMs: 60_000 }])).allowed).toBe(true);
    l.forceClose();
    await l.reconcile();
    expect(await used(l, 'u', 60_000)).toBe(2);
    expect(await used(l, 'g', 60_000)).toBe(3);
    // Back on Redis, which now knows them.
    const after = await l.limitAll([{ key: 'g', limit: 3, windowMs: 60_000 }]);
    expect([after.allowed, after.source]).toEqual([false, 'redis']);
  });

  it('follows the mode when Redis cannot answer: fail-open and fail-closed', async () => {
    const open = limiter({ mode: 'fail-open' });
    open.forceOpen();
    expect(await open.limitAll([{ key: 'a', limit: 1, windowMs: 1000 }])).toMatchObject({
      allowed: true,
      source: 'fail-open',
      reason: 'breaker-open',
    });
    const closed = limiter({ mode: 'fail-closed' });
    closed.forceOpen();
    const d = await closed.limitAll([{ key: 'a', limit: 1, windowMs: 1000 }]);
    expect(d).toMatchObject({ allowed: false, source: 'fail-closed', reason: 'breaker-open' });
    expect(d.retryAfterMs).toBeGreaterThan(0);
  });

  it('publishes one decision per limit and counts them in stats()', async () => {
    const l = limiter();
    await l.limitAll([
      { key: 'a', limit: 1, windowMs: 1000 },
      { key: 'b', limit: 1, windowMs: 1000 },
    ]);
    expect(l.stats().byReason.decided).toBe(2);
  });

  it('rejects bad limits, naming the item and the field', async () => {
    const l = limiter();
    await expect(l.limitAll([])).rejects.toThrow(
      /Expected the limits of limitAll\(\) to be an array of 1 to 64 \{ key, limit, windowMs, cost\? \}, got an array of 0/,
    );
    await expect(l.limitAll([{ key: 'a', limit: 0, windowMs: 1 }])).rejects.toThrow(
      /Expected `limits\[0\]\.limit` to be an integer from 1 to 2147483647, got `0`/,
    );
    await expect(
      l.limitAll([
        { key: 'a', limit: 1, windowMs: 1 },
        { key: 'b', limit: 2, windowMs: 1, cost: 3 },
      ]),
    ).rejects.toThrow(/Expected `limits\[1\]\.cost` to be an integer from 1 to 2, got `3`/);
    await expect(l.limitAll([{ key: '', limit: 1, windowMs: 1 }])).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_KEY' });
    await expect(l.limitAll('x' as never)).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_OPTION' });
  });
});
