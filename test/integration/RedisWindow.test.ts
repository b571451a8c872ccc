import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisWindow, ResilimitError, type RedisDecision } from '../../src/index.js';
import type { BatchDecision } from '../../src/redis/RedisWindow.js';
import { decideBatch } from '../../src/base/internal.js';
import { loadScript } from '../../src/redis/scripts/script.js';
import { prng, ReferenceWindow } from '../support/model.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;
let redis: Redis;

beforeAll(async () => {
  server = await useRedis();
  redis = server.client();
  await waitReady(redis);
});
afterAll(async () => {
  await server?.close();
});

/** A window under a prefix of its own, so that tests never share keys (even on a shared REDIS_URL). */
function window(options: { limit: number; windowMs: number; now?: () => number }, client: Redis = redis) {
  return new RedisWindow({ redis: client, prefix: `t:${randomUUID()}:`, ...options });
}

/**
 * How much the model tests stretch their injected times. Redis expires a key on its own clock, by
 * the TTL the script set from the injected one: a window of tens of ms could expire for real while
 * a loaded machine runs a few calls, and the key would be gone when the model still holds calls.
 * Stretched, every TTL is seconds long, and the sequences of decisions are the same.
 */
const SCALE = 20;

function clock(start = 1_000_000) {
  const c = { t: start, skew: 0, now: () => c.t };
  return c;
}

/** The largest number of permits admitted within any window (t - windowMs, t], from the decisions' times. */
function maxInAnyWindow(decisions: RedisDecision[], windowMs: number, cost = 1): number {
  const times = decisions
    .filter((d) => d.allowed)
    .map((d) => d.nowMs)
    .sort((a, b) => a - b);
  let max = 0;
  let start = 0;
  for (let end = 0; end < times.length; end++) {
    while ((times[start] as number) <= (times[end] as number) - windowMs) start++;
    max = Math.max(max, (end - start + 1) * cost);
  }
  return max;
}

