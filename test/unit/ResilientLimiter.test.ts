import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter, type DecisionMessage, type ResilientLimiterOptions } from '../../src/index.js';
import { resolveLimiterOptions } from '../../src/options/options.js';
import { CALL_BYTES } from '../../src/recovery/Journal.js';
import { freePort } from '../support/redis.js';

function clock(start = 1_000_000) {
  const c = { t: start, now: () => c.t };
  return c;
}

/** Resolves after the current macrotask and every `process.nextTick` (warnings are emitted on one). */
function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Resolves with `p`'s value if it settles before the next turn of the event loop, else with 'late'. */
function atOnce<T>(p: Promise<T>): Promise<T | 'late'> {
  return Promise.race([p, turn().then(() => 'late' as const)]);
}

let port: number;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  port = await freePort(); // nothing listens there
});

afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
});

/** A safe client to the dead port that never connects by itself. */
function client(): Redis {
  const c = createRedisClient({ host: '127.0.0.1', port, lazyConnect: true });
  clients.push(c);
  return c;
}

/** A plain ioredis client (offline queue on, retries on): unsafe for resilimit. */
function unsafeClient(): Redis {
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
  c.on('error', () => undefined);
  clients.push(c);
  return c;
}

function limiter(options: Partial<ResilientLimiterOptions> = {}): ResilientLimiter {
  const l = new ResilientLimiter({
    redis: client(),
    limit: 10,
    windowMs: 1000,
    local: { instances: 1 },
    ...options,
  });
  limiters.push(l);
  return l;
}

