import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ErrorCode, RedisWindow, ResilientLimiter, type ResilientLimiterOptions } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { freePort, startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

// Per-key limits (`limit: (key) => number`) and blocks (`block(key, ms)`, `blockMs`) against a real
// Redis. Time is an injected clock (`clock`: Redis decides on it too), so nothing sleeps for a window.

let server: RedisChild;
let admin: Redis;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];
const prefixes = new WeakMap<ResilientLimiter, string>();
const T0 = 1_800_000_000_000;

beforeAll(async () => {
  server = await startRedisServer();
  admin = createRedisClient({ host: '127.0.0.1', port: server.port });
  await waitReady(admin);
});
afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
});
afterAll(async () => {
  admin?.disconnect();
  await server?.close();
});

type Clock = { t: number };

/** A limiter on the test's Redis (or on `port`, where nothing may listen), on clock `c`. */
async function limiter(c: Clock, options: Partial<ResilientLimiterOptions> = {}, port = server.port): Promise<ResilientLimiter> {
  const redis = createRedisClient({ host: '127.0.0.1', port });
  clients.push(redis);
  if (port === server.port) await waitReady(redis);
  const prefix = options.prefix ?? `pk:${randomUUID()}:`;
  const l = new ResilientLimiter({
    redis,
    prefix,
    limit: 2,
    windowMs: 1_000,
    clock: () => c.t,
    local: { instances: 1 },
    // A generous deadline: on a loaded machine these must stay tests of Redis's answers, not of the fallback.
    breaker: { timeoutMs: 2_000 },
    ...options,
  });
  limiters.push(l);
  prefixes.set(l, prefix);
  return l;
}

/** How many of `n` calls of `key` made one after the other are admitted. */
async function admitted(l: ResilientLimiter, key: string, n: number): Promise<number> {
  let count = 0;
  for (let i = 0; i < n; i += 1) if ((await l.limit(key)).allowed) count += 1;
  return count;
}

const TIERS: Record<string, number> = { 'vip:ada': 5, 'free:bob': 2 };
const tierOf = (key: string): number => TIERS[key] ?? 3;

