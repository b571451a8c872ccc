/**
 * Shadow mode while Redis cannot answer: a limiter on a port nothing listens on, in each mode. Every
 * call is decided and counted as usual, never refused; a refusal resolves `allowed: true` with
 * `shadowRejected: true` and the refusal's fields, and takes no permit of the local window.
 * (On a real Redis and on a Cluster: test/integration/shadow*.test.ts.)
 */
import type { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter, type LimiterDecision, type ResilientLimiterOptions } from '../../src/index.js';
import { freePort } from '../support/redis.js';

const T0 = 1_000_000;

function clock(start = T0) {
  const c = { t: start, now: () => c.t };
  return c;
}

/** Resolves with `p`'s value if it settles before the next turn of the event loop, else with 'late'. */
function atOnce<T>(p: Promise<T>): Promise<T | 'late'> {
  return Promise.race([p, new Promise<'late'>((resolve) => setImmediate(() => resolve('late')))]);
}

let port: number;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  port = await freePort(); // nothing listens there: every call is answered by the mode, reason 'not-ready'
});

afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
});

function limiter(options: Partial<ResilientLimiterOptions> = {}): ResilientLimiter {
  const redis = createRedisClient({ host: '127.0.0.1', port, lazyConnect: true });
  clients.push(redis);
  const l = new ResilientLimiter({ redis, limit: 2, windowMs: 1000, local: { instances: 1 }, shadow: true, ...options });
  limiters.push(l);
  return l;
}

/** The `shadowRejected` events of `l`, as they come. */
function events(l: ResilientLimiter): { key: string; cost: number; decision: LimiterDecision }[] {
  const seen: { key: string; cost: number; decision: LimiterDecision }[] = [];
  l.on('shadowRejected', (info) => seen.push(info));
  return seen;
}

async function run(l: ResilientLimiter, key: string, n: number): Promise<LimiterDecision[]> {
  const out: LimiterDecision[] = [];
  for (let i = 0; i < n; i += 1) out.push(await l.limit(key));
  return out;
}

describe('shadow mode options', () => {
  it('is off by default, on with shadow: true, and switched by setShadow()', () => {
    const redis = createRedisClient({ host: '127.0.0.1', port, lazyConnect: true });
    clients.push(redis);
    const byDefault = new ResilientLimiter({ redis, limit: 2, windowMs: 1000 });
    limiters.push(byDefault);
    expect(byDefault.shadow).toBe(false);
    const l = limiter();
    expect(l.shadow).toBe(true);
    expect(l.stats().shadow).toBe(true);
    l.setShadow(false);
    expect(l.shadow).toBe(false);
    expect(l.stats().shadow).toBe(false);
  });

  it('refuses a shadow option or a setShadow() argument that is not a boolean, naming it, changing nothing', () => {
    const invalid = (message: string) => expect.objectContaining({ name: 'ResilimitError', code: 'ERR_RESILIMIT_INVALID_OPTION', message });
    expect(() => limiter({ shadow: 'yes' as never })).toThrow(
      invalid('Expected `shadow` to be a boolean, got `"yes"` (string of length 3)'),
    );
    expect(() => limiter({ shadow: 1 as never })).toThrow(invalid('Expected `shadow` to be a boolean, got `1` (number)'));
    expect(() => limiter({ shadowMode: true } as never)).toThrow(
      invalid('Expected `shadowMode` to be absent: ResilientLimiter has no such option (did you mean `shadow`?), got `true` (boolean)'),
    );
    const l = limiter();
    expect(() => l.setShadow('yes' as never)).toThrow(invalid('Expected `shadow` to be a boolean, got `"yes"` (string of length 3)'));
    expect(() => l.setShadow(undefined as never)).toThrow(invalid('Expected `shadow` to be a boolean, got `undefined` (undefined)'));
    expect(l.shadow).toBe(true);
  });
});