describe('RedisWindow', () => {
  it('never admits more than the limit in a burst from many clients at once', async () => {
    const clients = Array.from({ length: 8 }, () => server.client());
    await Promise.all(clients.map((c) => waitReady(c)));
    const key = 'burst';
    const prefix = `t:${randomUUID()}:`;
    const windows = clients.map((c) => new RedisWindow({ redis: c, prefix, limit: 100, windowMs: 60_000 }));
    const decisions = await Promise.all(Array.from({ length: 1000 }, (_, i) => (windows[i % windows.length] as RedisWindow).limit(key)));
    expect(decisions.filter((d) => d.allowed)).toHaveLength(100);
    expect(await redis.zcard(windows[0]!.keyOf(key))).toBe(100);
    const last = decisions
      .filter((d) => d.allowed)
      .map((d) => d.remaining)
      .sort((a, b) => a - b);
    expect(last[0]).toBe(0);
    expect(new Set(last).size).toBe(100);
  });

  it('holds the limit in every window of a sustained load from many clients', async () => {
    const clients = Array.from({ length: 8 }, () => server.client());
    await Promise.all(clients.map((c) => waitReady(c)));
    const prefix = `t:${randomUUID()}:`;
    const windowMs = 100;
    const limit = 20;
    const windows = clients.map((c) => new RedisWindow({ redis: c, prefix, limit, windowMs }));
    const decisions: RedisDecision[] = [];
    const until = Date.now() + 800;
    await Promise.all(
      windows.flatMap((w) =>
        Array.from({ length: 4 }, async () => {
          while (Date.now() < until) decisions.push(await w.limit('sustained'));
        }),
      ),
    );
    const admitted = decisions.filter((d) => d.allowed).length;
    expect(decisions.length).toBeGreaterThan(1000);
    expect(maxInAnyWindow(decisions, windowMs)).toBe(limit);
    // About 8 full windows passed: the limit was also reached, not just respected.
    expect(admitted).toBeGreaterThanOrEqual(limit * 6);
    expect(admitted).toBeLessThanOrEqual(limit * 10);
  });

  it('decides each call of a batch against its own limit less what it leaves free, and tells the permits in use exactly', async () => {
    const w = window({ limit: 10, windowMs: 60_000 });
    for (let i = 0; i < 8; i += 1) await w.limit('shared');
    // Limit 10 with 5 left free: a call of cost 1 sees 5 usable, all in use; a call of cost 6 is
    // decided against 6 (never less than its cost); a call of another key and limit against its own.
    const decisions = (await w[decideBatch](
      [
        { key: 'shared', cost: 1, id: 'a', limit: 10 },
        { key: 'shared', cost: 6, id: 'b', limit: 10 },
        { key: 'other', cost: 1, id: 'c', limit: 3 },
      ],
      undefined,
      (limit) => (limit === 10 ? 5 : 0),
    )) as BatchDecision[];
    expect(decisions.map((d) => [d.allowed, d.limit, d.remaining, d.used])).toEqual([
      [false, 10, 0, 8],
      [false, 10, 0, 8],
      [true, 3, 2, 1],
    ]);
  });

  it('decides a batch of cost-1 calls under one limit (sent as ids only) as it decides the same calls one by one', async () => {
    const batched = window({ limit: 3, windowMs: 60_000 });
    const single = window({ limit: 3, windowMs: 60_000 });
    const keys = ['a', 'b', 'a', 'a', 'a', 'b'];
    const batch = (await batched[decideBatch](keys.map((key, i) => ({ key, cost: 1, id: `id${i}`, limit: 3 })))) as BatchDecision[];
    const oneByOne: RedisDecision[] = [];
    for (const [i, key] of keys.entries()) oneByOne.push(await single.limit(key, { id: `id${i}` }));
    const fields = (d: RedisDecision) => [d.allowed, d.remaining, d.duplicate, d.blocked, d.retryAfterMs > 0];
    expect(batch.map(fields)).toEqual(oneByOne.map(fields));
    expect(batch.map((d) => d.allowed)).toEqual([true, true, true, true, false, true]);
  });

  it('decides the other calls of a batch when one key holds another type, and tells that call apart', async () => {
    const w = window({ limit: 2, windowMs: 60_000 });
    await redis.set(w.keyOf('bad'), 'not a sorted set');
    for (const layout of ['shared', 'per-call'] as const) {
      const cost = layout === 'shared' ? 1 : 2;
      const outcomes = await w[decideBatch](
        ['good', 'bad', 'good'].map((key, i) => ({ key, cost: key === 'bad' ? 1 : cost, id: `${layout}${i}`, limit: 2 })),
      );
      expect(
        outcomes.map((o) => (o instanceof ResilimitError ? `${o.code} ${o.message.includes('"bad"')}` : `${o.allowed} ${o.used}`)),
      ).toEqual([`true ${cost}`, 'ERR_RESILIMIT_REDIS_REPLY true', layout === 'shared' ? 'true 2' : 'false 2']);
      await redis.del(w.keyOf('good'));
    }
    await expect(w.limit('bad')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_REDIS_REPLY' });
    expect(await redis.get(w.keyOf('bad'))).toBe('not a sorted set');
  });

  it('fails the whole script call with an ERR reply on a Lua error (a member of the key that is not ours)', async () => {
    const w = window({ limit: 1, windowMs: 60_000 });
    // A negative score on a member that is neither "*" nor "*!": another program's member in our set.
    await redis.zadd(w.keyOf('foreign'), -5, 'm');
    await expect(
      w[decideBatch]([
        { key: 'a', cost: 1, id: 'x', limit: 1 },
        { key: 'foreign', cost: 1, id: 'y', limit: 1 },
      ]),
    ).rejects.toMatchObject({
      code: 'ERR_RESILIMIT_REDIS_REPLY',
      message: expect.stringMatching(/^Redis rejected the call: ERR /),
    });
  });

  it("fails the whole script call, with Redis's error and its prefix, for any other error than WRONGTYPE", async () => {
    if (server.kind !== 'child') return; // it changes the server's maxmemory
    const w = window({ limit: 5, windowMs: 60_000 });
    await redis.config('SET', 'maxmemory', '1');
    try {
      await expect(w.limit('k')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_REDIS_UNAVAILABLE', message: expect.stringMatching(/OOM/) });
    } finally {
      await redis.config('SET', 'maxmemory', '0');
    }
    expect(await w.limit('k')).toMatchObject({ allowed: true, remaining: 4 });
  });

  it('refuses malformed script arguments of either layout before deciding any call', async () => {
    const { source } = loadScript('sliding-window');
    const prefix = `t:${randomUUID()}:`;
    const keys = [`${prefix}{a}`, `${prefix}{b}`];
    // [batch arguments], then the limit of every call and the ids, or '' and a limit, cost and id per call.
    const cases: [(string | number)[], string][] = [
      [[60_000, '', '', 0, 5, 'x', ''], 'id must not be empty'],
      [[60_000, '', '', 0, 5, 'x'], 'expected an id per key'],
      [[60_000, '', '', 0, 0, 'x', 'y'], 'limit must be a positive integer'],
      [[60_000, '', '', 0, 'five', 'x', 'y'], 'limit must be a positive integer'],
      [[60_000, '', '', 0, '', 5, 1, 'x', 5, 6, 'y'], 'cost must be an integer between 0 and limit'],
      [[60_000, '', '', 0, '', 5, 1, 'x', 5, 1], 'expected a limit, a cost and an id per key'],
    ];
    for (const [args, message] of cases) {
      await expect(redis.eval(source, keys.length, ...keys, ...args)).rejects.toThrow(message);
    }
    expect(await redis.exists(...keys)).toBe(0);
  });

  it('refuses a clock of 9 × 10^13 ms or more in every script with a reply of numbers, writing nothing', async () => {
    // Replies are numbers joined by Lua, which writes 10^14 and above with an exponent (14 significant
    // digits): such a clock (not milliseconds) used to be stored rounded and its reply refused.
    const load = (name: string) => loadScript(name).source;
    const prefix = `t:${randomUUID()}:`;
    const key = `${prefix}{a}`;
    const late = 90_000_000_000_000;
    const cases: [string, (string | number)[]][] = [
      ['sliding-window', [60_000, late, '', 0, 5, 'x']],
      ['sliding-window', [60_000, 100_000_000_000_492, '', 0, '', 5, 1, 'x']],
      ['limit-all', ['take', late, '', 'x', 5, 60_000, 1]],
      ['refund', [60_000, late, 'x', 1]],
    ];
    for (const [script, args] of cases) {
      await expect(redis.eval(load(script), 1, key, ...args)).rejects.toThrow('nowMs must be a positive integer below 9e13');
    }
    expect(await redis.exists(key)).toBe(0);
    // The last millisecond before it is decided as any other.
    const w = window({ limit: 1, windowMs: 60_000, now: () => late - 1 });
    expect(await w.limit('a')).toMatchObject({ allowed: true, resetAtMs: late - 1 + 60_000 });
    expect(await w.limit('a')).toMatchObject({ allowed: false, retryAfterMs: 60_000 });
  });

  it('counts every call made in the same millisecond', async () => {
    const c = clock();
    const w = window({ limit: 100, windowMs: 1000, now: c.now });
    const decisions = await Promise.all(Array.from({ length: 250 }, () => w.limit('same-ms')));
    expect(decisions.filter((d) => d.allowed)).toHaveLength(100);
    expect(await redis.zcard(w.keyOf('same-ms'))).toBe(100);
  });

  it('admits a call of cost c whole or not at all, and rejected calls consume nothing', async () => {
    const c = clock();
    const w = window({ limit: 5, windowMs: 1000, now: c.now });
    expect((await w.limit('k', { cost: 4 })).remaining).toBe(1);
    const rejected = await w.limit('k', { cost: 2 });
    expect(rejected).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 1000 });
    for (let i = 0; i < 10; i++) await w.limit('k', { cost: 3 });
    expect(await redis.zcard(w.keyOf('k'))).toBe(2); // the cost-4 call and its "*" tally
    expect(await w.limit('k')).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('counts a re-sent id once while it is in the window', async () => {
    const w = window({ limit: 2, windowMs: 60_000 });
    expect(await w.limit('k', { id: 'req-1' })).toMatchObject({ allowed: true, remaining: 1, duplicate: false });
    expect(await w.limit('k', { id: 'req-1' })).toMatchObject({ allowed: true, remaining: 1, duplicate: true });
    expect(await w.limit('k', { id: 'req-2' })).toMatchObject({ allowed: true, remaining: 0 });
    expect(await w.limit('k', { id: 'req-1' })).toMatchObject({ allowed: true, duplicate: true });
    expect(await w.limit('k', { id: 'req-3' })).toMatchObject({ allowed: false });
  });

  it('matches the reference model call by call over random traffic', async () => {
    for (const seed of [11, 12, 13]) {
      const random = prng(seed);
      const c = clock();
      const limit = 1 + Math.floor(random() * 15);
      const windowMs = SCALE * (50 + Math.floor(random() * 400));
      const w = window({ limit, windowMs, now: c.now });
      const model = new ReferenceWindow(limit, windowMs);
      for (let i = 0; i < 400; i++) {
        c.t += SCALE * Math.floor(random() * random() * 40);
        const cost = random() < 0.3 ? 1 + Math.floor(random() * limit) : 1;
        const id = random() < 0.1 ? `id*${Math.floor(random() * 30)}` : undefined;
        const got = await w.limit('model', id === undefined ? { cost } : { cost, id });
        const want = model.limitAt(c.t, cost, id);
        const { nowMs, duplicate, blocked: _blocked, ...decision } = got;
        expect({ seed, i, ...decision }).toEqual({ seed, i, ...want, limit, source: 'redis' });
        expect(nowMs).toBe(c.t);
        expect(duplicate).toBeTypeOf('boolean');
        if (random() < 0.05) {
          expect(await w.peek('model')).toMatchObject({ remaining: Math.max(limit - model.used(c.t), 0) });
        }
      }
    }
  });

  it("matches the reference model when callers' clocks disagree a little", async () => {
    // Callers that pass their own clock (`now`) disagree a little: a call can be decided at a time
    // before the newest member, which must not shorten the key's life or the reported reset.
    for (const seed of [21, 22, 23]) {
      const random = prng(seed);
      const c = clock();
      const limit = 1 + Math.floor(random() * 10);
      const windowMs = SCALE * (60 + Math.floor(random() * 200));
      const w = window({ limit, windowMs, now: () => c.t - c.skew });
      const model = new ReferenceWindow(limit, windowMs);
      for (let i = 0; i < 400; i++) {
        c.t += SCALE * Math.floor(random() * random() * 30);
        c.skew = random() < 0.5 ? SCALE * Math.floor(random() * 6) : 0;
        const now = c.t - c.skew;
        const cost = random() < 0.2 ? 1 + Math.floor(random() * limit) : 1;
        model.forget(now);
        const { nowMs, duplicate, blocked: _blocked, ...decision } = await w.limit('skew', { cost });
        expect({ seed, i, ...decision }).toEqual({ seed, i, ...model.limitAt(now, cost), limit, source: 'redis' });
        expect(nowMs).toBe(now);
        const ttl = await redis.pttl(w.keyOf('skew'));
        if (decision.resetAtMs > now) expect({ seed, i, ttl: ttl > decision.resetAtMs - now - 50 }).toEqual({ seed, i, ttl: true });
      }
    }
  });

  it("matches the reference model on Redis's own clock, fed the times Redis decided at", async () => {
    const random = prng(31);
    const limit = 5;
    const windowMs = 150;
    const w = window({ limit, windowMs });
    const model = new ReferenceWindow(limit, windowMs);
    const key = 'redis-time';
    for (let i = 0; i < 250; i++) {
      if (random() < 0.5) await sleep(Math.floor(random() * 12));
      const cost = random() < 0.1 ? 2 : 1;
      const { nowMs, duplicate, blocked: _blocked, ...decision } = await w.limit(key, { cost });
      model.forget(nowMs);
      expect({ i, ...decision }).toEqual({ i, ...model.limitAt(nowMs, cost), limit, source: 'redis' });
      const ttl = await redis.pttl(w.keyOf(key));
      // The key lives until its window empties (less the time since the decision).
      expect({ i, ttlOk: ttl > decision.resetAtMs - nowMs - 30 && ttl <= decision.resetAtMs - nowMs }).toEqual({ i, ttlOk: true });
    }
  });

  it('admits a rejected call when retried after retryAfterMs, and not meaningfully before', async () => {
    const w = window({ limit: 2, windowMs: 400 });
    await w.limit('retry');
    await sleep(100);
    await w.limit('retry');
    const rejected = await w.limit('retry');
    expect(rejected.allowed).toBe(false);
    expect(rejected.retryAfterMs).toBeGreaterThan(250);
    expect(rejected.retryAfterMs).toBeLessThanOrEqual(300);
    const startedAt = Date.now();
    await sleep(rejected.retryAfterMs - 60);
    expect((await w.limit('retry')).allowed).toBe(false);
    await sleep(rejected.retryAfterMs - (Date.now() - startedAt) + 2);
    expect((await w.limit('retry')).allowed).toBe(true);
  });

  it("takes time from Redis's clock by default", async () => {
    const w = window({ limit: 5, windowMs: 1000 });
    const [before] = await redis.time();
    const decision = await w.limit('clock');
    const [after] = await redis.time();
    expect(decision.nowMs).toBeGreaterThanOrEqual(Number(before) * 1000);
    expect(decision.nowMs).toBeLessThan((Number(after) + 1) * 1000);
  });

  it('gives every key a TTL in milliseconds that ends when its window empties', async () => {
    const w = window({ limit: 3, windowMs: 250 });
    const first = await w.limit('ttl');
    const pttl = await redis.pttl(w.keyOf('ttl'));
    expect(pttl).toBeGreaterThan(150);
    expect(pttl).toBeLessThanOrEqual(250);
    expect(first.resetAtMs).toBe(first.nowMs + 250);
    await sleep(350);
    expect(await redis.exists(w.keyOf('ttl'))).toBe(0);
  });

  it('leaves no key without a TTL after mixed traffic', async () => {
    const prefix = `t:${randomUUID()}:`;
    const w = new RedisWindow({ redis, prefix, limit: 4, windowMs: 200 });
    const random = prng(7);
    for (let i = 0; i < 300; i++) {
      await w.limit(`k${Math.floor(random() * 10)}`, { cost: 1 + Math.floor(random() * 4) });
      if (i % 50 === 0) await sleep(60);
    }
    const keys = await redis.keys(`${prefix}*`);
    expect(keys.length).toBeGreaterThan(0);
    // -1: a key without a TTL. A key may also have expired since KEYS listed it (-2): its window is
    // 200 ms, and a loaded machine took longer than that between the two once (a false failure).
    const ttls = await Promise.all(keys.map((key) => redis.pttl(key)));
    expect(keys.filter((_, i) => ttls[i] === -1)).toEqual([]);
    expect(ttls.some((ttl) => ttl > 0)).toBe(true);
  });

  it('peeks without writing anything', async () => {
    const w = window({ limit: 2, windowMs: 60_000 });
    expect(await w.peek('peek')).toMatchObject({ allowed: true, remaining: 2, retryAfterMs: 0 });
    expect(await redis.exists(w.keyOf('peek'))).toBe(0);
    await w.limit('peek', { cost: 2 });
    const peeked = await w.peek('peek');
    expect(peeked).toMatchObject({ allowed: false, remaining: 0 });
    expect(peeked.retryAfterMs).toBeGreaterThan(59_000);
    expect(await redis.zcard(w.keyOf('peek'))).toBe(2);
  });

  it('forgets a key on reset', async () => {
    const w = window({ limit: 1, windowMs: 60_000 });
    await w.limit('reset');
    expect((await w.limit('reset')).allowed).toBe(false);
    await w.reset('reset');
    expect((await w.limit('reset')).allowed).toBe(true);
  });

  it('keeps user keys with braces and other bytes apart and inside the prefix', async () => {
    const w = window({ limit: 1, windowMs: 60_000 });
    const keys = ['a', '{a}', 'a}', '{a', '%7Ba%7D', 'a%', 'ключ', '🙂', 'a\u0000b', 'a b\r\n'];
    for (const key of keys) expect((await w.limit(key)).allowed).toBe(true);
    for (const key of keys) expect((await w.limit(key)).allowed).toBe(false);
    const stored = await redis.keys(`${w.options.prefix}*`);
    expect(stored).toHaveLength(keys.length);
  });

  it('runs again after SCRIPT FLUSH', async () => {
    const w = window({ limit: 5, windowMs: 60_000 });
    await w.limit('flush');
    await redis.script('FLUSH');
    expect(await w.limit('flush')).toMatchObject({ allowed: true, remaining: 3 });
  });

  it('reports a wrong-type key as a reply error, not as Redis being unavailable', async () => {
    const w = window({ limit: 5, windowMs: 60_000 });
    await redis.set(w.keyOf('wrong'), 'x');
    await expect(w.limit('wrong')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_REDIS_REPLY' });
  });

  it('rejects with ERR_RESILIMIT_REDIS_UNAVAILABLE when the client cannot reach Redis', async () => {
    const offline = server.client({ lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    const w = window({ limit: 5, windowMs: 60_000 }, offline);
    await expect(w.limit('offline')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_REDIS_UNAVAILABLE' });
  });

  it('refuses bad input with coded errors', async () => {
    const w = window({ limit: 5, windowMs: 60_000 });
    await expect(w.limit('')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_KEY' });
    await expect(w.limit('k', { cost: 6 })).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_COST' });
    await expect(w.limit('k', { id: '' })).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_ID' });
    expect(() => new RedisWindow({ limit: 5, windowMs: 1000 } as never)).toThrow(
      expect.objectContaining({
        code: 'ERR_RESILIMIT_INVALID_OPTION',
        message:
          'Expected `redis` to be an ioredis, iovalkey, node-redis or Valkey GLIDE client (single server or Cluster), got `undefined` (undefined)',
      }),
    );
    expect(() => new RedisWindow({ redis, limit: 5, windowMs: 1000, prefix: 'a{' })).toThrow(
      expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION' }),
    );
  });
});
