/**
 * Hot keys (`hotKeys`, lua/lease.lua) against a real redis-server: a hot key's calls are admitted on
 * permits leased ahead, with a Redis call per lease rather than per call; never more than the limit
 * in any window from several limiters (a brute check of every window, all on one injected clock so
 * that every call's time is known exactly); refusals start close to the limit; the unused permits go
 * back; refund, reset, caller ids, an open breaker, and the options it refuses.
 */
import { describe, expect, it } from 'vitest';
import { ResilientLimiter, type LimiterDecision } from '../../src/index.js';
import { leaseScript } from '../../src/redis/scripts/lease.js';
import { maxInAnyWindow, prng } from '../support/model.js';
import { useLimiters } from '../support/limiters.js';
import { until } from '../support/wait.js';

const lim = useLimiters({ limit: 100, windowMs: 60_000, hotKeys: true, local: { instances: 1 } });

/** Script calls Redis ran so far (EVALSHA and EVAL), from INFO commandstats. */
async function scriptCalls(): Promise<number> {
  const text = await lim.admin.info('commandstats');
  let n = 0;
  for (const m of text.matchAll(/cmdstat_(evalsha|eval):calls=(\d+)/g)) n += Number(m[2]);
  return n;
}

/** A key's leases in Redis, oldest first: [permits, score] (members `<permits>*<lease id>`). */
async function leases(redisKey: string): Promise<[string, number][]> {
  const flat = await lim.admin.zrange(redisKey, '0', '-1', 'WITHSCORES');
  const out: [string, number][] = [];
  for (let i = 0; i < flat.length; i += 2) {
    const member = flat[i] as string;
    if (!member.startsWith('*') && member.includes('*')) out.push([member.split('*')[0] as string, Number(flat[i + 1])]);
  }
  return out;
}

/** Four limiters sharing one key's window (limit 100 per 200 ms, leases of 20 ms), on one injected clock `t`. */
async function fourOnOneKey() {
  const t = { now: 1_700_000_000_000 };
  const prefix = `h:${crypto.randomUUID()}:`;
  const limit = 100;
  const windowMs = 200;
  const limiters = await Promise.all(
    Array.from({ length: 4 }, () =>
      lim.limiter({ prefix, limit, windowMs, clock: () => t.now, hotKeys: { validityMs: 20 }, local: { instances: 4 } }),
    ),
  );
  return { t, limiters, limit, windowMs };
}