describe('ResilientLimiter options', () => {
  const valid = (): Record<string, unknown> => ({ redis: client(), limit: 10, windowMs: 1000 });
  it.each([
    ['mode', { mode: 'x' }, "Expected `mode` to be one of 'local', 'fail-open', 'fail-closed', got `\"x\"` (string of length 1)"],
    ['limit', { limit: 0 }, 'Expected `limit` to be an integer from 1 to 2147483647, got `0` (number)'],
    ['windowMs', { windowMs: undefined }, 'Expected `windowMs` to be an integer from 1 to 2147483647, got `undefined` (undefined)'],
    ['breaker.timeoutMs', { breaker: { timeoutMs: 0 } }, 'Expected `breaker.timeoutMs` to be an integer from 1 to 60000, got `0` (number)'],
    [
      'breaker.maxResetTimeoutMs',
      { breaker: { resetTimeoutMs: 5000, maxResetTimeoutMs: 4999 } },
      'Expected `breaker.maxResetTimeoutMs` to be an integer from 5000 to 3600000, got `4999` (number)',
    ],
    [
      'breaker.resetTimeoutMs',
      { breaker: { resetTimeoutMs: 0 } },
      'Expected `breaker.resetTimeoutMs` to be an integer from 1 to 3600000, got `0` (number)',
    ],
    [
      'breaker.errorThresholdPercentage',
      { breaker: { errorThresholdPercentage: 101 } },
      'Expected `breaker.errorThresholdPercentage` to be an integer from 1 to 100, got `101` (number)',
    ],
    [
      'breaker.volumeThreshold',
      { breaker: { volumeThreshold: 0 } },
      'Expected `breaker.volumeThreshold` to be an integer from 1 to 1000000, got `0` (number)',
    ],
    [
      'breaker.rollingWindowMs',
      { breaker: { rollingWindowMs: 99 } },
      'Expected `breaker.rollingWindowMs` to be an integer from 100 to 600000, got `99` (number)',
    ],
    ['breaker', { breaker: [] }, 'Expected `breaker` to be an object, got an array'],
    [
      'local.instances 0',
      { local: { instances: 0 } },
      "Expected `local.instances` to be an integer from 1 to 1000000 or 'auto', got `0` (number)",
    ],
    [
      "local.instances 'many'",
      { local: { instances: 'many' } },
      'Expected `local.instances` to be an integer from 1 to 1000000 or \'auto\', got `"many"` (string of length 4)',
    ],
    ['local.limit', { local: { limit: 1.5 } }, 'Expected `local.limit` to be an integer from 1 to 2147483647, got `1.5` (number)'],
    ['local.maxKeys', { local: { maxKeys: 0 } }, 'Expected `local.maxKeys` to be an integer from 1 to 16777216, got `0` (number)'],
    ['local', { local: 'x' }, 'Expected `local` to be an object, got `"x"` (string of length 1)'],
    ['maxInFlight', { maxInFlight: 0 }, 'Expected `maxInFlight` to be an integer from 1 to 1000000, got `0` (number)'],
    ['maxWaiters', { maxWaiters: 0 }, 'Expected `maxWaiters` to be an integer from 1 to 1000000, got `0` (number)'],
    [
      'slowCallMs above timeoutMs',
      { slowCallMs: 51 },
      "Expected `slowCallMs` to be an integer from 1 to breaker.timeoutMs (50) or 'auto', got `51` (number)",
    ],
    [
      "slowCallMs 'fast'",
      { slowCallMs: 'fast' },
      'Expected `slowCallMs` to be an integer from 1 to breaker.timeoutMs (50) or \'auto\', got `"fast"` (string of length 4)',
    ],
    [
      'slowCallMs against a given timeoutMs',
      { slowCallMs: 201, breaker: { timeoutMs: 200 } },
      "Expected `slowCallMs` to be an integer from 1 to breaker.timeoutMs (200) or 'auto', got `201` (number)",
    ],
    [
      'redis missing',
      { redis: undefined },
      'Expected `redis` to be an ioredis, iovalkey, node-redis or Valkey GLIDE client (single server or Cluster), got `undefined` (undefined)',
    ],
    [
      'redis not a client',
      { redis: { get: () => 1 } },
      'Expected `redis` to be an ioredis, iovalkey, node-redis or Valkey GLIDE client (single server or Cluster), got an object',
    ],
    ['clock', { clock: 5 }, 'Expected `clock` to be a function returning milliseconds, got `5` (number)'],
    ['perf', { perf: () => 5 }, 'Expected `perf` to be an object with a now() function returning milliseconds, got a function'],
    ['perf.now', { perf: { now: 5 } }, 'Expected `perf` to be an object with a now() function returning milliseconds, got an object'],
    [
      'prefix',
      { prefix: 'a{b}' },
      'Expected `prefix` to be a string of at most 128 characters without `{` or `}`, got `"a{b}"` (string of length 4)',
    ],
    ['heartbeatMs', { heartbeatMs: 99 }, 'Expected `heartbeatMs` to be an integer from 100 to 60000, got `99` (number)'],
    ['maxPending', { maxPending: 0 }, 'Expected `maxPending` to be an integer from 1 to 10000000, got `0` (number)'],
    [
      'maxPendingBytes',
      { maxPendingBytes: 4095 },
      'Expected `maxPendingBytes` to be an integer from 4096 to 9007199254740991, got `4095` (number)',
    ],
    ['reconcile', { reconcile: 'yes' }, 'Expected `reconcile` to be a boolean, got `"yes"` (string of length 3)'],
    // Options that do not exist: refused, naming the nearest one (a user asking for fail-closed got local).
    [
      'failMode',
      { failMode: 'fail-closed' },
      'Expected `failMode` to be absent: ResilientLimiter has no such option (did you mean `mode`?), got `"fail-closed"` (string of length 11)',
    ],
    [
      'breaker.timeout',
      { breaker: { timeout: 5 } },
      'Expected `breaker.timeout` to be absent: ResilientLimiter has no such option (did you mean `breaker.timeoutMs`?), got `5` (number)',
    ],
    [
      'windowMS',
      { windowMS: 1000 },
      'Expected `windowMS` to be absent: ResilientLimiter has no such option (did you mean `windowMs`?), got `1000` (number)',
    ],
    [
      'prefx',
      { prefx: 'a:' },
      'Expected `prefx` to be absent: ResilientLimiter has no such option (did you mean `prefix`?), got `"a:"` (string of length 2)',
    ],
    [
      'local.maxkeys',
      { local: { maxkeys: 10 } },
      'Expected `local.maxkeys` to be absent: ResilientLimiter has no such option (did you mean `local.maxKeys`?), got `10` (number)',
    ],
    [
      'an unrelated name',
      { trustProxy: true },
      'Expected `trustProxy` to be absent: ResilientLimiter has no such option (it has `redis`, `prefix`, `limit`, `windowMs`, `mode`, `blockMs`, `resolutionMs`, `hotKeys`, `local`, `breaker`, `maxInFlight`, `slowCallMs`, `clock`, `perf`, `heartbeatMs`, `maxPending`, `maxPendingBytes`, `reconcile`, `coalesce`, `maxWaiters`, `shadow`), got `true` (boolean)',
    ],
    ['local not an object', { local: 5 }, 'Expected `local` to be an object, got `5` (number)'],
  ])('refuses a bad option: %s', (_, bad, message) => {
    expect(() => new ResilientLimiter({ ...valid(), ...bad } as never)).toThrow(
      expect.objectContaining({ name: 'ResilimitError', code: 'ERR_RESILIMIT_INVALID_OPTION', message }),
    );
  });

  it('beats every twelfth of the window by default, within 100 … 1,000 ms, unless told', () => {
    // Three beats must fit in the quarter of a window a cut-off instance's ghosts cover: with beats
    // of 1 s and windows of 1 s, one of three instances cut off admitted 27 of 20 (chaos/userHarness.test.ts).
    const beat = (options: Partial<ResilientLimiterOptions>) =>
      resolveLimiterOptions({ redis: client(), limit: 10, windowMs: 1000, ...options }).heartbeatMs;
    expect(beat({})).toBe(100);
    expect(beat({ windowMs: 600 })).toBe(100);
    expect(beat({ windowMs: 6000 })).toBe(500);
    expect(beat({ windowMs: 60_000 })).toBe(1000);
    expect(beat({ windowMs: 1000, heartbeatMs: 1000 })).toBe(1000);
  });

  it('refuses options that are not an object', () => {
    expect(() => new ResilientLimiter(undefined as never)).toThrow(
      expect.objectContaining({
        code: 'ERR_RESILIMIT_INVALID_OPTION',
        message: 'Expected `options` to be an object, got `undefined` (undefined)',
      }),
    );
  });

  it('accepts the boundaries of every range', () => {
    const l = limiter({
      mode: 'fail-closed',
      breaker: { timeoutMs: 1, resetTimeoutMs: 10, maxResetTimeoutMs: 10, rollingWindowMs: 100, volumeThreshold: 1 },
      slowCallMs: 1,
      maxInFlight: 1,
      heartbeatMs: 100,
      maxPending: 1,
      maxPendingBytes: 4096,
      local: { instances: 1_000_000, maxKeys: 1, limit: 1 },
    });
    expect(l.stats()).toMatchObject({ mode: 'fail-closed', slowCallMs: 1, localLimit: 1, instances: 1_000_000 });
  });
});

