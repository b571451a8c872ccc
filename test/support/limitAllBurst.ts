import { expect } from 'vitest';
import type { ResilientLimiter } from '../../src/index.js';
import { prng } from './model.js';

/**
 * 600 `limitAll()` calls at once, round robin over `limiters` (one prefix): 5 users of limit 20 and a
 * global limit of 70, each a 60 s window. Expects Redis to decide them all, exactly 70 admitted (5 × 20
 * > 70: the global limit binds), and every admitted call, and no refused one, to have consumed its
 * user's limit too. `used(key)`: the permits a window of 60 s holds, read from Redis.
 */
export async function expectGlobalLimitBinds(limiters: readonly ResilientLimiter[], used: (key: string) => Promise<number>): Promise<void> {
  const random = prng(3);
  const calls = Array.from({ length: 600 }, (_, i) => {
    const user = `user:${Math.floor(random() * 5)}`;
    return (limiters[i % limiters.length] as ResilientLimiter).limitAll([
      { key: user, limit: 20, windowMs: 60_000 },
      { key: 'global', limit: 70, windowMs: 60_000 },
    ]);
  });
  const decisions = await Promise.all(calls);
  expect(new Set(decisions.map((d) => d.source))).toEqual(new Set(['redis']));
  expect(decisions.filter((d) => d.allowed).length).toBe(70);
  expect(await used('global')).toBe(70);
  let users = 0;
  for (let u = 0; u < 5; u++) {
    const n = await used(`user:${u}`);
    expect(n).toBeLessThanOrEqual(20);
    users += n;
  }
  expect(users).toBe(70);
}
