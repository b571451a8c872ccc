/**
 * refund() on a real Redis: the call leaves Redis's window by its member (the id, or `<cost>*<id>`),
 * the local window and the journal; twice, or an id not in the window, gives nothing back. While Redis
 * cannot answer, the local side gives it back at once and Redis's removal waits for Redis.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ErrorCode, ResilientLimiter, type ResilientLimiterOptions } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

let server: RedisChild;
/** The test's own client: reads what the limiters wrote. */
let admin: Redis;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  // Every write on disk before it is acknowledged: a server killed and restarted keeps its data.
  server = await startRedisServer({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
  admin = server.client();
  await waitReady(admin);
});
afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
});
afterAll(async () => {
  await server?.close();
});

async function client(): Promise<Redis> {
  const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
  clients.push(redis);
  await waitReady(redis);
  return redis;
}

async function limiter(options: Partial<ResilientLimiterOptions> = {}): Promise<ResilientLimiter> {
  const l = new ResilientLimiter({
    redis: await client(),
    prefix: `refund:${randomUUID()}:`,
    limit: 2,
    windowMs: 60_000,
    local: { instances: 1 },
    // A generous deadline: these tests are about what Redis holds, so Redis must decide on a loaded machine.
    breaker: { timeoutMs: 2_000, resetTimeoutMs: 50 },
    ...options,
  });
  limiters.push(l);
  return l;
}

/** The members of `key`'s window in Redis, calls and special members alike. */
async function members(prefix: string, key: string): Promise<string[]> {
  return admin.zrange(redisKey(prefix, key), '0', '-1');
}

