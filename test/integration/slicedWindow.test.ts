/**
 * The window counted by time slices (`resolutionMs`, lua/sliced-window.lua) against a real
 * redis-server: the same decisions as a reference model of the slice rule, never more than the
 * limit in any window (a brute check of every window at limit 10,000 from many clients), at most one
 * slice earlier than the exact log, memory that does not grow with the limit, and the limiter's
 * features in this mode: refund (by slice and cost, once), block, peek, the write-back of calls
 * admitted locally during an outage, the options it refuses.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { RedisWindow, ResilientLimiter, type RedisDecision } from '../../src/index.js';
import { decideBatch } from '../../src/base/internal.js';
import type { BatchDecision } from '../../src/redis/RedisWindow.js';
import { maxInAnyWindow, prng, SliceModel } from '../support/model.js';
import { useLimiters } from '../support/limiters.js';
import { slicedWindow } from '../../src/redis/scripts/slicedWindow.js';
import { waitReady } from '../support/redis.js';
import { slicedFields } from '../support/slicedHash.js';
import { until } from '../support/wait.js';

const lim = useLimiters({ limit: 3, windowMs: 60_000, resolutionMs: 1_000, local: { instances: 1 } });

describe('a window counted by slices (resolutionMs)', () => {
  it('decides as the model of the slice rule, and refuses at most one slice earlier than the exact log', async () => {
    const redis = await lim.client();
    // Times stretched (as RedisWindow.test.ts does): every TTL the script sets is seconds long.
    const t = { now: 1_700_000_000_000 };
    const windowMs = 4_000;
    const r = 400;
    const w = new RedisWindow({ redis, prefix: `s:${randomUUID()}:`, limit: 12, windowMs, resolutionMs: r, now: () => t.now });
    const model = new SliceModel(12, windowMs, r);
    const random = prng(7);
    let refusedEarly = 0;
    for (let i = 0; i < 600; i += 1) {
      t.now += Math.floor(random() * 120);
      const cost = 1 + Math.floor(random() * 3);
      const exact = model.exactRetryAfter(t.now, cost);
      const want = model.decide(t.now, cost);
      const got = await w.limit('k', { cost });
      expect([i, got.allowed, got.remaining, got.retryAfterMs, got.resetAtMs]).toEqual([
        i,
        want.allowed,
        Math.max(12 - want.used, 0),
        want.retryAfterMs,
        want.resetAtMs,
      ]);
      if (!want.allowed) {
        // The exact log, holding the same calls, would have them leave at most one slice sooner.
        expect(want.retryAfterMs - exact).toBeGreaterThanOrEqual(0);
        expect(want.retryAfterMs - exact).toBeLessThanOrEqual(r);
        if (exact === 0) refusedEarly += 1;
      }
    }
    // The sequence reached the limit often (refusals are tested, not only admissions), and some
    // refusals came where the exact log would have admitted: the bound was exercised.
    expect(model.calls.length).toBeLessThan(450);
    expect(refusedEarly).toBeGreaterThan(0);
  });

  it('never admits more than 10,000 permits in any window from many clients on Redis\u2019s clock, and fills it', async () => {
    const clients = await Promise.all(Array.from({ length: 6 }, () => lim.client()));
    const prefix = `s:${randomUUID()}:`;
    const windowMs = 600;
    const limit = 10_000;
    const windows = clients.map((redis) => new RedisWindow({ redis, prefix, limit, windowMs, resolutionMs: 30 }));
    const admitted: { at: number; cost: number }[] = [];
    let decided = 0;
    const random = prng(11);
    // Bounded by time (about three windows), not by a count: a loaded machine makes fewer calls.
    const endAt = Date.now() + 1_800;
    await Promise.all(
      windows.flatMap((w) =>
        Array.from({ length: 4 }, async () => {
          while (Date.now() < endAt) {
            const cost = 1 + Math.floor(random() * 200);
            const d: RedisDecision = await w.limit('hot', { cost });
            decided += 1;
            if (d.allowed) admitted.push({ at: d.nowMs, cost });
          }
        }),
      ),
    );
    expect(decided).toBeGreaterThan(300);
    expect(maxInAnyWindow(admitted, windowMs)).toBeLessThanOrEqual(limit);
    // The limit was reached, not only respected: some window held all but a few permits of it.
    expect(maxInAnyWindow(admitted, windowMs)).toBeGreaterThan(limit - 200);
  });

  it('keeps a key in a few hundred bytes whatever the limit: a full window at limit 1,000 and 1,000,000', async () => {
    const redis = await lim.client();
    const bytes: number[] = [];
    for (const limit of [1_000, 1_000_000]) {
      const t = { now: 1_700_000_000_000 };
      const prefix = `m:${randomUUID()}:`;
      const w = new RedisWindow({ redis, prefix, limit, windowMs: 60_000, resolutionMs: 1_000, now: () => t.now });
      // Two windows of 60 slices, each holding a sixtieth of the limit: at the end the window is full,
      // every slice of it stored, and the first window's slices dropped.
      for (let s = 0; s < 120; s += 1) {
        await w.limit('k', { cost: limit / 1_000 });
        for (let i = 1; i < 1_000 / 60; i += 1) await w.limit('k', { cost: limit / 1_000 });
        t.now += 1_000;
      }
      expect((await w.peek('k')).remaining).toBeLessThan(limit / 10);
      bytes.push(Number(await redis.call('MEMORY', 'USAGE', w.keyOf('k'))));
    }
    // A fixed-window counter (a string) is 56 bytes; 60 slices are a listpack of about ten bytes each
    // (a field and a count): measured 744 bytes at both limits on Redis 7.0.
    for (const b of bytes) expect(b).toBeLessThanOrEqual(2 * 56 + 11 * 60);
    // Only the counts' integer width grows with the limit: at most 4 bytes a slice (and its total).
    expect(Math.abs((bytes[1] as number) - (bytes[0] as number))).toBeLessThanOrEqual(4 * 61);
  });

  it('keeps every key until its newest slice leaves the window, never less', async () => {
    const redis = await lim.client();
    const t = { now: 1_700_000_000_000 + 100 };
    const w = new RedisWindow({ redis, prefix: `t:${randomUUID()}:`, limit: 100, windowMs: 10_000, resolutionMs: 1_000, now: () => t.now });
    const needed = (): number => (Math.floor(t.now / 1_000) + 1) * 1_000 + 10_000 - t.now;
    // Calls across slices and within one (where the TTL is not set again).
    for (const step of [0, 300, 300, 900, 50, 2_000, 400]) {
      t.now += step;
      expect((await w.limit('k')).allowed).toBe(true);
      const ttl = await redis.pttl(w.keyOf('k'));
      // The key outlives its newest slice's calls (less the real ms the test takes: 200 ms allowed for a
      // loaded machine), and not by much more: an admission sets the TTL a slice ahead here (a window of
      // 10 slices: one eighth, at least one), kept while it lasts; the injected clock moves up to two
      // slices meanwhile while Redis's does not.
      expect(ttl + 200).toBeGreaterThanOrEqual(needed());
      expect(ttl).toBeLessThanOrEqual(needed() + 3_000);
    }
  });

  it('writes calls back into older, current and newer slices, and refunds an older slice once', async () => {
    const redis = await lim.client();
    const t = { now: 1_700_000_000_000 };
    const w = new RedisWindow({ redis, prefix: `w:${randomUUID()}:`, limit: 100, windowMs: 10_000, resolutionMs: 1_000, now: () => t.now });
    const key = w.keyOf('k');
    const s0 = t.now / 1_000;
    for (let i = 0; i < 3; i += 1) await w.limit('k');
    // Written back 1.5 s later: 2 permits two slices before, 1 in the newest (s0), 4 in a newer one.
    const run = (args: (string | number)[], keys: string[] = [key]): Promise<unknown> =>
      redis.eval(slicedWindow.source, keys.length, ...keys, ...args);
    t.now += 1_500;
    expect(await run(['w', 10_000, 1_000, t.now, t.now - 3_500, 2, t.now - 1_500, 1, t.now - 300, 4])).toEqual([3, 0, 0]);
    expect((await w.peek('k')).remaining).toBe(100 - 10);
    const fields = await slicedFields(redis, key);
    expect([fields['h'], fields['c'], fields[String(s0 % 65_536)], fields[String((s0 - 2) % 65_536)]]).toEqual([
      String(s0 + 1),
      '4',
      '4',
      '2',
    ]);
    // A refund of 2 from slice s0 (held in its own field now), once.
    const refund = (id: string): Promise<unknown> => run(['f', 10_000, 1_000, t.now, s0, 2, id], [key, `${key}:f`]);
    expect(await refund('x')).toBe('2');
    expect(await refund('x')).toBe('0');
    expect((await w.peek('k')).remaining).toBe(100 - 8);
    // Slice s0 - 2 leaves the window at its end plus 10 s: its 2 permits go, the others stay.
    t.now = (s0 - 1) * 1_000 + 10_000;
    expect((await w.peek('k')).remaining).toBe(100 - 6);
    // Then s0's (2 left) and, a slice later, s0 + 1's (4).
    t.now = (s0 + 1) * 1_000 + 10_000;
    expect((await w.peek('k')).remaining).toBe(100 - 4);
    t.now = (s0 + 2) * 1_000 + 10_000;
    expect((await w.peek('k')).remaining).toBe(100);
    expect((await w.limit('k')).remaining).toBe(99);
    expect((await slicedFields(redis, key))['n']).toBe('1');
  });

  it('finds the oldest permits for a refusal\u2019s wait, also a slice written back below where the last refusal looked', async () => {
    const redis = await lim.client();
    const t = { now: 1_700_000_000_000 };
    const w = new RedisWindow({ redis, prefix: `l:${randomUUID()}:`, limit: 10, windowMs: 10_000, resolutionMs: 1_000, now: () => t.now });
    const key = w.keyOf('k');
    const s0 = t.now / 1_000;
    await w.limit('k', { cost: 4 });
    t.now += 3_000;
    await w.limit('k', { cost: 5 });
    // 9 of 10 in use: a call of cost 2 waits for the 4 permits of slice s0, at its end plus the window.
    expect((await w.limit('k', { cost: 2 })).retryAfterMs).toBe((s0 + 1) * 1_000 + 10_000 - t.now);
    // A write-back of a call 2 s before s0: the next refusal waits for it (1 permit), not for s0.
    expect(await redis.eval(slicedWindow.source, 1, key, 'w', 10_000, 1_000, t.now, (s0 - 2) * 1_000, 1)).toEqual([1, 0, 0]);
    expect((await w.limit('k', { cost: 1 })).retryAfterMs).toBe((s0 - 1) * 1_000 + 10_000 - t.now);
  });

  it('sets the TTL again for a window lengthened past the end it was set for (update())', async () => {
    const redis = await lim.client();
    const key = `e:${randomUUID()}`;
    const t0 = 1_000_000;
    const decide = (t: number, windowMs: number): Promise<unknown> =>
      redis.eval(slicedWindow.source, 1, key, 'd', windowMs, 100, t, '', 0, '', 2, 1);
    // Window 1,000 ms in slices of 100: the TTL is set a slice past the current slice's end plus the
    // window (t0 + 1,200), and "e" says so.
    await decide(t0, 1_000);
    expect((await slicedFields(redis, key))['e']).toBe(String(t0 + 1_200));
    // The TTL the first call set is removed: a window of 1,200 ms needs the key until t0 + 1,300, past
    // "e": the next call must set the TTL again, for its own window (a slice past it: 1,320 ms from t0 + 80).
    await redis.persist(key);
    await decide(t0 + 80, 1_200);
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(1_320 - 200);
    expect(ttl).toBeLessThanOrEqual(1_320);
    expect((await slicedFields(redis, key))['e']).toBe(String(t0 + 1_400));
  });

  it('decides a batch that repeats keys as it decides the same calls one by one', async () => {
    const redis = await lim.client();
    const t = { now: 1_700_000_000_000 };
    const options = { redis, limit: 4, windowMs: 10_000, resolutionMs: 1_000, now: () => t.now };
    const batched = new RedisWindow({ ...options, prefix: `bb:${randomUUID()}:` });
    const single = new RedisWindow({ ...options, prefix: `bs:${randomUUID()}:` });
    const calls = ['a', 'a', 'b', 'a', 'a', 'a', 'b'].map((key, i) => ({ key, cost: i === 4 ? 2 : 1, id: `c${i}`, limit: 4 }));
    const outcome = (d: { allowed: boolean; remaining: number; retryAfterMs: number; resetAtMs: number }) => [
      d.allowed,
      d.remaining,
      d.retryAfterMs,
      d.resetAtMs,
    ];
    for (const step of [0, 1_500, 400, 9_000]) {
      t.now += step;
      const together = (await batched[decideBatch](calls)) as BatchDecision[];
      const apart: unknown[] = [];
      for (const call of calls) apart.push(outcome(await single.limit(call.key, { cost: call.cost })));
      expect(together.map(outcome)).toEqual(apart);
    }
    expect(await slicedFields(redis, batched.keyOf('a'))).toEqual(await slicedFields(redis, single.keyOf('a')));
  });

  it('blocks a key and peeks without writing', async () => {
    const redis = await lim.client();
    const t = { now: 1_700_000_000_000 };
    const w = new RedisWindow({
      redis,
      prefix: `b:${randomUUID()}:`,
      limit: 2,
      windowMs: 10_000,
      resolutionMs: 1_000,
      now: () => t.now,
      blockMs: 5_000,
    });
    expect((await w.limit('k')).allowed).toBe(true);
    expect((await w.limit('k')).allowed).toBe(true);
    const refused = await w.limit('k');
    // Refused for want of permits, with the penalty (5 s): its wait is the longer one, the calls' (their
    // slice ends 1 s after them, and they count a window more).
    expect([refused.allowed, refused.blocked, refused.retryAfterMs]).toEqual([false, true, 11_000]);
    t.now += 11_000;
    const blocked = await w.limit('k');
    expect([blocked.allowed, blocked.blocked]).toEqual([true, false]);
    const before = await slicedFields(redis, w.keyOf('k'));
    const peek = await w.peek('k');
    expect([peek.allowed, peek.remaining]).toEqual([true, 1]);
    expect(await slicedFields(redis, w.keyOf('k'))).toEqual(before);
    expect(await w.block('k', 3_000)).toBe(t.now + 3_000);
    expect(await w.limit('k')).toMatchObject({ allowed: false, blocked: true, retryAfterMs: 3_000 });
    expect(await w.block('k', 0)).toBe(0);
    expect((await w.limit('k')).allowed).toBe(true);
  });

  it('keeps a TTL on a key blocked past the end of its slices, refused while blocked', async () => {
    const redis = await lim.client();
    const t = { now: 1_700_000_000_000 };
    const w = new RedisWindow({
      redis,
      prefix: `bt:${randomUUID()}:`,
      limit: 1,
      windowMs: 1_000,
      resolutionMs: 100,
      now: () => t.now,
      blockMs: 5_000,
    });
    expect((await w.limit('k')).allowed).toBe(true);
    expect((await w.limit('k')).blocked).toBe(true);
    // Every slice has left the window (1.1 s after the call), the block has 3 s to go: the refusal
    // drops the slices, and the key must still expire when the block ends.
    t.now += 2_000;
    expect(await w.limit('k')).toMatchObject({ allowed: false, blocked: true, retryAfterMs: 3_000 });
    const ttl = await redis.pttl(w.keyOf('k'));
    // PTTL runs on Redis's own clock: the TTL was set 3,000 ms ahead a round trip ago.
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(3_000);
  });

  it('gives a refunded call back by its slice, once', async () => {
    const limiter = await lim.limiter();
    const admitted = await Promise.all([limiter.limit('k'), limiter.limit('k'), limiter.limit('k')]);
    expect(admitted.map((d) => [d.allowed, d.source])).toEqual([
      [true, 'redis'],
      [true, 'redis'],
      [true, 'redis'],
    ]);
    const id = admitted[0]?.id as string;
    expect(id).toMatch(/@\d+$/);
    expect(await limiter.refund('k', id)).toEqual({ refunded: true, permits: 1, pending: false });
    // Twice gives nothing: the local side no longer holds it, and Redis remembers the refund.
    expect(await limiter.refund('k', id)).toEqual({ refunded: false, permits: 0, pending: false });
    const again = await limiter.limit('k');
    expect([again.allowed, again.source, again.remaining]).toEqual([true, 'redis', 0]);
    expect((await limiter.limit('k')).allowed).toBe(false);
  });

  it('writes the calls admitted locally while Redis was down back into their slices', async () => {
    const limiter = await lim.limiter({ breaker: { timeoutMs: 100, resetTimeoutMs: 200 } });
    const written: number[] = [];
    limiter.on('reconciled', (r) => written.push(r.written));
    expect((await limiter.limit('k')).source).toBe('redis');
    await lim.server.kill();
    const local = [await limiter.limit('k'), await limiter.limit('k')];
    expect(local.map((d) => [d.allowed, d.source])).toEqual([
      [true, 'local'],
      [true, 'local'],
    ]);
    await lim.server.restart();
    await until(() => written.length > 0, 10_000, 'the write-back');
    await until(async () => (await limiter.peek('k')).source === 'redis', 10_000, 'Redis answers after the restart');
    // The restarted server was empty: it holds the two calls admitted locally, and the one Redis had
    // admitted before (lost with the data; the warm window re-seeds it).
    const held = await limiter.peek('k');
    expect([held.source, held.remaining, held.allowed]).toEqual(['redis', 0, false]);
  });

  it('gives nothing back for a call made before a reset(), on any instance', async () => {
    const prefix = `r:${randomUUID()}:`;
    const [a, b] = [await lim.limiter({ prefix }), await lim.limiter({ prefix })];
    const before = await a.limit('k');
    await a.reset('k');
    const after = [await a.limit('k'), await a.limit('k'), await a.limit('k')];
    expect(after.map((d) => [d.allowed, d.source])).toEqual([
      [true, 'redis'],
      [true, 'redis'],
      [true, 'redis'],
    ]);
    // The call from before the reset no longer counts: its refund must not free a permit of the three.
    await a.refund('k', before.id as string);
    const fourth = await b.limit('k');
    expect([fourth.allowed, fourth.source]).toEqual([false, 'redis']);
  });

  it('serves acquire(), which makes no id with slices, and refuses a caller\u2019s id there too', async () => {
    const limiter = await lim.limiter();
    const got = await Promise.all([limiter.acquire('k', { maxWaitMs: 0 }), limiter.acquire('k', { maxWaitMs: 0 })]);
    expect(got.map((d) => [d.allowed, d.source])).toEqual([
      [true, 'redis'],
      [true, 'redis'],
    ]);
    await expect(limiter.acquire('k', { maxWaitMs: 0, id: 'mine' })).rejects.toThrow(/Expected `id` to be absent with resolutionMs/);
  });

  it('decides each key against its own limit (a limit function)', async () => {
    const limiter = await lim.limiter({ limit: (key: string) => (key === 'small' ? 2 : 4) });
    const small = await Promise.all(Array.from({ length: 3 }, () => limiter.limit('small')));
    const large = await Promise.all(Array.from({ length: 5 }, () => limiter.limit('large')));
    expect(small.map((d) => [d.allowed, d.limit, d.source])).toEqual([
      [true, 2, 'redis'],
      [true, 2, 'redis'],
      [false, 2, 'redis'],
    ]);
    expect(large.map((d) => d.allowed)).toEqual([true, true, true, true, false]);
  });

  it('refuses what it cannot do, naming the option', async () => {
    const redis = await lim.client();
    const limiter = await lim.limiter();
    await expect(limiter.limit('k', { id: 'mine' })).rejects.toThrow(/Expected `id` to be absent with resolutionMs \(1000 ms\)/);
    const w = new RedisWindow({ redis, limit: 3, windowMs: 1_000, resolutionMs: 10 });
    await expect(w.limit('k', { id: 'mine' })).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_OPTION' });
    expect(() => new RedisWindow({ redis, limit: 3, windowMs: 1_000, resolutionMs: 0 })).toThrow(
      "Expected `resolutionMs` to be an integer from 1 to windowMs (1000), or 'auto', got `0` (number)",
    );
    expect(() => new RedisWindow({ redis, limit: 3, windowMs: 1_000, resolutionMs: 2_000 })).toThrow(
      "Expected `resolutionMs` to be an integer from 1 to windowMs (1000), or 'auto', got `2000` (number)",
    );
    expect(() => new ResilientLimiter({ redis, limit: 3, windowMs: 60_000, resolutionMs: 10 })).toThrow(
      'Expected `resolutionMs` to be at least windowMs / 4096 (15 for a window of 60000 ms: at most 4096 slices a window), got `10` (number)',
    );
    // 'auto': the exact log up to limit 100, then 60 slices a window.
    expect(new RedisWindow({ redis, limit: 100, windowMs: 60_000, resolutionMs: 'auto' }).options.resolutionMs).toBeUndefined();
    expect(new RedisWindow({ redis, limit: 101, windowMs: 60_000, resolutionMs: 'auto' }).options.resolutionMs).toBe(1_000);
    expect(new RedisWindow({ redis, limit: 101, windowMs: 30, resolutionMs: 'auto' }).options.resolutionMs).toBe(1);
    // A longer window must still be cut into at most 4096 slices: nothing changes.
    expect(() => limiter.update({ windowMs: 5_000_000 })).toThrow(
      'Expected `windowMs` to be from 1000 to 4096000 ms with resolutionMs 1000 (at most 4096 slices a window), got `5000000` (number)',
    );
    expect(limiter.stats().windowMs ?? 60_000).toBe(60_000);
    await waitReady(redis);
  });
});
