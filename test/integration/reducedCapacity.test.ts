/**
 * `reducedCapacity` on decisions, against a real Redis: true only on a refusal that this instance's
 * reduced capacity caused while Redis did not decide (the local window's share refused a call the
 * whole limit had room for, a penalty for such a refusal, mode 'fail-closed'); false on a refusal of
 * the quota (Redis's, the deny cache's, a blocked key's, the local window's when the whole limit is
 * used up as far as it knows). Time is an injected clock (`clock`: Redis decides on it too) that never
 * moves, so every wait is exact and nothing sleeps. `forceOpen()` stands for the outage: the breaker
 * is open, Redis is not called (reason 'breaker-open').
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ResilientLimiterOptions } from '../../src/index.js';
import { run, useLimiters } from '../support/limiters.js';

const T0 = 1_800_000_000_000;
const WINDOW_MS = 60_000;

// Two instances share a limit of 4: each one's local share is 2.
// A steady clock that never moves either: the deny cache's probe (once a second) never comes.
const { limiter } = useLimiters({ limit: 4, windowMs: WINDOW_MS, local: { instances: 2 }, clock: () => T0, perf: { now: () => 1_000 } });

/** What the test reads of a decision: whether it admitted, where and why, and the flag. */
function seen(d: { allowed: boolean; source: string; reason?: string; limit: number; reducedCapacity?: boolean }) {
  return [d.allowed, d.source, d.reason, d.limit, d.reducedCapacity];
}

describe('reducedCapacity on the decisions of limit()', () => {
  it("flags the local window's refusal of a call the whole limit has room for, while Redis does not decide", async () => {
    const l = await limiter();
    l.forceOpen();
    expect((await run(l, 'k', 3)).map(seen)).toEqual([
      [true, 'local', 'breaker-open', 2, false],
      [true, 'local', 'breaker-open', 2, false],
      // 2 of the 4 are used, as far as this instance knows: its share, not the limit, refused.
      [false, 'local', 'breaker-open', 2, true],
    ]);
    expect(await l.limit('k')).toMatchObject({ allowed: false, retryAfterMs: WINDOW_MS, reducedCapacity: true });
    // peek() and limitAll() say it too; a limit of limitAll() with room left does not.
    expect(await l.peek('k')).toMatchObject({ allowed: false, reducedCapacity: true });
    const all = await l.limitAll([
      { key: 'a', limit: 2, windowMs: WINDOW_MS, cost: 2 },
      { key: 'b', limit: 10, windowMs: WINDOW_MS },
    ]);
    expect([all.allowed, all.reducedCapacity, all.decisions.map((d) => [d.allowed, d.limit, d.reducedCapacity])]).toEqual([
      false,
      true,
      [
        [false, 1, true], // a cost of 2 above a share of 1, within the limit of 2
        [true, 5, false],
      ],
    ]);
  });

  it('does not flag a refusal of the whole limit: one instance, whose share is the limit', async () => {
    const l = await limiter({ local: { instances: 1 } });
    l.forceOpen();
    expect((await run(l, 'k', 5)).map(seen).at(-1)).toEqual([false, 'local', 'breaker-open', 4, false]);
    expect(await l.peek('k')).toMatchObject({ allowed: false, reducedCapacity: false });
  });

  it("flags none of Redis's refusals, nor the deny cache's that follow", async () => {
    const l = await limiter();
    const decisions = await run(l, 'k', 6);
    expect(decisions.map(seen).slice(3)).toEqual([
      [true, 'redis', 'decided', 4, false],
      [false, 'redis', 'decided', 4, false],
      [false, 'local', 'deny-cache', 4, false],
    ]);
    // The deny cache keeps answering during the outage: still the quota's refusal.
    l.forceOpen();
    expect(seen(await l.limit('k'))).toEqual([false, 'local', 'deny-cache', 4, false]);
  });

  it('knows from Redis what the other instances hold: a refusal once the whole limit is used up is not flagged', async () => {
    const prefix = `rc:${randomUUID()}:`;
    const a = await limiter({ prefix });
    const b = await limiter({ prefix });
    // 'full': b holds 3 of the 4 in Redis, a the last one. 'half': b holds 1, a 1.
    await run(b, 'full', 3);
    await run(b, 'half', 1);
    expect((await a.limit('full')).remaining).toBe(0);
    expect((await a.limit('half')).remaining).toBe(2);
    a.forceOpen();
    // 'full': a's part of the window is its 1 call; 1 + 3 others + 1 > 4: the limit refused.
    expect(seen(await a.limit('full'))).toEqual([false, 'local', 'breaker-open', 1, false]);
    // 'half': a's part is 2 (its call and half of the 2 free); it admits one, then refuses one that
    // 2 of its own + 1 of the others' + 1 leaves within 4: its share refused.
    expect((await run(a, 'half', 2)).map(seen)).toEqual([
      [true, 'local', 'breaker-open', 2, false],
      [false, 'local', 'breaker-open', 2, true],
    ]);
  });

  it('flags the refusals of a blockMs penalty for a refusal of the share, and of no other block', async () => {
    const options: Partial<ResilientLimiterOptions> = { blockMs: 10_000 };
    const share = await limiter(options);
    const whole = await limiter({ ...options, local: { instances: 1 } });
    share.forceOpen();
    whole.forceOpen();
    // Refused for want of permits (the third call, the fifth), the key is blocked for 10 s: the next
    // call is refused by the block, with the flag of the refusal that caused it.
    expect((await run(share, 'k', 4)).map((d) => d.reducedCapacity)).toEqual([false, false, true, true]);
    expect(await share.peek('k')).toMatchObject({ allowed: false, reducedCapacity: true });
    // block() replaces the penalty with a block of the key's own (only here: Redis cannot take it).
    await expect(share.block('k', 20_000)).rejects.toMatchObject({ code: 'ERR_RESILIMIT_REDIS_UNAVAILABLE' });
    expect(await share.peek('k')).toMatchObject({ allowed: false, retryAfterMs: WINDOW_MS, reducedCapacity: false });
    expect((await run(whole, 'k', 6)).map((d) => [d.allowed, d.reducedCapacity])).toEqual([
      [true, false],
      [true, false],
      [true, false],
      [true, false],
      [false, false],
      [false, false],
    ]);
    // block(): the deny cache answers limit(), and the local window peek(), refused: not flagged.
    const blocked = await limiter();
    await blocked.block('k', 10_000);
    blocked.forceOpen();
    expect(seen(await blocked.limit('k'))).toEqual([false, 'local', 'deny-cache', 4, false]);
    expect(await blocked.peek('k')).toMatchObject({ allowed: false, source: 'local', reducedCapacity: false });
  });

  it("flags mode 'fail-closed''s refusals: no capacity without Redis", async () => {
    const l = await limiter({ mode: 'fail-closed' });
    expect(seen(await l.limit('k'))).toEqual([true, 'redis', 'decided', 4, false]);
    l.forceOpen();
    expect(seen(await l.limit('k'))).toEqual([false, 'fail-closed', 'breaker-open', 4, true]);
  });
});