describe('refund() with Redis answering', () => {
  it("removes the call from Redis's window by its id: the next call is admitted where the window was full", async () => {
    const prefix = `refund:${randomUUID()}:`;
    const l = await limiter({ prefix });
    const first = await l.limit('k');
    const second = await l.limit('k');
    expect((await l.limit('k')).allowed).toBe(false); // full (and denied in the deny cache)
    expect(await members(prefix, 'k')).toEqual([first.id, second.id]);

    expect(await l.refund('k', first.id as string)).toEqual({ refunded: true, permits: 1, pending: false });
    expect(await members(prefix, 'k')).toEqual([second.id]);
    const again = await l.limit('k');
    expect(again).toMatchObject({ allowed: true, source: 'redis', remaining: 0 });
  });

  it('gives nothing back twice, nor for an id that was never admitted, and says so', async () => {
    const l = await limiter();
    await l.limit('k', { id: 'req-1' });
    const d = await l.limit('k');
    expect(await l.refund('k', 'req-1')).toEqual({ refunded: true, permits: 1, pending: false });
    expect(await l.refund('k', 'req-1')).toEqual({ refunded: false, permits: 0, pending: false });
    expect(await l.refund('k', 'never-admitted')).toEqual({ refunded: false, permits: 0, pending: false });
    expect(await l.refund('other-key', d.id as string)).toEqual({ refunded: false, permits: 0, pending: false });
    expect((await l.peek('k')).remaining).toBe(1);
  });

  it('gives back the whole cost of a call of cost > 1 and keeps the "*" sum of the extras right', async () => {
    const prefix = `refund:${randomUUID()}:`;
    const l = await limiter({ prefix, limit: 10 });
    const a = await l.limit('k', { cost: 3 });
    const b = await l.limit('k', { cost: 4 });
    await l.limit('k'); // cost 1
    const rk = redisKey(prefix, 'k');
    expect(await admin.zscore(rk, '*')).toBe('-5'); // (3 - 1) + (4 - 1)
    expect(await l.refund('k', a.id as string)).toEqual({ refunded: true, permits: 3, pending: false });
    expect(await admin.zscore(rk, '*')).toBe('-3');
    expect(await admin.zscore(rk, `3*${a.id}`)).toBeNull();
    expect((await l.peek('k')).remaining).toBe(5); // 10 - 4 - 1
    expect(await l.refund('k', b.id as string)).toEqual({ refunded: true, permits: 4, pending: false });
    expect(await admin.zscore(rk, '*')).toBeNull(); // the sum is 0: the member goes
    expect((await l.peek('k')).remaining).toBe(9);
    expect((await l.limit('k', { cost: 9 })).allowed).toBe(true);
  });

  it("keeps the key's TTL on its newest call, and deletes the key when no call is left", async () => {
    const prefix = `refund:${randomUUID()}:`;
    const c = { t: 1_000_000_000_000 };
    const l = await limiter({ prefix, limit: 5, windowMs: 60_000, clock: () => c.t });
    const rk = redisKey(prefix, 'k');
    const old = await l.limit('k');
    c.t += 30_000;
    const newest = await l.limit('k', { cost: 2 });
    expect(await admin.pttl(rk)).toBeGreaterThan(55_000); // the newest call leaves a window from now
    expect((await l.refund('k', newest.id as string)).permits).toBe(2);
    const ttl = await admin.pttl(rk);
    expect(ttl).toBeGreaterThan(25_000); // the older call leaves 30 s from now
    expect(ttl).toBeLessThanOrEqual(30_000);
    expect((await l.refund('k', old.id as string)).permits).toBe(1);
    expect(await admin.exists(rk)).toBe(0);
  });

  it('gives nothing back for a call that has left the window', async () => {
    const c = { t: 1_000_000_000_000 };
    const l = await limiter({ windowMs: 1_000, clock: () => c.t });
    const d = await l.limit('k', { cost: 2 });
    c.t += 1_000;
    expect(await l.refund('k', d.id as string)).toEqual({ refunded: false, permits: 0, pending: false });
  });

  it('is made by another instance that never saw the call: Redis finds it by its id and the cost the caller gives, never by a scan', async () => {
    const prefix = `refund:${randomUUID()}:`;
    const a = await limiter({ prefix, limit: 20 });
    const b = await limiter({ prefix, limit: 20 }); // another client: as another process would
    const generated = await a.limit('k', { cost: 3 });
    await a.limit('k', { id: 'x', cost: 4 });
    await a.limit('k', { id: 'y*z' }); // cost 1, but a '*' in the id: the member is `1*y*z`
    await a.limit('k', { id: 'z', cost: 2 }); // `2*z`: matches the pattern of `y*z`'s id's tail, not its id
    await a.limit('k', { id: 'g?[l]*b\\', cost: 2 }); // glob characters are matched literally
    const rk = redisKey(prefix, 'k');
    expect(await admin.zscore(rk, '*')).toBe(`-${2 + 3 + 1 + 1}`);

    expect(await b.refund('k', 'y*z')).toEqual({ refunded: true, permits: 1, pending: false });
    expect(await admin.zscore(rk, '2*z')).not.toBeNull();
    // A call of cost > 1 that b never saw is found only with its cost: Redis does not scan the key for it.
    expect(await b.refund('k', 'x')).toEqual({ refunded: false, permits: 0, pending: false });
    expect(await b.refund('k', 'x', { cost: 4 })).toEqual({ refunded: true, permits: 4, pending: false });
    expect(await b.refund('k', generated.id as string, { cost: 3 })).toEqual({ refunded: true, permits: 3, pending: false });
    expect(await b.refund('k', 'g?[l]*b\\', { cost: 2 })).toEqual({ refunded: true, permits: 2, pending: false });
    expect(await b.refund('k', 'g')).toEqual({ refunded: false, permits: 0, pending: false });
    expect(await members(prefix, 'k')).toEqual(['*', '2*z']);
    expect(await admin.zscore(rk, '*')).toBe('-1');
    expect((await a.peek('k')).remaining).toBe(18);
  });

  it('rejects misuse with the coded errors of limit(), and after close()', async () => {
    const l = await limiter();
    await expect(l.refund('', 'id')).rejects.toMatchObject({ code: ErrorCode.INVALID_KEY });
    await expect(l.refund('k', undefined as unknown as string)).rejects.toMatchObject({ code: ErrorCode.INVALID_ID });
    await expect(l.refund('k', 'x'.repeat(129))).rejects.toMatchObject({ code: ErrorCode.INVALID_ID });
    await expect(l.refund('k', 'id', { cost: 0 })).rejects.toMatchObject({ code: ErrorCode.INVALID_COST });
    await expect(l.refund('k', 'id', { costs: 2 } as never)).rejects.toThrow(/`costs`.*refund\(\).*did you mean `cost`/);
    await l.close();
    await expect(l.refund('k', 'id')).rejects.toMatchObject({ code: ErrorCode.CLOSED });
  });
});