describe('hotKeys', () => {
  it('takes a lease once a key is hot, scored at its end, and admits the next calls without Redis', async () => {
    const t = { now: 1_700_000_000_000 };
    const prefix = `h:${crypto.randomUUID()}:`;
    const l = await lim.limiter({ prefix, clock: () => t.now, hotKeys: { validityMs: 500 } });
    for (let i = 0; i < 4; i += 1) await l.limit('warm'); // both scripts loaded (a first EVALSHA is answered NOSCRIPT)
    const before = await scriptCalls();
    const first: LimiterDecision[] = [];
    for (let i = 0; i < 4; i += 1) first.push(await l.limit('k'));
    // Three calls one by one, then the fourth takes a lease of 16 (the first ask), itself included.
    expect(first.every((d) => d.allowed && d.source === 'redis')).toBe(true);
    expect((await scriptCalls()) - before).toBe(4);
    expect(await leases(`${prefix}{k}`)).toEqual([['16', t.now + 500]]);
    // 15 more calls on the lease: no Redis call, Redis's decision all the same.
    const onLease: LimiterDecision[] = [];
    for (let i = 0; i < 15; i += 1) onLease.push(await l.limit('k'));
    expect(onLease.every((d) => d.allowed && d.source === 'redis' && d.reason === 'decided')).toBe(true);
    expect(onLease.at(-1)?.remaining).toBe(100 - 3 - 16);
    expect((await scriptCalls()) - before).toBe(4);
  });

  it('counts the leased permits for every instance, and gives back the unused part at close()', async () => {
    const t = { now: 1_700_000_000_000 };
    const prefix = `h:${crypto.randomUUID()}:`;
    const a = await lim.limiter({ prefix, clock: () => t.now, hotKeys: { validityMs: 1_000 } });
    const b = await lim.limiter({ prefix, clock: () => t.now, hotKeys: false });
    for (let i = 0; i < 6; i += 1) expect((await a.limit('k')).allowed).toBe(true);
    // Three alone, a lease of 16 from the fourth: Redis counts 19 while 6 are used.
    expect((await b.peek('k')).remaining).toBe(100 - 19);
    await a.close();
    expect((await b.peek('k')).remaining).toBe(100 - 6);
    // The lease's used part stays scored at its end (t + 1 s): it leaves a window after that.
    t.now += 60_000 + 999;
    expect((await b.peek('k')).remaining).toBe(100 - 3);
    t.now += 1;
    expect((await b.peek('k')).remaining).toBe(100);
  });

  it('ends a lease at its validity, gives back what is left, and asks the next for what the last one used', async () => {
    const t = { now: 1_700_000_000_000 };
    const prefix = `h:${crypto.randomUUID()}:`;
    const a = await lim.limiter({ prefix, clock: () => t.now, hotKeys: { validityMs: 100 } });
    const t0 = t.now;
    for (let i = 0; i < 10; i += 1) await a.limit('k');
    t.now += 100; // the lease (of 16, 7 used) has ended
    expect((await a.limit('k')).allowed).toBe(true);
    // The first lease holds the 7 it used; the next asked for 7 × 1.25 a period (rounded up), its call included.
    await until(async () => (await leases(`${prefix}{k}`))[0]?.[0] === '7', 2_000, 'the give-back');
    expect(await leases(`${prefix}{k}`)).toEqual([
      ['7', t0 + 100],
      ['9', t0 + 200],
    ]);
  });

  it('never admits more than the limit in any window from four limiters on one key, and refuses only near it', async () => {
    const { t, limiters, limit, windowMs } = await fourOnOneKey();
    const admitted: { at: number; cost: number }[] = [];
    let firstRefusalUsed: number | undefined;
    const random = prng(7);
    // Rounds of 3 calls by limiters drawn at random, the clock still within a round and 1 ms on
    // between rounds: every call's time is its round's, on the clock Redis decides with too. Each
    // limiter calls about once a ms, so a lease's calls spread over its validity (a lease counted from
    // when it was taken, not to its end, would free its permits while its later calls are in the window).
    for (let round = 0; round < 2_000; round += 1) {
      const decisions = await Promise.all(
        Array.from({ length: 3 }, () => (limiters[Math.floor(random() * 4)] as ResilientLimiter).limit('hot')),
      );
      for (const d of decisions) if (d.allowed) admitted.push({ at: t.now, cost: 1 });
      if (firstRefusalUsed === undefined && decisions.some((d) => !d.allowed)) {
        firstRefusalUsed = admitted.filter((c) => c.at > t.now - windowMs).length;
      }
      t.now += 1;
    }
    expect(maxInAnyWindow(admitted, windowMs)).toBeLessThanOrEqual(limit);
    // Refusals start near the limit: leased permits left unused by the others are few.
    expect(firstRefusalUsed).toBeGreaterThanOrEqual(limit * 0.9);
    expect(maxInAnyWindow(admitted, windowMs)).toBeGreaterThanOrEqual(limit * 0.9);
  });

  it('never admits more than the limit with bursts and gaps longer than a lease: its end, its give-back', async () => {
    // Steady traffic keeps the key full and leases at a permit or two, used up at once: this one
    // leaves keys idle past a lease's validity (then its unused permits go back) and bursts on them.
    for (const seed of [1, 2, 3]) {
      const { t, limiters, limit, windowMs } = await fourOnOneKey();
      const admitted: { at: number; cost: number }[] = [];
      const random = prng(seed);
      for (let round = 0; round < 2_000; round += 1) {
        const n = random() < 0.05 ? 12 : random() < 0.5 ? 0 : 1 + Math.floor(random() * 3);
        const decisions = await Promise.all(
          Array.from({ length: n }, () => (limiters[Math.floor(random() * 4)] as ResilientLimiter).limit('hot')),
        );
        for (const d of decisions) if (d.allowed) admitted.push({ at: t.now, cost: 1 });
        t.now += random() < 0.02 ? 25 + Math.floor(random() * 50) : 1;
      }
      expect(maxInAnyWindow(admitted, windowMs)).toBeLessThanOrEqual(limit);
      expect(maxInAnyWindow(admitted, windowMs)).toBeGreaterThanOrEqual(limit * 0.9);
    }
  });

  it('grants a take sent twice once (a client that re-sends after a reconnect)', async () => {
    const key = `h:${crypto.randomUUID()}:{k}`;
    const take = (): Promise<unknown> =>
      lim.admin.eval(leaseScript.source, 2, key, `${key}:l:L1`, 't', 60_000, 1_700_000_000_000, 'L1', '', 0, 100, 1, 16, 1_000, 2);
    expect(await take()).toBe('1700000000000,0,1,16,0,1700000061000,0,16');
    // Sent again: the same grant, flagged as run before, nothing counted twice.
    expect(await take()).toBe('1700000000000,0,1,16,0,1700000061000,1,16');
    expect(await lim.admin.zscore(key, '*')).toBe('-15');
    expect(await leases(key)).toEqual([['16', 1_700_000_001_000]]);
  });

  it('ends a lease at its validity on a real clock without another call, giving back what is left', async () => {
    const prefix = `h:${crypto.randomUUID()}:`;
    const l = await lim.limiter({ prefix, hotKeys: { validityMs: 50 } });
    for (let i = 0; i < 6; i += 1) await l.limit('k');
    expect((await leases(`${prefix}{k}`))[0]?.[0]).toBe('16');
    // Its timer fires 50 ms after the lease came; the bound is for a loaded machine, not the wait.
    await until(async () => (await leases(`${prefix}{k}`))[0]?.[0] === '3', 5_000, 'the lease ended by its timer');
  });

  it('refuses an update() to a window shorter than a lease', async () => {
    const l = await lim.limiter({ hotKeys: { validityMs: 1_000 } });
    expect(() => l.update({ windowMs: 500 })).toThrow(/windowMs.*at least hotKeys\.validityMs \(1000 ms\)/);
  });

  it('makes a Redis call per lease, not per call, on a key with room', async () => {
    const t = { now: 1_700_000_000_000 };
    const l = await lim.limiter({ limit: 1_000_000, clock: () => t.now, hotKeys: { validityMs: 1_000 } });
    const before = await scriptCalls();
    for (let round = 0; round < 100; round += 1) {
      const decisions = await Promise.all(Array.from({ length: 50 }, () => l.limit('hot')));
      expect(decisions.every((d) => d.allowed)).toBe(true);
      t.now += 1;
    }
    // 5,000 calls: the first few alone, then leases of 16, 64, 256, 1,024, 4,096 (×4 at most each).
    expect((await scriptCalls()) - before).toBeLessThan(50);
  });

  it('answers every call of a hot key from Redis with many callers at once: a lease settles in the order Redis decided it', async () => {
    // The warm window checks that Redis holds this instance's calls (it answers 'reconciling' when it
    // does not): a lease's reply read after a batch Redis decided later (and after the calls on the
    // lease) would make Redis look as if it had lost calls. On Redis's clock, 16 callers, a fresh key.
    const l = await lim.limiter({ limit: 1_000_000, hotKeys: true, local: { instances: 8 } });
    const reasons = new Set<string>();
    for (let attempt = 0; attempt < 8; attempt += 1) {
      // Scripts flushed: the first calls are answered NOSCRIPT and sent again, which moves replies about.
      await lim.admin.script('FLUSH');
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          for (let i = 0; i < 100; i += 1) {
            const d = await l.limit(`fresh:${attempt}`);
            reasons.add(`${d.source}/${d.reason}/${d.allowed}`);
          }
        }),
      );
    }
    expect([...reasons]).toEqual(['redis/decided/true']);
  });

  it('gives a refunded call back to its lease, without Redis', async () => {
    const t = { now: 1_700_000_000_000 };
    const prefix = `h:${crypto.randomUUID()}:`;
    const a = await lim.limiter({ prefix, clock: () => t.now });
    const b = await lim.limiter({ prefix, clock: () => t.now, hotKeys: false });
    const ds: LimiterDecision[] = [];
    for (let i = 0; i < 6; i += 1) ds.push(await a.limit('k'));
    const before = await scriptCalls();
    const r = await a.refund('k', ds[5]?.id as string);
    expect(r).toEqual({ refunded: true, permits: 1, pending: false });
    expect(await scriptCalls()).toBe(before);
    expect((await a.refund('k', ds[5]?.id as string)).refunded).toBe(false);
    await a.close();
    expect((await b.peek('k')).remaining).toBe(100 - 5);
  });

  it('gives nothing back for a call of a lease that ended, also while Redis cannot answer: Redis counts it in the lease', async () => {
    const t = { now: 1_700_000_000_000 };
    const prefix = `h:${crypto.randomUUID()}:`;
    const a = await lim.limiter({ prefix, clock: () => t.now, hotKeys: { validityMs: 100 } });
    const ds: LimiterDecision[] = [];
    for (let i = 0; i < 6; i += 1) ds.push(await a.limit('k'));
    t.now += 100;
    await a.limit('k'); // ends the lease (its 3 calls stay in it), and asks Redis
    a.forceOpen();
    expect(await a.refund('k', ds[5]?.id as string)).toEqual({ refunded: false, permits: 0, pending: false });
    a.forceClose();
    expect(await a.refund('k', ds[4]?.id as string)).toEqual({ refunded: false, permits: 0, pending: false });
    // A call made alone (before the lease) is Redis's to refund, by its id.
    expect(await a.refund('k', ds[0]?.id as string)).toEqual({ refunded: true, permits: 1, pending: false });
  });

  it('decides calls with a caller id one by one, and admits on a held lease while the breaker is open', async () => {
    const t = { now: 1_700_000_000_000 };
    const l = await lim.limiter({ clock: () => t.now });
    for (let i = 0; i < 4; i += 1) await l.limit('k');
    const before = await scriptCalls();
    await l.limit('k', { id: 'caller-1' });
    expect(await scriptCalls()).toBe(before + 1);
    l.forceOpen();
    const d = await l.limit('k');
    expect(d).toMatchObject({ allowed: true, source: 'redis', reason: 'decided' });
    l.forceClose();
  });

  it('forgets the lease at reset() and block()', async () => {
    const t = { now: 1_700_000_000_000 };
    const l = await lim.limiter({ clock: () => t.now });
    for (let i = 0; i < 5; i += 1) await l.limit('k');
    await l.reset('k');
    const before = await scriptCalls();
    await l.limit('k');
    expect(await scriptCalls()).toBe(before + 1); // no lease left: a Redis call
    for (let i = 0; i < 5; i += 1) await l.limit('k');
    await l.block('k', 1_000);
    expect(await l.limit('k')).toMatchObject({ allowed: false });
  });

  it('refuses what it cannot do, naming the option', () => {
    const redis = lim.admin;
    expect(() => new ResilientLimiter({ redis, limit: 10, windowMs: 1_000, hotKeys: true, resolutionMs: 100 })).toThrow(
      /hotKeys.*absent with resolutionMs \(100 ms\)/,
    );
    expect(() => new ResilientLimiter({ redis, limit: 10, windowMs: 1_000, hotKeys: 'yes' as never })).toThrow(
      /hotKeys.*true, false or an object/,
    );
    expect(() => new ResilientLimiter({ redis, limit: 10, windowMs: 1_000, hotKeys: { validityMs: 2_000 } })).toThrow(
      /hotKeys\.validityMs/,
    );
    expect(() => new ResilientLimiter({ redis, limit: 10, windowMs: 1_000, hotKeys: { ttl: 1 } as never })).toThrow(/hotKeys\.ttl/);
  });
});