describe('per-key limits: limit(key) => number', () => {
  it('decides each key against its own limit in Redis, and says which', async () => {
    const c = { t: T0 };
    const l = await limiter(c, { limit: tierOf });
    expect(await admitted(l, 'vip:ada', 8)).toBe(5);
    expect(await admitted(l, 'free:bob', 8)).toBe(2);
    expect(await admitted(l, 'other', 8)).toBe(3);
    expect((await l.peek('vip:ada')).limit).toBe(5);
    const refused = await l.limit('free:bob');
    expect(refused).toMatchObject({ allowed: false, limit: 2, reason: 'deny-cache' });
    // Redis holds what each limit admitted.
    expect(await admin.zcard(redisKey(prefixOf(l), 'vip:ada'))).toBe(5);
    expect(await admin.zcard(redisKey(prefixOf(l), 'free:bob'))).toBe(2);
  });

  it('decides calls of different limits coalesced into one script call, each against its own', async () => {
    const c = { t: T0 };
    const l = await limiter(c, { limit: tierOf });
    const before = await scriptCalls();
    const keys = [...Array(5).fill('vip:ada'), ...Array(5).fill('free:bob'), ...Array(5).fill('other')] as string[];
    const decisions = await Promise.all(keys.map((key) => l.limit(key)));
    expect(await scriptCalls()).toBe(before + 1);
    const allowedOf = (key: string): number => decisions.filter((d, i) => keys[i] === key && d.allowed).length;
    expect([allowedOf('vip:ada'), allowedOf('free:bob'), allowedOf('other')]).toEqual([5, 2, 3]);
    expect(decisions.map((d) => d.limit)).toEqual(keys.map(tierOf));
  });

  it('follows a key whose limit changed at once: the deny cache does not hold a refusal made under the old one', async () => {
    const c = { t: T0 };
    const table = new Map([['acme', 2]]);
    const l = await limiter(c, { limit: (key) => table.get(key) ?? 1 });
    expect(await admitted(l, 'acme', 3)).toBe(2);
    expect(await l.limit('acme')).toMatchObject({ allowed: false, reason: 'deny-cache' });
    table.set('acme', 4); // the customer upgraded
    expect(await l.limit('acme')).toMatchObject({ allowed: true, limit: 4, remaining: 1, reason: 'decided' });
  });

  it("checks a cost against the key's limit, in limit() and acquire()", async () => {
    const c = { t: T0 };
    const l = await limiter(c, { limit: tierOf });
    expect((await l.limit('vip:ada', { cost: 4 })).allowed).toBe(true);
    await expect(l.limit('free:bob', { cost: 4 })).rejects.toMatchObject({
      code: ErrorCode.INVALID_COST,
      message: expect.stringContaining('(2)'),
    });
    await expect(l.acquire('free:bob', { cost: 3, maxWaitMs: 0 })).rejects.toMatchObject({ code: ErrorCode.INVALID_COST });
  });

  it('answers each key by its own share while Redis cannot answer (mode local)', async () => {
    const c = { t: T0 };
    const l = await limiter(c, { limit: tierOf, local: { instances: 2 } }, await freePort());
    // Shares of 2 instances: ceil(5 / 2) = 3, ceil(2 / 2) = 1, ceil(3 / 2) = 2.
    expect(await admitted(l, 'vip:ada', 8)).toBe(3);
    expect(await admitted(l, 'free:bob', 8)).toBe(1);
    expect(await admitted(l, 'other', 8)).toBe(2);
    const d = await l.limit('vip:ada');
    expect(d).toMatchObject({ allowed: false, source: 'local', limit: 3 });
  });

  it("reports each key's limit in the fixed answers of fail-open and fail-closed while Redis cannot answer", async () => {
    const c = { t: T0 };
    const port = await freePort();
    for (const mode of ['fail-open', 'fail-closed'] as const) {
      const l = await limiter(c, { mode, limit: tierOf }, port);
      const [vip, free] = [await l.limit('vip:ada'), await l.limit('free:bob')];
      expect([vip.limit, free.limit, vip.allowed, free.allowed, vip.source]).toEqual([
        5,
        2,
        mode === 'fail-open',
        mode === 'fail-open',
        mode,
      ]);
      await expect(l.limit('free:bob', { cost: 3 })).rejects.toMatchObject({ code: ErrorCode.INVALID_COST });
    }
  });

  it('reports a function that returns a bad value for a key, naming the key', async () => {
    const c = { t: T0 };
    const l = await limiter(c, { limit: (key) => (key === 'bad' ? 0 : 2) });
    expect((await l.limit('good')).allowed).toBe(true);
    await expect(l.limit('bad')).rejects.toMatchObject({
      code: ErrorCode.INVALID_OPTION,
      message: 'Expected the `limit` function to return an integer from 1 to 2147483647, got `0` (number) for key "bad"',
    });
  });
});

