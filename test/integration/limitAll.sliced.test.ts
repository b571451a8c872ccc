/**
 * limitAll() on a limiter that counts by slices (`resolutionMs`): each window a hash of slices cut as
 * limit()'s is (lua/sliced-window.lua, op "a"), all or nothing, on a real Redis — against the slice
 * rule's model, under concurrency, at a large limit (the key stays small), with a caller's id (refused),
 * and when Redis cannot answer (local windows, written back into the slices).
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ErrorCode, type ResilientLimiter, type ResilientLimiterOptions } from '../../src/index.js';
import { windowModel } from '../../src/redis/models/choose.js';
import { slicedWindow } from '../../src/redis/scripts/slicedWindow.js';
import { expectGlobalLimitBinds } from '../support/limitAllBurst.js';
import { useLimiters } from '../support/limiters.js';
import { prng, SliceModel } from '../support/model.js';
import { slicedFields } from '../support/slicedHash.js';

/** limit()'s window of 6 s in slices of 100 ms: 60 slices a window, for limitAll()'s windows too. */
const lim = useLimiters({ limit: 1000, windowMs: 6_000, resolutionMs: 100, local: { instances: 1 } });
const prefixes = new Map<ResilientLimiter, string>();

async function limiter(options: Partial<ResilientLimiterOptions> = {}): Promise<ResilientLimiter> {
  const prefix = options.prefix ?? `alls:${randomUUID()}:`;
  const l = await lim.limiter({ ...options, prefix });
  prefixes.set(l, prefix);
  return l;
}

/** A limitAll() window's Redis key and slice length on limiter `l` (60 slices a window). */
function windowOf(l: ResilientLimiter, key: string, windowMs: number) {
  const { redisKey, model } = windowModel({ windowMs: 6_000, resolutionMs: 100 }).allWindow(prefixes.get(l) as string, key, windowMs);
  return { redisKey, resolutionMs: (model as { resolutionMs?: number }).resolutionMs };
}

/** Permits counted in a limitAll() window's hash, read from Redis (the head's n). */
async function used(l: ResilientLimiter, key: string, windowMs: number): Promise<number> {
  return Number((await slicedFields(lim.admin, windowOf(l, key, windowMs).redisKey))['n'] ?? 0);
}