describe('refund() while Redis cannot answer', () => {
  it('gives a locally admitted call back exactly: the journal never writes it into Redis', async () => {
    const prefix = `refund:${randomUUID()}:`;
    const l = await limiter({ prefix, limit: 3 });
    l.forceOpen();
    const kept = await l.limit('k', { cost: 2 });
    const refunded = await l.limit('k');
    expect([kept.source, refunded.source]).toEqual(['local', 'local']);
    expect((await l.limit('k')).allowed).toBe(false);
    expect(l.stats().reconcile.pending).toBe(2);

    expect(await l.refund('k', refunded.id as string)).toEqual({ refunded: true, permits: 1, pending: false });
    expect(l.stats().reconcile.pending).toBe(1);
    expect(l.stats().refunds.pending).toBe(0); // never sent to Redis: nothing to remove there
    expect(await l.refund('k', refunded.id as string)).toEqual({ refunded: false, permits: 0, pending: true });
    const after = await l.limit('k');
    expect(after).toMatchObject({ allowed: true, source: 'local', remaining: 0 });

    l.forceClose();
    await l.reconcile();
    expect(l.stats().reconcile).toMatchObject({ pending: 0, written: 2 });
    expect((await members(prefix, 'k')).sort()).toEqual(['*', `2*${kept.id}`, after.id].sort());
  });

  it('gives a call Redis admitted back locally at once, and removes it from Redis once the breaker closes', async () => {
    const prefix = `refund:${randomUUID()}:`;
    const l = await limiter({ prefix });
    const first = await l.limit('k');
    await l.limit('k');
    l.forceOpen();
    expect((await l.limit('k')).allowed).toBe(false); // the local window holds Redis's two
    expect(await l.refund('k', first.id as string)).toEqual({ refunded: true, permits: 1, pending: true });
    expect(l.stats().refunds).toEqual({ pending: 1, written: 0, dropped: 0 });
    expect(await admin.zscore(redisKey(prefix, 'k'), first.id as string)).not.toBeNull(); // not yet
    expect(await l.limit('k')).toMatchObject({ allowed: true, source: 'local' });

    l.forceClose();
    await l.reconcile();
    expect(l.stats().refunds).toEqual({ pending: 0, written: 1, dropped: 0 });
    expect(await admin.zscore(redisKey(prefix, 'k'), first.id as string)).toBeNull();
  });

  it('survives a Redis restart: kept while the server is down, written after the re-seed once it is back', async () => {
    const prefix = `refund:${randomUUID()}:`;
    const l = await limiter({ prefix, limit: 3, breaker: { timeoutMs: 500, resetTimeoutMs: 50 } });
    const redis = clients.at(-1) as Redis;
    const first = await l.limit('k', { cost: 2 });
    const second = await l.limit('k');
    expect(await members(prefix, 'k')).toHaveLength(3); // two calls and "*"
    // Not events.once: it rejects on the first 'error', and the client's reconnects to the killed server fail until it is back.
    const reconnected = new Promise<void>((resolve) => redis.once('ready', () => resolve()));
    await server.kill(); // the append-only file keeps the window
    const refund = await l.refund('k', first.id as string);
    expect(refund).toEqual({ refunded: true, permits: 2, pending: true });
    await server.restart();
    await reconnected;
    for (let i = 0; l.stats().refunds.pending > 0 || l.state !== 'closed'; i += 1) {
      if (i > 400) throw new Error(`not written: ${JSON.stringify(l.stats())}`);
      await sleep(10);
      await l.reconcile();
    }
    // A new run id: the warm window re-seeded Redis (the refunded call no longer in it), then the refund ran.
    admin.disconnect();
    admin = server.client();
    await waitReady(admin);
    expect(await members(prefix, 'k')).toEqual([second.id]);
    expect(await l.limit('k', { cost: 2 })).toMatchObject({ allowed: true, source: 'redis', remaining: 0 });
  });

  it('on a client never connected (a dead port), gives a locally admitted call back exactly: once Redis is up, only the others are written', async () => {
    const prefix = `refund:${randomUUID()}:`;
    await server.kill(); // nothing listens on its port now
    const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
    clients.push(redis);
    const l = new ResilientLimiter({ redis, prefix, limit: 3, windowMs: 60_000, local: { instances: 1 } });
    limiters.push(l);
    const refunded = await l.limit('k');
    const kept = await l.limit('k', { cost: 2 });
    expect([refunded.reason, kept.reason]).toEqual(['not-ready', 'not-ready']);
    expect((await l.limit('k')).allowed).toBe(false);
    expect(await l.refund('k', refunded.id as string)).toEqual({ refunded: true, permits: 1, pending: false });
    const after = await l.limit('k');
    expect(after).toMatchObject({ allowed: true, source: 'local', remaining: 0 });

    await server.restart();
    await waitReady(redis, 10_000);
    await l.reconcile();
    expect(l.stats().reconcile).toMatchObject({ pending: 0, written: 2 });
    await waitReady(admin, 10_000);
    expect((await members(prefix, 'k')).sort()).toEqual(['*', `2*${kept.id}`, after.id].sort());
  });

  it('with reconcile: false, gives a locally admitted call back exactly, though it keeps no journal', async () => {
    const l = await limiter({ reconcile: false });
    l.forceOpen();
    const d = await l.limit('k');
    await l.limit('k');
    expect((await l.limit('k')).allowed).toBe(false);
    expect(await l.refund('k', d.id as string)).toEqual({ refunded: true, permits: 1, pending: false });
    expect(l.stats().refunds.pending).toBe(0); // never to reach Redis: nothing to remove there
    expect((await l.limit('k')).allowed).toBe(true);
  });

  it('in fail-open and fail-closed, an admission of the outage is in no window: nothing comes back', async () => {
    const l = await limiter({ mode: 'fail-open' });
    l.forceOpen();
    const d = await l.limit('k');
    expect(d).toMatchObject({ allowed: true, source: 'fail-open' });
    expect(await l.refund('k', d.id as string)).toEqual({ refunded: false, permits: 0, pending: true });
    l.setMode('fail-closed');
    expect((await l.limit('k')).id).toBeUndefined();
    l.forceClose();
    await l.reconcile();
    expect(l.stats().refunds).toEqual({ pending: 0, written: 1, dropped: 0 }); // Redis found nothing
    expect((await l.peek('k')).remaining).toBe(2);
  });

  it('keeps at most maxPending refunds, the oldest dropped first and counted', async () => {
    const l = await limiter({ limit: 100, maxPending: 3 });
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) ids.push((await l.limit('k')).id as string);
    l.forceOpen();
    for (const id of ids) expect((await l.refund('k', id)).pending).toBe(true);
    expect(l.stats().refunds).toEqual({ pending: 3, written: 0, dropped: 2 });
    l.forceClose();
    await l.reconcile();
    expect(l.stats().refunds).toEqual({ pending: 0, written: 3, dropped: 2 });
    expect((await l.peek('k')).remaining).toBe(98); // the two dropped still count, until they leave
  });
});