describe('block(key, ms)', () => {
  it('refuses the key on every instance until the block ends, retryAfterMs counting it', async () => {
    const c = { t: T0 };
    const a = await limiter(c);
    const b = await limiter(c, { prefix: prefixOf(a) }); // another instance: it learns the block from Redis
    await a.block('mallory', 5_000);
    expect(await a.limit('mallory')).toMatchObject({ allowed: false, retryAfterMs: 5_000, reason: 'deny-cache' });
    expect(await b.limit('mallory')).toMatchObject({ allowed: false, retryAfterMs: 5_000, reason: 'decided' });
    expect(await b.peek('mallory')).toMatchObject({ allowed: false, retryAfterMs: 5_000 });
    c.t += 3_000;
    expect(await b.limit('mallory', { cost: 2 })).toMatchObject({ allowed: false, retryAfterMs: 2_000 });
    expect(await admin.pttl(redisKey(prefixOf(a), 'mallory'))).toBeGreaterThan(1_000); // the key outlives a window of 1 s
    c.t += 2_000;
    expect(await admitted(b, 'mallory', 3)).toBe(2); // the block is over, the window is whole
    expect(await admin.zscore(redisKey(prefixOf(a), 'mallory'), '*!')).toBeNull();
  });

  it('is lifted by block(key, 0) and by reset(key)', async () => {
    const c = { t: T0 };
    const l = await limiter(c);
    await l.block('k', 60_000);
    expect((await l.limit('k')).allowed).toBe(false);
    await l.block('k', 0);
    expect((await l.limit('k')).allowed).toBe(true);
    await l.block('k', 60_000);
    await l.reset('k');
    expect((await l.limit('k')).allowed).toBe(true);
  });

  it('refuses bad arguments with coded errors', async () => {
    const c = { t: T0 };
    const l = await limiter(c);
    await expect(l.block('k', -1)).rejects.toMatchObject({ code: ErrorCode.INVALID_OPTION, message: expect.stringContaining('`ms`') });
    await expect(l.block('k', 1.5)).rejects.toMatchObject({ code: ErrorCode.INVALID_OPTION });
    await expect(l.block('', 10)).rejects.toMatchObject({ code: ErrorCode.INVALID_KEY });
    await l.close();
    await expect(l.block('k', 10)).rejects.toMatchObject({ code: ErrorCode.CLOSED });
  });

  it('while Redis cannot answer: blocks on this instance, in every mode, and says Redis did not take it', async () => {
    const c = { t: T0 };
    const port = await freePort();
    for (const mode of ['local', 'fail-open', 'fail-closed'] as const) {
      const l = await limiter(c, { mode }, port);
      await expect(l.block('k', 10_000)).rejects.toMatchObject({
        code: ErrorCode.REDIS_UNAVAILABLE,
        message: expect.stringContaining('block() could not reach Redis'),
      });
      expect(await l.limit('k')).toMatchObject({ allowed: false, retryAfterMs: 10_000 });
      c.t += 10_000;
      expect((await l.limit('k')).allowed).toBe(mode !== 'fail-closed');
    }
  });

  it('keeps a block Redis reported through an outage: the local tier and the deny cache refuse the key', async () => {
    const c = { t: T0 };
    const window = new RedisWindow({ redis: admin, prefix: `pk:${randomUUID()}:`, limit: 2, windowMs: 1_000, now: () => c.t });
    await window.block('k', 5_000);
    for (const mode of ['local', 'fail-open'] as const) {
      const l = await limiter(c, { mode, prefix: window.options.prefix });
      expect(await l.limit('k')).toMatchObject({ allowed: false, reason: 'decided', retryAfterMs: 5_000 });
      l.forceOpen();
      expect(await l.limit('k', { cost: 1 })).toMatchObject({ allowed: false, retryAfterMs: 5_000 });
      expect((await l.limit('other')).allowed).toBe(true);
    }
  });

  it("keeps the block's time to live when journalled calls are written back", async () => {
    const c = { t: T0 };
    const l = await limiter(c, { windowMs: 100 });
    l.forceOpen();
    expect((await l.limit('k')).allowed).toBe(true); // journalled
    await new RedisWindow({ redis: admin, prefix: prefixOf(l), limit: 2, windowMs: 100, now: () => c.t }).block('k', 60_000);
    l.forceClose();
    await l.reconcile();
    expect(l.stats().reconcile.written).toBe(1);
    expect(await admin.pttl(redisKey(prefixOf(l), 'k'))).toBeGreaterThan(50_000);
  });
});

describe('blockMs: a refusal blocks the key', () => {
  it('blocks a key refused for want of permits, on every instance; refusals meanwhile do not lengthen it', async () => {
    const c = { t: T0 };
    const a = await limiter(c, { blockMs: 3_000 });
    const b = await limiter(c, { blockMs: 3_000, prefix: prefixOf(a) });
    expect(await admitted(a, 'k', 2)).toBe(2);
    expect(await a.limit('k')).toMatchObject({ allowed: false, retryAfterMs: 3_000, reason: 'decided' });
    c.t += 1_500; // the window has room again, the block holds
    expect(await b.limit('k')).toMatchObject({ allowed: false, retryAfterMs: 1_500, reason: 'decided' });
    expect(await b.limit('k')).toMatchObject({ allowed: false, retryAfterMs: 1_500, reason: 'deny-cache' });
    c.t += 1_500;
    expect(await admitted(b, 'k', 3)).toBe(2);
  });

  it('blocks in the local tier while Redis cannot answer', async () => {
    const c = { t: T0 };
    const l = await limiter(c, { blockMs: 3_000 }, await freePort());
    expect(await admitted(l, 'k', 3)).toBe(2);
    c.t += 1_500;
    expect(await l.limit('k')).toMatchObject({ allowed: false, source: 'local', retryAfterMs: 1_500 });
    c.t += 1_500;
    expect(await admitted(l, 'k', 3)).toBe(2);
  });

  it('refuses a bad blockMs naming the option', () => {
    expect(() => new ResilientLimiter({ redis: admin, limit: 1, windowMs: 1_000, blockMs: -5 })).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_OPTION, message: expect.stringContaining('Expected `blockMs` to be an integer') }),
    );
  });
});

function prefixOf(l: ResilientLimiter): string {
  return prefixes.get(l) as string;
}

/** Script calls (`EVALSHA` + `EVAL`) the server has run so far. */
async function scriptCalls(): Promise<number> {
  const stats = await admin.info('commandstats');
  const calls = (name: string): number => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
  return calls('evalsha') + calls('eval');
}
