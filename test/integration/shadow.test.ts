/**
 * Shadow mode on a real Redis: every call is decided and counted as usual, never refused. A refusal
 * (Redis's, then the deny cache's) resolves `allowed: true` with `shadowRejected: true` and the
 * refusal's fields, and consumes no permit: Redis's window holds only what the limit admitted.
 */
import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import type { ResilientLimiter, DecisionMessage, LimitDecision, LimiterDecision, ResilientLimiterOptions } from '../../src/index.js';
import { allKey } from '../../src/redis/allWindows.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { run, useLimiters } from '../support/limiters.js';

const WINDOW_MS = 60_000;

/** A clock the test moves by hand, shared by both tiers (it replaces Redis TIME too): exact answers. */
function clock(start = Date.now()) {
  const c = { t: start, now: () => c.t };
  return c;
}

// A generous deadline: Redis must decide even on a loaded machine, or the answers would move.
const redis = useLimiters({ limit: 3, windowMs: WINDOW_MS, local: { instances: 1 }, breaker: { timeoutMs: 2_000 } });

async function limiter(options: Partial<ResilientLimiterOptions> = {}): Promise<ResilientLimiter & { prefix: string }> {
  const prefix = `shadow:${randomUUID()}:`;
  return Object.assign(await redis.limiter({ prefix, ...options }), { prefix });
}

/** The calls Redis's window holds for a Redis key: one member per admitted call, scored with its time (the `*` member, which counts costs above 1, has a negative score). */
function calls(key: string): Promise<number> {
  return redis.admin.zcount(key, 0, '+inf');
}

/** What a shadowing limiter answers where an enforcing one answered `d`. */
function asShadowed(d: LimiterDecision): LimiterDecision {
  if (d.allowed) return { ...d, id: expect.any(String) };
  return { ...d, allowed: true, id: undefined, shadowRejected: true };
}