describe('limitAll() with resolutionMs', () => {
  it('cuts each window in as many slices as limit()’s, in keys of its own', async () => {
    const l = await limiter();
    expect(windowOf(l, 'u', 6_000).resolutionMs).toBe(100);
    expect(windowOf(l, 'u', 10_000).resolutionMs).toBe(167);
    expect(windowOf(l, 'u', 50).resolutionMs).toBe(1);
    expect(windowOf(l, 'u', 10_000).redisKey).toMatch(/:w10000:s167$/);
    expect((await l.limitAll([{ key: 'u', limit: 2, windowMs: 10_000 }])).allowed).toBe(true);
    expect(await lim.admin.type(windowOf(l, 'u', 10_000).redisKey)).toBe('hash');
    expect(await used(l, 'u', 10_000)).toBe(1);
    // limit()'s own window is another key.
    expect((await l.limit('u')).remaining).toBe(999);
  });

  it('matches a model of all-or-nothing over windows counted by slices, call by call', async () => {
    let t = 1_700_000_000_000;
    // A test of Redis's decisions: a deadline a loaded machine cannot miss.
    const l = await limiter({ clock: () => t, breaker: { timeoutMs: 2000 } });
    const random = prng(11);
    const specs = [
      { key: 'u1', limit: 4, windowMs: 6_000 },
      { key: 'u2', limit: 3, windowMs: 10_000 },
      { key: 'route', limit: 6, windowMs: 4_000 },
      { key: 'global', limit: 8, windowMs: 8_000 },
    ];
    const models = new Map(
      specs.map((s) => [
        `${s.key}/${s.windowMs}`,
        new SliceModel(s.limit, s.windowMs, windowOf(l, s.key, s.windowMs).resolutionMs as number),
      ]),
    );
    let admitted = 0;
    let refused = 0;
    for (let i = 0; i < 300; i++) {
      t += Math.floor(random() * 500);
      const chosen = specs.filter(() => random() < 0.6);
      if (chosen.length === 0) continue;
      const items = chosen.map((s) => ({ ...s, cost: random() < 0.25 ? 2 : 1 }));
      const got = await l.limitAll(items);
      const windows = items.map((item) => models.get(`${item.key}/${item.windowMs}`) as SliceModel);
      const views = items.map((item, j) => (windows[j] as SliceModel).view(t, item.cost));
      const all = views.every((v) => v.fits);
      expect({ i, allowed: got.allowed, sources: got.decisions.map((d) => d.source) }).toEqual({
        i,
        allowed: all,
        sources: items.map(() => 'redis'),
      });
      expect({ i, fits: got.decisions.map((d) => d.allowed) }).toEqual({ i, fits: views.map((v) => v.fits) });
      if (all) for (const [j, item] of items.entries()) (windows[j] as SliceModel).decide(t, item.cost);
      items.forEach((item, j) => {
        const w = windows[j] as SliceModel;
        expect({ i, j, remaining: got.decisions[j]?.remaining }).toEqual({ i, j, remaining: Math.max(item.limit - w.used(t), 0) });
        if (!views[j]?.fits) expect({ i, j, retry: got.decisions[j]?.retryAfterMs }).toEqual({ i, j, retry: views[j]?.retryAfterMs });
      });
      if (all) admitted += 1;
      else refused += 1;
    }
    // Both sides were exercised.
    expect(admitted).toBeGreaterThan(50);
    expect(refused).toBeGreaterThan(50);
  });

  it('never lets any limit exceed under concurrent calls from several limiters', async () => {
    const prefix = `alls:${randomUUID()}:`;
    // A burst of 600 script calls at once: a deadline that lets Redis decide them all.
    const ls = await Promise.all([0, 1, 2].map(() => limiter({ prefix, breaker: { timeoutMs: 5000 }, slowCallMs: 5000 })));
    await expectGlobalLimitBinds(ls, (key) => used(ls[0] as ResilientLimiter, key, 60_000));
  });

  it('counts a repeated key once per occurrence, and tells the wait of the one that does not fit', async () => {
    let t = 1_700_000_000_000;
    const l = await limiter({ clock: () => t, breaker: { timeoutMs: 2000 } });
    expect((await l.limitAll([{ key: 'k', limit: 4, windowMs: 6_000 }])).allowed).toBe(true);
    t += 1_000;
    const twice = [
      { key: 'k', limit: 4, windowMs: 6_000, cost: 2 },
      { key: 'k', limit: 4, windowMs: 6_000, cost: 2 },
    ];
    // 1 used: the first occurrence fits (3 of 4), the second not (5): nothing is taken.
    const d = await l.limitAll(twice);
    expect(d.decisions.map((x) => x.allowed)).toEqual([true, false]);
    // The second waits for the call of 1 s ago to leave: the end of its slice plus the window.
    expect(d.decisions[1]?.retryAfterMs).toBe(100 + 6_000 - 1_000);
    expect(await used(l, 'k', 6_000)).toBe(1);
    t += 5_100;
    expect((await l.limitAll(twice)).allowed).toBe(true);
    expect(await used(l, 'k', 6_000)).toBe(4);
  });

  it('tells a wait, never 0, to a call that can never fit, and gives back nothing when an argument is bad', async () => {
    const t = 1_700_000_000_000;
    const l = await limiter({ clock: () => t, breaker: { timeoutMs: 2000 } });
    // 2 + 2 of a limit of 3 on one key: never fits. Told to wait until every permit counted now has
    // left (the current slice's end plus the window), as the exact log tells a window.
    const never = await l.limitAll([
      { key: 'k', limit: 3, windowMs: 6_000, cost: 2 },
      { key: 'k', limit: 3, windowMs: 6_000, cost: 2 },
    ]);
    expect([never.allowed, never.retryAfterMs]).toEqual([false, 100 + 6_000]);
    // Op "g" checks every key's arguments before it gives anything back.
    expect((await l.limitAll([{ key: 'g', limit: 3, windowMs: 6_000, cost: 3 }])).allowed).toBe(true);
    const g = windowOf(l, 'g', 6_000).redisKey;
    const give = (cost: number) =>
      lim.admin.eval(slicedWindow.source, 2, g, `${g}x`, 'g', '', '', t, 6_000, 100, t / 100, 3, 6_000, 100, t / 100, cost);
    await expect(give(0)).rejects.toThrow(/slice and cost must be integers/);
    expect(await used(l, 'g', 6_000)).toBe(3);
    expect(await give(3)).toBe(`${t},0,1`);
    expect(await used(l, 'g', 6_000)).toBe(0);
  });

  it('keeps a window of limit 100,000 in a few hundred bytes, full', async () => {
    let t = 1_700_000_000_000;
    const l = await limiter({ clock: () => t, breaker: { timeoutMs: 2000 } });
    const item = { key: 'big', limit: 100_000, windowMs: 6_000 };
    // 60 slices of 1,666 or 1,667 permits: the window full.
    for (let s = 0; s < 60; s += 1) {
      expect((await l.limitAll([{ ...item, cost: s < 40 ? 1_667 : 1_666 }])).allowed).toBe(true);
      t += 100;
    }
    t -= 100;
    expect(await used(l, 'big', 6_000)).toBe(100_000);
    const refused = await l.limitAll([item]);
    expect(refused.allowed).toBe(false);
    // The oldest slice (1,667 permits) leaves at its end plus the window: 100 ms from the newest slice's start.
    expect(refused.retryAfterMs).toBe(100 - 59 * 100 + 6_000);
    expect(await lim.admin.memory('USAGE', windowOf(l, 'big', 6_000).redisKey)).toBeLessThan(1_000);
  });

  it('refuses a caller’s id, naming the option', async () => {
    const l = await limiter();
    const error = await l.limitAll([{ key: 'k', limit: 5, windowMs: 6_000 }], { id: 'req-1' }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: ErrorCode.INVALID_OPTION });
    expect((error as Error).message).toMatch(/id.*resolutionMs/);
  });

  it('answers from the local windows while the breaker is open, and writes those calls back into the slices', async () => {
    const l = await limiter();
    l.forceOpen();
    const items = [
      { key: 'u', limit: 2, windowMs: 60_000 },
      { key: 'g', limit: 3, windowMs: 60_000 },
    ];
    const decisions = [];
    for (let i = 0; i < 3; i++) decisions.push(await l.limitAll(items));
    expect(decisions.map((d) => [d.allowed, d.source])).toEqual([
      [true, 'local'],
      [true, 'local'],
      [false, 'local'],
    ]);
    l.forceClose();
    await l.reconcile();
    expect(await used(l, 'u', 60_000)).toBe(2);
    expect(await used(l, 'g', 60_000)).toBe(2);
    // Back on Redis, which now knows them: g has one permit left, u none.
    const after = await l.limitAll(items);
    expect([after.allowed, after.source, after.decisions.map((d) => d.allowed)]).toEqual([false, 'redis', [false, true]]);
    expect((await l.limitAll([{ key: 'g', limit: 3, windowMs: 60_000 }])).allowed).toBe(true);
    expect(await used(l, 'g', 60_000)).toBe(3);
  });

  it('answers locally on this instance’s part of a window as Redis last told it, holding a call as long as its slice counts', async () => {
    // Slices of 100 ms; the calls are made 30 ms into one, so Redis counts them 70 ms past their own time plus the window.
    let t = 1_700_000_000_030;
    const shared = { prefix: `alls:${randomUUID()}:`, clock: () => t, local: { instances: 2 }, breaker: { timeoutMs: 2000 } };
    const heavy = await limiter(shared);
    const light = await limiter(shared);
    const items = [{ key: 'k', limit: 10, windowMs: 6_000 }];
    for (let i = 0; i < 8; i++) expect((await heavy.limitAll(items)).source).toBe('redis');
    for (let i = 0; i < 2; i++) expect((await light.limitAll(items)).allowed).toBe(true);
    // The window is full in Redis. Its share is 5, but the light instance's part is what it had, 2:
    // beside the heavy one's 8 (which may still be deciding in Redis), it admits nothing more.
    light.forceOpen();
    expect(await light.limitAll(items)).toMatchObject({ allowed: false, source: 'local' });
    // Past the calls' own time plus the window, and past the part (a window after Redis told it), the
    // light instance answers on its share; its two calls count until their slice's end plus the window, as in Redis.
    t += 6_000;
    const admitted = async () => {
      let n = 0;
      while ((await light.limitAll(items)).allowed) n += 1;
      return n;
    };
    expect(await admitted()).toBe(3);
    t += 70;
    expect(await admitted()).toBe(2);
  });
});