describe('one prefix on one client', () => {
  /** The RESILIMIT_SHARED_PREFIX warnings emitted while `fn` runs (warnings are emitted on the next tick). */
  async function sharedPrefixWarnings(fn: () => Promise<void> | void): Promise<string[]> {
    const seen: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'RESILIMIT_SHARED_PREFIX') seen.push(w.message);
    };
    process.on('warning', onWarning);
    try {
      await fn();
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    return seen;
  }

  it('warns when two open limiters use one prefix on one client (the default one too), not otherwise', async () => {
    const redis = client();
    const options = { redis, limit: 10, windowMs: 1000, local: { instances: 1 } };
    const warned = await sharedPrefixWarnings(() => {
      limiters.push(new ResilientLimiter(options), new ResilientLimiter(options));
    });
    expect(warned).toHaveLength(1);
    expect(warned[0]).toContain('"resilimit:"');
    expect(await sharedPrefixWarnings(() => void limiters.push(new ResilientLimiter({ ...options, prefix: 'other:' })))).toEqual([]);
    expect(await sharedPrefixWarnings(() => void limiters.push(new ResilientLimiter({ ...options, redis: client() })))).toEqual([]);
  });

  it('forgets the prefix of a closed limiter', async () => {
    const redis = client();
    const options = { redis, limit: 10, windowMs: 1000, prefix: 'p:', local: { instances: 1 } };
    const first = new ResilientLimiter(options);
    await first.close();
    expect(await sharedPrefixWarnings(() => void limiters.push(new ResilientLimiter(options)))).toEqual([]);
  });
});

describe('options a call does not have', () => {
  it.each([
    [
      'limit() with costs',
      (l: ResilientLimiter) => l.limit('k', { costs: 5 } as never),
      'Expected `costs` to be absent: limit() has no such option (did you mean `cost`?), got `5` (number)',
    ],
    [
      'limit() with a number',
      (l: ResilientLimiter) => l.limit('k', 5 as never),
      'Expected `options` to be an object { cost?, id? }, got `5` (number)',
    ],
    [
      'limitAll() with window',
      (l: ResilientLimiter) => l.limitAll([{ key: 'k', limit: 5, window: 1000 } as never]),
      'Expected `limits[0].window` to be absent: limitAll() has no such option (did you mean `limits[0].windowMs`?), got `1000` (number)',
    ],
    [
      'limitAll() with an option',
      (l: ResilientLimiter) => l.limitAll([{ key: 'k', limit: 5, windowMs: 1000 }], { ids: 'x' } as never),
      'Expected `ids` to be absent: limitAll() has no such option (did you mean `id`?), got `"x"` (string of length 1)',
    ],
  ])('refuses %s, naming the nearest one', async (_, call, message) => {
    const l = limiter();
    await expect(call(l)).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_OPTION', message });
  });

  it('refuses update() with an unknown change, changing nothing', () => {
    const l = limiter({ limit: 10 });
    expect(() => l.update({ limit: 5, windowMS: 10 } as never)).toThrow(
      expect.objectContaining({
        message: 'Expected `windowMS` to be absent: update() has no such option (did you mean `windowMs`?), got `10` (number)',
      }),
    );
    expect(l.stats().limit).toBe(10);
  });
});