describe('shadow mode while Redis cannot answer', () => {
  it("'local': the local window's refusals are admitted, shadowRejected, and take none of its permits", async () => {
    const c = clock();
    const l = limiter({ clock: c.now });
    const seen = events(l);
    const decisions = await run(l, 'k', 5);
    expect(decisions.slice(0, 2).map((d) => [d.allowed, d.remaining, Object.hasOwn(d, 'shadowRejected')])).toEqual([
      [true, 1, false],
      [true, 0, false],
    ]);
    for (const d of decisions.slice(2)) {
      expect(d).toStrictEqual({
        allowed: true,
        limit: 2,
        remaining: 0,
        retryAfterMs: 1000,
        resetAtMs: T0 + 1000,
        source: 'local',
        reason: 'not-ready',
        reducedCapacity: false,
        id: undefined,
        shadowRejected: true,
      });
    }
    expect(seen).toEqual(decisions.slice(2).map((decision) => ({ key: 'k', cost: 1, decision })));
    expect(seen[0]?.decision).toBe(decisions[2]); // the decision the caller got
    expect(l.stats()).toMatchObject({ decisions: 5, allowed: 5, shadowRejected: 3, bySource: { local: 5 }, byReason: { 'not-ready': 5 } });
    // Only the admitted calls were journalled, to be written into Redis: the shadowed ones are in no window.
    expect(l.stats().reconcile.pending).toBe(2);

    // Half a window on, more calls the limit refuses; once the first two have left the window, the
    // limit, enforced again, admits 2: the shadowed calls took no permit.
    c.t = T0 + 500;
    expect((await run(l, 'k', 3)).every((d) => d.shadowRejected === true && d.retryAfterMs === 500)).toBe(true);
    c.t = T0 + 1000;
    l.setShadow(false);
    expect((await run(l, 'k', 3)).map((d) => [d.allowed, d.shadowRejected])).toEqual([
      [true, undefined],
      [true, undefined],
      [false, undefined],
    ]);
    expect(l.stats()).toMatchObject({ decisions: 11, allowed: 10, shadowRejected: 6 });
    expect(seen).toHaveLength(6);
  });

  it("'fail-closed': every refusal is admitted, shadowRejected, with the breaker's open period as retryAfterMs", async () => {
    const c = clock();
    const l = limiter({ mode: 'fail-closed', clock: c.now, breaker: { resetTimeoutMs: 2500 } });
    const seen = events(l);
    for (const d of await run(l, 'k', 3)) {
      expect(d).toStrictEqual({
        allowed: true,
        limit: 2,
        remaining: 0,
        retryAfterMs: 2500,
        resetAtMs: T0 + 2500,
        source: 'fail-closed',
        reason: 'not-ready',
        reducedCapacity: true,
        id: undefined,
        shadowRejected: true,
      });
    }
    expect(seen.map((e) => [e.key, e.cost])).toEqual([
      ['k', 1],
      ['k', 1],
      ['k', 1],
    ]);
    expect(l.stats()).toMatchObject({ decisions: 3, allowed: 3, shadowRejected: 3, bySource: { 'fail-closed': 3 } });
    l.setShadow(false);
    const enforced = await l.limit('k');
    expect(enforced).toMatchObject({ allowed: false, source: 'fail-closed', retryAfterMs: 2500 });
    expect(Object.hasOwn(enforced, 'shadowRejected')).toBe(false);
    expect(l.stats()).toMatchObject({ decisions: 4, allowed: 3, shadowRejected: 3 });
  });

  it("'fail-open': every call is admitted as usual, none shadowed", async () => {
    const l = limiter({ mode: 'fail-open' });
    const seen = events(l);
    const decisions = await run(l, 'k', 4);
    expect(decisions.every((d) => d.allowed && d.source === 'fail-open' && !Object.hasOwn(d, 'shadowRejected'))).toBe(true);
    expect(seen).toEqual([]);
    expect(l.stats()).toMatchObject({ decisions: 4, allowed: 4, shadowRejected: 0 });
  });

  it('peek() tells what limit() would give, shadowed, and publishes nothing', async () => {
    const c = clock();
    const l = limiter({ clock: c.now });
    await run(l, 'k', 2);
    const seen = events(l);
    expect(await l.peek('k')).toStrictEqual({
      allowed: true,
      limit: 2,
      remaining: 0,
      retryAfterMs: 1000,
      resetAtMs: T0 + 1000,
      source: 'local',
      reason: 'not-ready',
      reducedCapacity: false,
      id: undefined,
      shadowRejected: true,
    });
    expect(await l.peek('other')).toMatchObject({ allowed: true, remaining: 2 });
    expect(Object.hasOwn(await l.peek('other'), 'shadowRejected')).toBe(false);
    expect(seen).toEqual([]);
    expect(l.stats()).toMatchObject({ decisions: 2, shadowRejected: 0 });
    l.setShadow(false);
    expect(await l.peek('k')).toMatchObject({ allowed: false, retryAfterMs: 1000 });
  });

  it('limitAll(): the combined decision and each refusing limit are shadowed, and no limit is consumed', async () => {
    const c = clock();
    const l = limiter({ clock: c.now });
    const seen = events(l);
    const limits = [
      { key: 'user:1', limit: 1, windowMs: 1000 },
      { key: 'global', limit: 5, windowMs: 1000 },
    ];
    expect(await l.limitAll(limits)).toMatchObject({ allowed: true, source: 'local' });
    const d = await l.limitAll(limits);
    expect(d).toStrictEqual({
      allowed: true,
      retryAfterMs: 1000,
      source: 'local',
      reason: 'not-ready',
      reducedCapacity: false,
      decisions: [
        {
          allowed: true,
          limit: 1,
          remaining: 0,
          retryAfterMs: 1000,
          resetAtMs: T0 + 1000,
          source: 'local',
          reason: 'not-ready',
          reducedCapacity: false,
          id: undefined,
          shadowRejected: true,
        },
        {
          allowed: true,
          limit: 5,
          remaining: 4,
          retryAfterMs: 0,
          resetAtMs: T0 + 1000,
          source: 'local',
          reason: 'not-ready',
          reducedCapacity: false,
          id: undefined,
        },
      ],
      shadowRejected: true,
    });
    expect(seen.map((e) => [e.key, e.decision])).toEqual([['user:1', d.decisions[0]]]);
    // Per limit: 2 × 2 decisions, all admitted, one of them shadowed.
    expect(l.stats()).toMatchObject({ decisions: 4, allowed: 4, shadowRejected: 1 });
    // The shadowed call took no permit of `global`: 4 of its 5 are free.
    l.setShadow(false);
    expect((await l.limitAll([limits[1]!])).decisions[0]).toMatchObject({ allowed: true, remaining: 3 });
    expect(await l.limitAll(limits)).toMatchObject({ allowed: false });
  });

  it('acquire() resolves at once with the shadowed decision instead of waiting', async () => {
    const l = limiter({ windowMs: 60_000 });
    await run(l, 'k', 2);
    const d = await atOnce(l.acquire('k', { maxWaitMs: 60_000 }));
    expect(d).toMatchObject({ allowed: true, shadowRejected: true, source: 'local' });
  });

  it('setShadow(true) wakes the acquire() calls waiting on a refusal: they resolve at once, shadowed', async () => {
    const l = limiter({ windowMs: 60_000, shadow: false });
    await run(l, 'k', 2);
    // Refused: the queue sleeps the refusal's retryAfterMs, about 60 s, before it asks again.
    const waiting = l.acquire('k', { maxWaitMs: 120_000 });
    expect(await atOnce(waiting)).toBe('late');
    l.setShadow(true);
    expect(await atOnce(waiting)).toMatchObject({ allowed: true, shadowRejected: true });
  });

  it('wrap() runs the function for a call the limit refuses', async () => {
    const l = limiter({ mode: 'fail-closed' });
    let runs = 0;
    const send = l.wrap(async (to: string) => `sent to ${to} (${(runs += 1)})`, { key: (to) => `mail:${to}` });
    expect(await send('ada')).toBe('sent to ada (1)');
    expect(l.stats().shadowRejected).toBe(1);
    l.setShadow(false);
    await expect(send('ada')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_RATE_LIMITED' });
    expect(runs).toBe(1);
  });
});
