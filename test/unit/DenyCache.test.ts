import { describe, expect, it } from 'vitest';
import { DenyCache } from '../../src/path/DenyCache.js';

describe('DenyCache', () => {
  it('rejects a call of at least the denied cost until `until`, with what Redis said', () => {
    const cache = new DenyCache(10);
    cache.deny('k', { until: 1000, cost: 3, remaining: 1, resetAtMs: 5000, limit: 10 });
    const denial = { until: 1000, cost: 3, remaining: 1, resetAtMs: 5000, limit: 10 };
    expect(cache.check('k', 3, 10, 0)).toMatchObject(denial);
    expect(cache.check('k', 4, 10, 500)).toMatchObject(denial);
    expect(cache.check('k', 3, 10, 999)).toMatchObject(denial);
  });

  it('lets one call a second through to Redis while Redis answers (a probe), never for a block Redis never took', () => {
    const clock = { t: 0, now: () => clock.t };
    let answering = true;
    const cache = new DenyCache(10, clock, () => answering);
    cache.deny('k', { until: 60_000, cost: 1, remaining: 0, resetAtMs: 60_000, limit: 10 });
    cache.deny('b', { until: 60_000, cost: 1, remaining: 0, resetAtMs: 60_000, limit: 0 });
    cache.hold('b'); // a block made while Redis could not take it
    clock.t = 999;
    expect(cache.check('k', 1, 10)).toBeDefined();
    clock.t = 1000;
    expect(cache.check('k', 1, 10)).toBeUndefined(); // the probe: this call goes to Redis
    expect(cache.check('k', 1, 10)).toBeDefined(); // the next second's
    expect(cache.check('b', 1, 10)).toBeDefined();
    clock.t = 2000;
    answering = false; // while Redis cannot answer, a probe would go to the fallback: none
    expect(cache.check('k', 1, 10)).toBeDefined();
    answering = true;
    expect(cache.check('k', 1, 10)).toBeUndefined();
    clock.t = 30_000;
    expect(cache.check('b', 1, 10)).toBeDefined();
  });

  it('keeps blocks through clear(), a refund (delete) and a Redis admission of a block Redis never took; lift() ends them', () => {
    const cache = new DenyCache(10);
    cache.deny('denied', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    cache.deny('blocked', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 0 });
    cache.deny('held', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 0 });
    cache.hold('held');
    cache.clear();
    expect([cache.check('denied', 1, 10, 0), cache.check('blocked', 1, 10, 0)]).toEqual([undefined, expect.objectContaining({ limit: 0 })]);
    cache.delete('blocked');
    expect(cache.check('blocked', 1, 10, 0)).toBeDefined();
    cache.admitted('held');
    expect(cache.check('held', 1, 10, 0)).toBeDefined();
    cache.admitted('blocked'); // Redis admitted a call of it: another instance lifted it
    expect(cache.check('blocked', 1, 10, 0)).toBeUndefined();
    cache.lift('held');
    expect(cache.check('held', 1, 10, 0)).toBeUndefined();
  });

  it('lets a smaller cost through and keeps the denial for larger ones', () => {
    const cache = new DenyCache(10);
    cache.deny('k', { until: 1000, cost: 3, remaining: 2, resetAtMs: 5000, limit: 10 });
    expect(cache.check('k', 2, 10, 500)).toBeUndefined();
    expect(cache.check('k', 1, 10, 500)).toBeUndefined();
    expect(cache.check('k', 3, 10, 500)).toMatchObject({ cost: 3 });
    expect(cache.size).toBe(1);
  });

  it('forgets a denial once `until` is reached', () => {
    const cache = new DenyCache(10);
    cache.deny('k', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    expect(cache.check('k', 1, 10, 1000)).toBeUndefined();
    expect(cache.size).toBe(0);
    // Forgotten, not just skipped: an earlier clock does not bring it back.
    expect(cache.check('k', 1, 10, 0)).toBeUndefined();
  });

  it('answers only for the denied key', () => {
    const cache = new DenyCache(10);
    cache.deny('a', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    expect(cache.check('b', 1, 10, 0)).toBeUndefined();
    expect(cache.check('A', 1, 10, 0)).toBeUndefined();
  });

  it('replaces an earlier denial of the same key', () => {
    const cache = new DenyCache(10);
    cache.deny('k', { until: 1000, cost: 5, remaining: 0, resetAtMs: 5000, limit: 10 });
    cache.deny('k', { until: 2000, cost: 2, remaining: 1, resetAtMs: 6000, limit: 10 });
    expect(cache.check('k', 2, 10, 1500)).toMatchObject({ until: 2000, cost: 2, remaining: 1, resetAtMs: 6000, limit: 10 });
    expect(cache.size).toBe(1);
  });

  it('keeps at most maxKeys keys, forgetting the least recently used', () => {
    const cache = new DenyCache(2);
    cache.deny('a', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    cache.deny('b', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    expect(cache.check('a', 1, 10, 0)).toBeDefined(); // a is now the most recently used
    cache.deny('c', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    expect(cache.size).toBe(2);
    expect(cache.check('b', 1, 10, 0)).toBeUndefined();
    expect(cache.check('a', 1, 10, 0)).toBeDefined();
    expect(cache.check('c', 1, 10, 0)).toBeDefined();
    for (let i = 0; i < 1000; i++) cache.deny(`k${i}`, { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    expect(cache.size).toBe(2);
  });

  it('forgets everything on clear', () => {
    const cache = new DenyCache(10);
    cache.deny('a', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    cache.deny('b', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    cache.clear();
    expect(cache.size).toBe(0);
    expect(cache.check('a', 1, 10, 0)).toBeUndefined();
  });

  it("lets a call under another limit through (a limit function changed the key's), but a block (limit 0) holds under any", () => {
    const cache = new DenyCache(10);
    cache.deny('k', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 10 });
    expect(cache.check('k', 1, 10, 0)).toBeDefined();
    expect(cache.check('k', 1, 20, 0)).toBeUndefined();
    expect(cache.check('k', 1, 10, 0)).toBeUndefined(); // forgotten: it was made under another limit
    cache.deny('b', { until: 1000, cost: 1, remaining: 0, resetAtMs: 5000, limit: 0 });
    expect(cache.check('b', 1, 20, 0)).toBeDefined();
    expect(cache.check('b', 7, 3, 999)).toBeDefined();
  });
});