describe('shadow mode on a Redis', () => {
  it("answers as an enforcing limiter would, but admits its refusals: Redis's and the deny cache's, with their fields, taking no permit", async () => {
    const c = clock();
    const [shadow, enforcing] = [await limiter({ shadow: true, clock: c.now }), await limiter({ clock: c.now })];
    const both = async (n: number) => [await run(shadow, 'k', n), await run(enforcing, 'k', n)] as const;

    const [first, expected] = await both(5);
    expect(expected.map((d) => [d.allowed, d.source, d.reason])).toEqual([
      [true, 'redis', 'decided'],
      [true, 'redis', 'decided'],
      [true, 'redis', 'decided'],
      [false, 'redis', 'decided'],
      [false, 'local', 'deny-cache'],
    ]);
    expect(first).toStrictEqual(expected.map(asShadowed));
    expect(first[3]).toStrictEqual({
      allowed: true,
      limit: 3,
      remaining: 0,
      retryAfterMs: WINDOW_MS,
      resetAtMs: c.t + WINDOW_MS,
      source: 'redis',
      reason: 'decided',
      reducedCapacity: false,
      id: undefined,
      shadowRejected: true,
    });
    expect(first.slice(0, 3).every((d) => !Object.hasOwn(d, 'shadowRejected'))).toBe(true);
    // Redis's window holds the 3 calls the limit admitted, not the 2 it would have refused.
    expect(await calls(redisKey(shadow.prefix, 'k'))).toBe(3);

    // Half a window on (the deny cache's wait has not passed), then once the first calls have left it:
    // the same answers, so the shadowed calls are in no window.
    c.t += WINDOW_MS / 2;
    const [middle, expectedMiddle] = await both(2);
    expect(middle).toStrictEqual(expectedMiddle.map(asShadowed));
    c.t += WINDOW_MS / 2;
    const [last, expectedLast] = await both(4);
    expect(expectedLast.map((d) => d.allowed)).toEqual([true, true, true, false]);
    expect(last).toStrictEqual(expectedLast.map(asShadowed));
    expect([await calls(redisKey(shadow.prefix, 'k')), await calls(redisKey(enforcing.prefix, 'k'))]).toEqual([3, 3]);
  });

  it('counts shadowed decisions exactly: stats, the shadowRejected event and the decision channel', async () => {
    const l = await limiter({ shadow: true, limit: 2 });
    const events: { key: string; cost: number; decision: LimiterDecision }[] = [];
    l.on('shadowRejected', (info) => events.push(info));
    const published: (LimiterDecision | LimitDecision)[] = [];
    const onMessage = (m: unknown): void => {
      if ((m as DecisionMessage).limiter === l) published.push((m as DecisionMessage).decision);
    };
    subscribe('resilimit:decision', onMessage);
    let decisions: LimiterDecision[];
    try {
      decisions = [...(await run(l, 'a', 3)), await l.limit('b', { cost: 2 }), await l.limit('b'), await l.limit('b', { cost: 2 })];
    } finally {
      unsubscribe('resilimit:decision', onMessage);
    }
    expect(decisions.map((d) => d.shadowRejected ?? false)).toEqual([false, false, true, false, true, true]);
    expect(decisions.every((d) => d.allowed)).toBe(true);
    expect(published).toEqual(decisions);
    expect(events.map(({ key, cost, decision }) => [key, cost, decision])).toEqual([
      ['a', 1, decisions[2]],
      ['b', 1, decisions[4]],
      ['b', 2, decisions[5]],
    ]);
    expect(l.stats()).toMatchObject({
      shadow: true,
      decisions: 6,
      allowed: 6,
      shadowRejected: 3,
      // Redis refused a's third call and b's of cost 1; the deny cache b's last (it had refused cost 1).
      bySource: { redis: 5, local: 1 },
      byReason: { decided: 5, 'deny-cache': 1 },
    });
    expect(await calls(redisKey(l.prefix, 'a'))).toBe(2);
    expect(await calls(redisKey(l.prefix, 'b'))).toBe(1); // its one call, of cost 2
  });

  it('enforces the limit again from the next call after setShadow(false), and shadows again after setShadow(true)', async () => {
    const l = await limiter({ shadow: true, limit: 1 });
    expect((await run(l, 'k', 2)).map((d) => [d.allowed, d.shadowRejected])).toEqual([
      [true, undefined],
      [true, true],
    ]);
    l.setShadow(false);
    const refused = await l.limit('k');
    expect(refused).toMatchObject({ allowed: false, remaining: 0 });
    expect(Object.hasOwn(refused, 'shadowRejected')).toBe(false);
    l.setShadow(true);
    expect(await l.limit('k')).toMatchObject({ allowed: true, shadowRejected: true });
    expect(l.stats()).toMatchObject({ decisions: 4, allowed: 3, shadowRejected: 2 });
    expect(await calls(redisKey(l.prefix, 'k'))).toBe(1);
  });

  it("peek() gives Redis's refusal shadowed, consuming nothing", async () => {
    const c = clock();
    const l = await limiter({ shadow: true, limit: 1, clock: c.now });
    await l.limit('k');
    expect(await l.peek('k')).toStrictEqual({
      allowed: true,
      limit: 1,
      remaining: 0,
      retryAfterMs: WINDOW_MS,
      resetAtMs: c.t + WINDOW_MS,
      source: 'redis',
      reason: 'decided',
      reducedCapacity: false,
      id: undefined,
      shadowRejected: true,
    });
    expect(l.stats()).toMatchObject({ decisions: 1, shadowRejected: 0 });
  });

  it("limitAll(): Redis's refusal shadowed, the combined decision and the refusing limit's, and no window consumed", async () => {
    const c = clock();
    const l = await limiter({ shadow: true, clock: c.now });
    const limits = [
      { key: 'user:1', limit: 1, windowMs: WINDOW_MS },
      { key: 'global', limit: 10, windowMs: WINDOW_MS },
    ];
    expect(await l.limitAll(limits)).toMatchObject({ allowed: true, source: 'redis' });
    const d = await l.limitAll(limits);
    expect(d).toStrictEqual({
      allowed: true,
      retryAfterMs: WINDOW_MS,
      source: 'redis',
      reason: 'decided',
      reducedCapacity: false,
      decisions: [
        {
          allowed: true,
          limit: 1,
          remaining: 0,
          retryAfterMs: WINDOW_MS,
          resetAtMs: c.t + WINDOW_MS,
          source: 'redis',
          reason: 'decided',
          reducedCapacity: false,
          id: undefined,
          shadowRejected: true,
        },
        {
          allowed: true,
          limit: 10,
          remaining: 9,
          retryAfterMs: 0,
          resetAtMs: c.t + WINDOW_MS,
          source: 'redis',
          reason: 'decided',
          reducedCapacity: false,
          id: undefined,
        },
      ],
      shadowRejected: true,
    });
    expect(await calls(allKey(l.prefix, 'user:1', WINDOW_MS))).toBe(1);
    expect(await calls(allKey(l.prefix, 'global', WINDOW_MS))).toBe(1);
    expect(l.stats()).toMatchObject({ decisions: 4, allowed: 4, shadowRejected: 1 });
    l.setShadow(false);
    expect(await l.limitAll(limits)).toMatchObject({ allowed: false, retryAfterMs: WINDOW_MS });
  });

  it('acquire() resolves with the shadowed refusal instead of waiting, and wrap() runs the function', async () => {
    const l = await limiter({ shadow: true, limit: 1 });
    await l.limit('k');
    const started = performance.now();
    expect(await l.acquire('k', { maxWaitMs: 2 * WINDOW_MS })).toMatchObject({ allowed: true, shadowRejected: true, remaining: 0 });
    // Enforced, it would wait about a minute for the permit: well under that, it did not wait.
    expect(performance.now() - started).toBeLessThan(WINDOW_MS / 2);
    const send = l.wrap(async () => 'sent', { key: () => 'k' });
    expect(await send()).toBe('sent');
    expect(l.stats().shadowRejected).toBe(2);
  });
});