describe('ResilientLimiter without Redis', () => {
  it('answers at once from the local window with reason not-ready, enforcing its limit exactly', async () => {
    const c = clock();
    const l = limiter({ limit: 3, clock: c.now });
    for (let i = 0; i < 3; i++) {
      expect(await atOnce(l.limit('k'))).toEqual({
        allowed: true,
        limit: 3,
        remaining: 2 - i,
        retryAfterMs: 0,
        resetAtMs: 1_001_000,
        source: 'local',
        id: expect.any(String),
        reason: 'not-ready',
        reducedCapacity: false,
      });
    }
    c.t += 400;
    expect(await atOnce(l.limit('k'))).toEqual({
      allowed: false,
      limit: 3,
      remaining: 0,
      retryAfterMs: 600,
      resetAtMs: 1_001_000,
      source: 'local',
      reason: 'not-ready',
      reducedCapacity: false, // the share is the whole limit (one instance): a refusal of the limit
    });
    c.t += 599;
    expect((await l.limit('k')).allowed).toBe(false);
    c.t += 1;
    // The three calls made at 1_000_000 have left the window (it holds calls newer than now - windowMs).
    expect(await l.limit('k')).toMatchObject({ allowed: true, remaining: 2, source: 'local' });
    // Another key has its own window.
    expect(await l.limit('other')).toMatchObject({ allowed: true, remaining: 2 });
    expect(l.stats().reconcile.pending).toBe(5);
  });

  it('admits a call of cost c whole or not at all in the local window', async () => {
    const c = clock();
    const l = limiter({ limit: 5, clock: c.now });
    expect(await l.limit('k', { cost: 4 })).toMatchObject({ allowed: true, remaining: 1 });
    expect(await l.limit('k', { cost: 2 })).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 1000 });
    expect(await l.limit('k', { cost: 1 })).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('uses its share of the limit, ceil(limit / instances), for the local window', async () => {
    const c = clock();
    const l = limiter({ limit: 10, local: { instances: 4 }, clock: c.now });
    expect(l.stats()).toMatchObject({ limit: 10, localLimit: 3, instances: 4 });
    const allowed = [];
    for (let i = 0; i < 5; i++) allowed.push((await l.limit('k')).allowed);
    expect(allowed).toEqual([true, true, true, false, false]);
  });

  // BUG (src/local/LocalWindow.ts, Log.freedAt, reached from ResilientLimiter's fallback): a cost within the
  // global limit but above the local share (limit 10, 4 instances: share 3, cost 5) is rejected
  // locally with retryAfterMs NaN, because freedAt indexes past the end of the log.
  it('answers a cost above the local share with a finite retryAfterMs', async () => {
    const c = clock();
    const l = limiter({ limit: 10, local: { instances: 4 }, clock: c.now });
    const decision = await l.limit('k', { cost: 5 });
    expect(decision.allowed).toBe(false);
    expect(Number.isFinite(decision.retryAfterMs)).toBe(true);
  });

  it('allows every call at once in fail-open mode', async () => {
    const c = clock();
    const l = limiter({ mode: 'fail-open', limit: 2, clock: c.now });
    for (let i = 0; i < 5; i++) {
      expect(await atOnce(l.limit('k'))).toEqual({
        allowed: true,
        limit: 2,
        remaining: 2,
        retryAfterMs: 0,
        resetAtMs: 1_000_000,
        source: 'fail-open',
        id: expect.any(String),
        reason: 'not-ready',
        reducedCapacity: false,
      });
    }
    expect(l.stats().reconcile.pending).toBe(0);
  });

  it('denies every call at once in fail-closed mode, retrying after the open period', async () => {
    const c = clock();
    const l = limiter({ mode: 'fail-closed', breaker: { resetTimeoutMs: 700 }, clock: c.now });
    expect(await atOnce(l.limit('k'))).toEqual({
      allowed: false,
      limit: 10,
      remaining: 0,
      retryAfterMs: 700,
      resetAtMs: 1_000_700,
      source: 'fail-closed',
      reason: 'not-ready',
      reducedCapacity: true, // no capacity without Redis
    });
  });

  it('answers with reason breaker-open while forced open, and by Redis rules again after forceClose', async () => {
    const l = limiter({ mode: 'fail-closed' });
    const states: unknown[] = [];
    l.on('stateChange', (change) => states.push(change));
    l.forceOpen();
    expect(l.state).toBe('open');
    expect(await l.limit('k')).toMatchObject({ allowed: false, source: 'fail-closed', reason: 'breaker-open' });
    l.forceClose();
    expect(l.state).toBe('closed');
    expect(await l.limit('k')).toMatchObject({ source: 'fail-closed', reason: 'not-ready' });
    expect(states).toEqual([
      { state: 'open', previous: 'closed' },
      { state: 'closed', previous: 'open' },
    ]);
    expect(l.stats().opened).toBe(1);
  });

  it('switches mode with setMode, from the next call on, with a modeChange event', async () => {
    const l = limiter({ limit: 1 });
    const changes: unknown[] = [];
    l.on('modeChange', (change) => changes.push(change));
    expect(l.mode).toBe('local');
    expect((await l.limit('k')).source).toBe('local');
    l.setMode('fail-closed');
    expect(l.mode).toBe('fail-closed');
    expect((await l.limit('k')).source).toBe('fail-closed');
    l.setMode('fail-closed');
    l.setMode('fail-open');
    expect((await l.limit('k')).source).toBe('fail-open');
    expect(changes).toEqual([
      { mode: 'fail-closed', previous: 'local' },
      { mode: 'fail-open', previous: 'fail-closed' },
    ]);
    expect(l.stats().mode).toBe('fail-open');
  });

  it('refuses a bad mode, a non-boolean enabled and bad updates with coded errors, changing nothing', () => {
    const l = limiter();
    const invalid = (message: string) => expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION', message });
    expect(() => l.setMode('strict' as never)).toThrow(
      invalid("Expected `mode` to be one of 'local', 'fail-open', 'fail-closed', got `\"strict\"` (string of length 6)"),
    );
    expect(() => l.setEnabled('no' as never)).toThrow(invalid('Expected `enabled` to be a boolean, got `"no"` (string of length 2)'));
    expect(() => l.setEnabled(undefined as never)).toThrow(invalid('Expected `enabled` to be a boolean, got `undefined` (undefined)'));
    expect(() => l.update(null as never)).toThrow(invalid('Expected `changes` to be an object, got `null`'));
    expect(() => l.update({ limit: 0 })).toThrow(invalid('Expected `limit` to be an integer from 1 to 2147483647, got `0` (number)'));
    expect(() => l.update({ limit: 20, windowMs: 1.5 })).toThrow(
      invalid('Expected `windowMs` to be an integer from 1 to 2147483647, got `1.5` (number)'),
    );
    expect(l.stats()).toMatchObject({ mode: 'local', enabled: true, limit: 10, windowMs: 1000, localLimit: 10 });
  });

  it('admits every call with source disabled after setEnabled(false), and limits again after setEnabled(true)', async () => {
    const c = clock();
    const l = limiter({ limit: 1, mode: 'fail-closed', clock: c.now });
    l.setEnabled(false);
    expect(l.enabled).toBe(false);
    for (let i = 0; i < 3; i++) {
      expect(await atOnce(l.limit('k'))).toEqual({
        allowed: true,
        limit: 1,
        remaining: 1,
        retryAfterMs: 0,
        resetAtMs: 1_000_000,
        source: 'disabled',
        id: expect.any(String),
        reason: 'disabled',
        reducedCapacity: false,
      });
    }
    l.setEnabled(true);
    expect(await l.limit('k')).toMatchObject({ allowed: false, source: 'fail-closed' });
  });

  it('changes the limit and the local share with update({ limit })', async () => {
    const c = clock();
    const l = limiter({ limit: 10, local: { instances: 4 }, clock: c.now });
    l.update({ limit: 21 });
    expect(l.stats()).toMatchObject({ limit: 21, localLimit: 6, windowMs: 1000 });
    let admitted = 0;
    for (let i = 0; i < 10; i++) if ((await l.limit('k')).allowed) admitted++;
    expect(admitted).toBe(6);
    expect((await l.limit('k')).limit).toBe(6);
    l.update({ limit: 4 });
    expect(l.stats()).toMatchObject({ limit: 4, localLimit: 1 });
    await expect(l.limit('k', { cost: 5 })).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_COST' });
    l.update({ windowMs: 5000 });
    expect(l.stats()).toMatchObject({ limit: 4, localLimit: 1, windowMs: 5000 });
  });

  it('keeps an explicit local.limit on update({ limit })', () => {
    const l = limiter({ limit: 10, local: { instances: 4, limit: 7 } });
    expect(l.stats().localLimit).toBe(7);
    l.update({ limit: 100 });
    expect(l.stats()).toMatchObject({ limit: 100, localLimit: 7 });
  });

  it('counts one instance with instances auto until a heartbeat answers, and answers on limit / local.maxInstances meanwhile', () => {
    const l = limiter({ limit: 10, local: { instances: 'auto' } });
    expect(l.stats()).toMatchObject({ instances: 1, localLimit: 1 });
    const four = limiter({ limit: 10, local: { instances: 'auto', maxInstances: 4 } });
    expect(four.stats()).toMatchObject({ instances: 1, localLimit: 3 });
    expect(() => limiter({ limit: 10, local: { maxInstances: 0 } })).toThrow('Expected `local.maxInstances` to be');
  });

  it.each([
    ['an empty key', '', undefined, 'ERR_RESILIMIT_INVALID_KEY'],
    ['a key too long', 'x'.repeat(1025), undefined, 'ERR_RESILIMIT_INVALID_KEY'],
    ['a key that is not a string', 42, undefined, 'ERR_RESILIMIT_INVALID_KEY'],
    ['a cost above the limit', 'k', { cost: 11 }, 'ERR_RESILIMIT_INVALID_COST'],
    ['a cost of 0', 'k', { cost: 0 }, 'ERR_RESILIMIT_INVALID_COST'],
    ['a fractional cost', 'k', { cost: 1.5 }, 'ERR_RESILIMIT_INVALID_COST'],
    ['an empty id', 'k', { id: '' }, 'ERR_RESILIMIT_INVALID_ID'],
  ])('rejects misuse, %s, with a coded error and counts no decision', async (_, key, options, code) => {
    const l = limiter();
    await expect(l.limit(key as string, options as never)).rejects.toMatchObject({ name: 'ResilimitError', code });
    expect(l.stats().decisions).toBe(0);
  });

  it('names the limit in the error for a cost above it', async () => {
    const l = limiter();
    await expect(l.limit('k', { cost: 11 })).rejects.toMatchObject({
      message: 'Expected `cost` to be an integer from 1 to the limit (10), got `11` (number)',
    });
  });

  it('rejects limit() with ERR_RESILIMIT_CLOSED after close(), and close() is idempotent', async () => {
    const l = limiter({ mode: 'fail-open' });
    await l.limit('k');
    await l.close();
    await expect(l.limit('k')).rejects.toMatchObject({
      name: 'ResilimitError',
      code: 'ERR_RESILIMIT_CLOSED',
      message: 'limit() was called after close()',
    });
    await expect(l.close()).resolves.toBeUndefined();
    await expect(l[Symbol.asyncDispose]()).resolves.toBeUndefined();
  });

  it('refuses a change of its settings after close() (setMode, setEnabled, setShadow, update, forceOpen, forceClose): ERR_RESILIMIT_CLOSED', async () => {
    const l = limiter({ mode: 'fail-open' });
    l.setMode('fail-closed'); // open: accepted
    await l.close();
    const calls: [string, () => void][] = [
      ['setMode()', () => l.setMode('local')],
      ['setEnabled()', () => l.setEnabled(false)],
      ['setShadow()', () => l.setShadow(true)],
      ['update()', () => l.update({ limit: 5 })],
      ['forceOpen()', () => l.forceOpen()],
      ['forceClose()', () => l.forceClose()],
    ];
    for (const [name, call] of calls) {
      expect(call).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_CLOSED', message: `${name} was called after close()` }));
    }
    expect([l.mode, l.enabled, l.shadow]).toEqual(['fail-closed', true, false]);
  });

  it('closes through await using', async () => {
    let escaped: ResilientLimiter | undefined;
    {
      await using l = new ResilientLimiter({ redis: client(), limit: 1, windowMs: 1000 });
      escaped = l;
      // Never reached Redis, and counting instances: on limit / local.maxInstances, said by the reason.
      expect((await l.limit('k')).reason).toBe('no-lease');
    }
    await expect(escaped.limit('k')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_CLOSED' });
  });

  // BUG (src/limiter/ResilientLimiter.ts, #reconcile): close() (and reconcile()) sends the pending calls to a
  // client that never became ready, checking only that the breaker is closed; on a lazyConnect client
  // that command makes ioredis start connecting (and, with createRedisClient's retry strategy,
  // reconnect forever). Every other path checks `redis.status === 'ready'` first.
  it('does not make a client that never became ready connect when closing with calls pending', async () => {
    const c = client();
    const l = new ResilientLimiter({ redis: c, limit: 10, windowMs: 1000, local: { instances: 1 } });
    await l.limit('k');
    expect(l.stats().reconcile.pending).toBe(1);
    await l.close();
    expect(c.status).toBe('wait');
  });

  it('publishes every decision on the resilimit:decision diagnostics channel', async () => {
    const l = limiter({ limit: 1, mode: 'local' });
    const messages: DecisionMessage[] = [];
    const listener = (message: unknown): void => {
      if ((message as DecisionMessage).limiter === l) messages.push(message as DecisionMessage);
    };
    subscribe('resilimit:decision', listener);
    try {
      const first = await l.limit('a', { cost: 1 });
      const second = await l.limit('a');
      l.setEnabled(false);
      const third = await l.limit('b');
      await l.limit('').catch(() => undefined); // misuse is not a decision
      expect(messages).toEqual([
        { limiter: l, key: 'a', cost: 1, decision: first, durationMs: expect.any(Number) },
        { limiter: l, key: 'a', cost: 1, decision: second, durationMs: expect.any(Number) },
        { limiter: l, key: 'b', cost: 1, decision: third, durationMs: expect.any(Number) },
      ]);
      // Measured from the call's start: positive, and short for a local answer.
      for (const m of messages) expect(m.durationMs > 0 && m.durationMs < 50).toBe(true);
      expect(messages.map((m) => [m.decision.allowed, m.decision.source, m.decision.reason])).toEqual([
        [true, 'local', 'not-ready'],
        [false, 'local', 'not-ready'],
        [true, 'disabled', 'disabled'],
      ]);
    } finally {
      unsubscribe('resilimit:decision', listener);
    }
  });

  it('counts decisions by source and by reason exactly', async () => {
    const c = clock();
    const l = limiter({ limit: 3, mode: 'fail-closed', clock: c.now });
    l.forceOpen();
    await l.limit('k');
    await l.limit('k');
    l.forceClose();
    await l.limit('k');
    l.setMode('local');
    for (let i = 0; i < 4; i++) await l.limit('k'); // 3 allowed, 1 denied
    l.setMode('fail-open');
    for (let i = 0; i < 2; i++) await l.limit('k');
    l.setEnabled(false);
    for (let i = 0; i < 2; i++) await l.limit('k');
    await l.limit('k', { cost: 99 }).catch(() => undefined);
    expect(l.stats()).toEqual({
      state: 'closed',
      mode: 'fail-open',
      enabled: false,
      shadow: false,
      limit: 3,
      windowMs: 1000,
      localLimit: 3,
      instances: 1,
      unrecovered: 0,
      timeoutMs: 50, // the default deadline
      decisions: 11,
      allowed: 7,
      shadowRejected: 0,
      bySource: { redis: 0, local: 4, 'fail-open': 2, 'fail-closed': 3, disabled: 2 },
      byReason: {
        decided: 0,
        'breaker-open': 2,
        timeout: 0,
        'redis-error': 0,
        'redis-reply-error': 0,
        'not-ready': 7,
        saturated: 0,
        slow: 0,
        'deny-cache': 0,
        reconciling: 0,
        disabled: 2,
        'lease-ended': 0,
        'no-lease': 0,
        'no-share': 0,
      },
      inFlight: 0,
      redisLatencyMs: 1,
      slowCallMs: 5,
      opened: 1,
      redisReady: false,
      notReadyForMs: expect.any(Number), // on the real monotonic clock: this client never connects
      reconcile: { pending: 3, written: 0, expired: 0, present: 0, dropped: 0 },
      refunds: { pending: 0, written: 0, dropped: 0 },
    });
  });

  it('counts calls dropped from the reconciliation journal past maxPending', async () => {
    const l = limiter({ limit: 100, maxPending: 2 });
    for (let i = 0; i < 5; i++) await l.limit('k');
    expect(l.stats().reconcile).toEqual({ pending: 2, written: 0, expired: 0, present: 0, dropped: 3 });
  });

  it('says when the journal drops calls Redis will never see: one dropped event per turn', async () => {
    const l = limiter({ limit: 100, maxPending: 2 });
    const events: { calls: number; total: number; reason: string }[] = [];
    l.on('dropped', (info) => events.push(info));
    for (let i = 0; i < 5; i++) await l.limit('k');
    expect(events).toEqual([]); // reported after the turn, once
    await turn();
    expect(events).toEqual([{ calls: 3, total: 3, reason: 'full' }]);
    await l.limit('k');
    await turn();
    expect(events).toEqual([
      { calls: 3, total: 3, reason: 'full' },
      { calls: 1, total: 4, reason: 'full' },
    ]);
  });

  it('drops the oldest calls past maxPendingBytes too, counted in `dropped` and told by the dropped event', async () => {
    // Each call of a distinct 1,000-character key, with a generated id, counts CALL_BYTES + 2,000 bytes.
    const l = limiter({ limit: 100, maxPendingBytes: 3 * (CALL_BYTES + 2000) });
    const events: { calls: number; total: number; reason: string }[] = [];
    l.on('dropped', (info) => events.push(info));
    for (let i = 0; i < 5; i++) await l.limit(String(i).padEnd(1000, '.'));
    // A short key weighs less: the bound makes room for it by dropping the oldest long one only.
    await l.limit('k');
    await turn();
    expect(l.stats().reconcile).toEqual({ pending: 3, written: 0, expired: 0, present: 0, dropped: 3 });
    expect(events).toEqual([{ calls: 3, total: 3, reason: 'full' }]);
  });
});

describe('ResilientLimiter small holes', () => {
  it('keeps the journal of a limit() key apart from a limitAll() window that spells the same', async () => {
    const l = limiter({ limit: 100 });
    for (let i = 0; i < 3; i++) await l.limit('60000\u0000victim');
    for (let i = 0; i < 2; i++) await l.limitAll([{ key: 'victim', limit: 100, windowMs: 60_000 }]);
    expect(l.stats().reconcile.pending).toBe(5);
    await l.reset('60000\u0000victim').catch(() => undefined); // Redis cannot forget it: the client never connects
    expect(l.stats().reconcile.pending).toBe(2);
  });

  it('rejects with a coded error when the limit function throws at call time', async () => {
    let calls = 0;
    const l = limiter({
      limit: () => {
        calls += 1;
        if (calls > 1) throw new Error('config store down');
        return 10;
      },
    });
    await l.limit('k');
    await expect(l.limit('k')).rejects.toMatchObject({
      name: 'ResilimitError',
      code: 'ERR_RESILIMIT_INVALID_OPTION',
      message: 'The `limit` function threw for key "k": Error: config store down',
    });
  });

  it('adds no listener warning with many limiters on one client', async () => {
    const shared = client();
    const warned: Error[] = [];
    const onWarning = (warning: Error): void => void warned.push(warning);
    process.on('warning', onWarning);
    try {
      for (let i = 0; i < 12; i++)
        limiters.push(new ResilientLimiter({ redis: shared, limit: 10, windowMs: 1000, prefix: `p${i}:`, local: { instances: 1 } }));
      await turn();
      expect(warned.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
      const before = shared.listenerCount('ready');
      await Promise.all(limiters.splice(0).map((l) => l.close()));
      expect(shared.listenerCount('ready')).toBe(before - 24); // two each: the Redis tier's and the data watch's
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe('Redis clients', () => {
  /** Collects the RESILIMIT_UNSAFE_REDIS_CLIENT warnings emitted while `fn` runs. */
  async function warnings(fn: () => void): Promise<Error[]> {
    const seen: Error[] = [];
    const listener = (warning: Error): void => {
      if ((warning as { code?: string }).code === 'RESILIMIT_UNSAFE_REDIS_CLIENT') seen.push(warning);
    };
    process.on('warning', listener);
    try {
      fn();
      await turn();
    } finally {
      process.off('warning', listener);
    }
    return seen;
  }

  it('createRedisClient sets the safe options and an error listener', () => {
    const c = client();
    expect(c.options).toMatchObject({
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      connectTimeout: 1000,
      enableAutoPipelining: false,
      disconnectTimeout: 200,
      lazyConnect: true,
      port,
    });
    expect(c.listenerCount('error')).toBeGreaterThanOrEqual(1);
    expect(c.status).toBe('wait');
  });

  it('createRedisClient takes a URL, and the caller wins over the safe options', () => {
    const c = createRedisClient(`redis://127.0.0.1:${port}/2`, { lazyConnect: true, connectTimeout: 200 });
    clients.push(c);
    expect(c.options).toMatchObject({ host: '127.0.0.1', port, db: 2, connectTimeout: 200, enableOfflineQueue: false });
    expect(c.listenerCount('error')).toBeGreaterThanOrEqual(1);
  });

  it('warns once for a client that queues or retries, naming both problems', async () => {
    const unsafe = unsafeClient();
    const seen = await warnings(() => {
      limiters.push(new ResilientLimiter({ redis: unsafe, limit: 1, windowMs: 1000, local: { instances: 1 } }));
    });
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ name: 'ResilimitWarning', code: 'RESILIMIT_UNSAFE_REDIS_CLIENT' });
    expect(seen[0]?.message).toContain('enableOfflineQueue is not false; maxRetriesPerRequest is not 0');
  });

  it('does not warn a second time for a second limiter on the same unsafe client', async () => {
    const unsafe = unsafeClient();
    const make = () => limiters.push(new ResilientLimiter({ redis: unsafe, limit: 1, windowMs: 1000, local: { instances: 1 } }));
    expect(await warnings(make)).toHaveLength(1);
    expect(await warnings(make)).toHaveLength(0);
  });

  it('warns about a client whose only problem is retries per request', async () => {
    const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, enableOfflineQueue: false });
    clients.push(c);
    const seen = await warnings(() => {
      limiters.push(new ResilientLimiter({ redis: c, limit: 1, windowMs: 1000, local: { instances: 1 } }));
    });
    expect(seen).toHaveLength(1);
    expect(seen[0]?.message).toContain('while Redis is down (maxRetriesPerRequest is not 0).');
  });

  it('does not warn for a createRedisClient client', async () => {
    const seen = await warnings(() => {
      limiters.push(new ResilientLimiter({ redis: client(), limit: 1, windowMs: 1000, local: { instances: 1 } }));
    });
    expect(seen).toEqual([]);
  });
});
