/**
 * `ConcurrencyLimiter` on a real Redis: waiting (FIFO, maxWaitMs, abort, close), a held slot renewed
 * past its lease, a lost one reported on its signal and as an event (never a throw), the modes while
 * Redis cannot answer, the write-back of slots held then, and a Redis that lost its data.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ErrorCode } from '../../src/base/errors.js';
import { ConcurrencyLimiter, type ConcurrencyLimiterOptions, type HeldSlot, SlotLostError } from '../../src/index.js';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { instrumentConcurrencyLimiter, MetricName } from '../../src/metrics.js';
import { RedisSlots } from '../../src/redis/RedisSlots.js';
import { collect, TestReader } from '../support/metrics.js';
import { startRedisServer, useRedis, waitReady, type RedisHandle } from '../support/redis.js';
import { until } from '../support/wait.js';

const realSetInterval = globalThis.setInterval;
const realClearInterval = globalThis.clearInterval;

let server: RedisHandle;
let redis: Redis;

beforeAll(async () => {
  server = await useRedis();
  redis = server.client();
  await waitReady(redis);
});
afterAll(async () => {
  redis.disconnect();
  await server?.close();
});

/** A limiter on a fresh prefix; a fixed instance count unless said (no heartbeats to wait for). */
function limiterOf(options: Partial<ConcurrencyLimiterOptions> & { max: number }): ConcurrencyLimiter {
  return new ConcurrencyLimiter({ redis, prefix: `c:${randomUUID()}:`, instances: 1, ...options });
}

/** Blocks this process's event loop for `ms`: no timer runs meanwhile, as in a frozen process. */
function stall(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // busy
  }
}

describe('ConcurrencyLimiter: waiting for a slot', () => {
  it('serves the waiters of a key in the order they came, each as a slot comes back here', async () => {
    // A poll of 10 s: within the test, only a slot given back here wakes a waiter.
    const limiter = limiterOf({ max: 1, pollMs: 10_000 });
    try {
      const first = (await limiter.acquire('k')) as HeldSlot;
      const order: string[] = [];
      const waits = ['a', 'b', 'c'].map((name) =>
        limiter.acquire('k', { maxWaitMs: 30_000 }).then((slot) => {
          order.push(name);
          return slot as HeldSlot;
        }),
      );
      await first.release();
      const a = await waits[0];
      expect(order).toEqual(['a']);
      await a?.release();
      await (await waits[1])?.release();
      await (await waits[2])?.release();
      expect(order).toEqual(['a', 'b', 'c']);
    } finally {
      await limiter.close();
    }
  });

  it('sees a slot given back by another instance at its next poll', async () => {
    const limiter = limiterOf({ max: 1, pollMs: 20 });
    const other = new ConcurrencyLimiter({ redis, prefix: limiter.options.prefix, instances: 1, max: 1 });
    try {
      const held = (await other.acquire('k')) as HeldSlot;
      const waiting = limiter.acquire('k', { maxWaitMs: 30_000 });
      await sleep(50);
      await held.release();
      expect((await waiting)?.source).toBe('redis');
    } finally {
      await Promise.all([limiter.close(), other.close()]);
    }
  });

  it('gives up after maxWaitMs, is rejected by its signal or by close(), and leaves no waiter behind', async () => {
    const limiter = limiterOf({ max: 1, pollMs: 20 });
    const first = (await limiter.acquire('k')) as HeldSlot;
    expect(await limiter.acquire('k', { maxWaitMs: 60 })).toBeUndefined();
    const abort = new AbortController();
    const aborted = limiter.acquire('k', { maxWaitMs: 30_000, signal: abort.signal });
    abort.abort(new Error('gone'));
    await expect(aborted).rejects.toThrow('gone');
    const closing = expect(limiter.acquire('k', { maxWaitMs: 30_000 })).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await limiter.close();
    await closing;
    expect(await first.release()).toBe(true); // close() gave it back: the same release, its result
    await expect(limiter.acquire('k', { cost: 1 })).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    expect(await redis.exists(new RedisSlots({ redis, max: 1, ttlMs: 100, prefix: limiter.options.prefix }).keyOf('k'))).toBe(0);
  });

  it('names bad input, option and value, before anything waits', async () => {
    const limiter = limiterOf({ max: 2 });
    await expect(limiter.acquire('k', { cost: 3 })).rejects.toThrow(/Expected `cost` to be an integer from 1 to max \(2\), got `3`/);
    await expect(limiter.acquire('k', { maxWaitMs: -1 })).rejects.toMatchObject({ code: ErrorCode.INVALID_OPTION });
    await expect(limiter.acquire('')).rejects.toMatchObject({ code: ErrorCode.INVALID_KEY });
    await limiter.close();
    expect(() => new ConcurrencyLimiter({ redis, max: 0 })).toThrow(/Expected `max` to be an integer from 1/);
    expect(() => new ConcurrencyLimiter({ redis, max: 2, ttlMs: 1000, renewEveryMs: 600 })).toThrow(
      /`renewEveryMs` to be an integer from 1 to 500/,
    );
    expect(() => new ConcurrencyLimiter({ redis, max: 2, mode: 'open' as 'local' })).toThrow(/`mode`/);
    expect(() => new ConcurrencyLimiter({ redis, max: 2, maxx: 3 } as ConcurrencyLimiterOptions)).toThrow(/maxx/);
  });
});

describe('ConcurrencyLimiter: leases', () => {
  it('keeps a slot past its lease while it renews it, and frees it on release, once', async () => {
    // Redis's time on an injected clock, moved by less than a lease between renewals: five moves of
    // 1.5 s are 7.5 s, more than three leases of 2 s. The lease is 2 s of this process's time too:
    // a renewal tick 2 s late (a stall no loaded machine here has shown) would call the slot lost.
    const t = { now: 1_000_000 };
    const limiter = limiterOf({ max: 1, ttlMs: 2_000, renewEveryMs: 10, clock: () => t.now });
    const other = new RedisSlots({ redis, prefix: limiter.options.prefix, max: 1, ttlMs: 2_000, now: () => t.now });
    try {
      const slot = (await limiter.acquire('k')) as HeldSlot;
      const key = other.keyOf('k');
      for (let i = 0; i < 5; i++) {
        t.now += 1_500;
        // Renewed: the slot's lease now ends after the moved clock.
        await until(async () => Number(await redis.zscore(key, slot.id)) > t.now, 5_000, 'a renewal', 5);
      }
      expect((await other.acquire('k', 'other')).ok).toBe(false);
      expect(slot.signal.aborted).toBe(false);
      const first = slot.release();
      expect(slot.release()).toBe(first);
      expect(await first).toBe(true);
      expect(limiter.stats().held).toBe(0);
      expect((await other.acquire('k', 'other')).ok).toBe(true);
    } finally {
      await limiter.close();
    }
  });

  it('reports a slot lost when this process could not renew it for a lease: its signal and one event, no throw', async () => {
    const limiter = limiterOf({ max: 1, ttlMs: 100, renewEveryMs: 20 });
    const lost: HeldSlot[] = [];
    limiter.on('lost', (slot) => lost.push(slot));
    try {
      const slot = (await limiter.acquire('k')) as HeldSlot;
      stall(400); // frozen past its lease: no renewal could run
      await until(() => slot.signal.aborted, 5_000, 'the lost signal', 5);
      expect(slot.signal.reason).toBeInstanceOf(SlotLostError);
      expect(slot.signal.reason).toMatchObject({ code: ErrorCode.SLOT_LOST, slot: { key: 'k', id: slot.id, cost: 1 } });
      await sleep(60); // more ticks: no second report
      expect(lost).toEqual([slot]);
      expect(limiter.stats()).toMatchObject({ held: 0, lost: 1 });
      expect(await slot.release()).toBe(false);
      expect(await limiter.acquire('k')).toBeDefined();
    } finally {
      await limiter.close();
    }
  });

  it('says a lost listener that throws as a warning, not as an unhandled rejection', async () => {
    const limiter = limiterOf({ max: 1, ttlMs: 100, renewEveryMs: 20 });
    limiter.on('lost', () => {
      throw new Error('a bug in the listener');
    });
    const warnings: Error[] = [];
    const unhandled: unknown[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('warning', onWarning);
    process.on('unhandledRejection', onUnhandled);
    try {
      const slot = (await limiter.acquire('k')) as HeldSlot;
      stall(400);
      await until(() => warnings.some((w) => /a bug in the listener/.test(w.message)), 5_000, 'the warning', 5);
      expect(slot.signal.aborted).toBe(true);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      process.off('unhandledRejection', onUnhandled);
      await limiter.close();
    }
  });

  it('writes a held slot back when Redis lost it (a flush), without calling it lost', async () => {
    const limiter = limiterOf({ max: 2, ttlMs: 3_000, renewEveryMs: 20 });
    try {
      const slot = (await limiter.acquire('k')) as HeldSlot;
      const key = new RedisSlots({ redis, prefix: limiter.options.prefix, max: 2, ttlMs: 100 }).keyOf('k');
      await redis.del(key);
      await until(async () => (await redis.zscore(key, slot.id)) !== null, 5_000, 'the slot written again', 10);
      expect(slot.signal.aborted).toBe(false);
    } finally {
      await limiter.close();
    }
  });
});

describe('ConcurrencyLimiter: while Redis cannot answer', () => {
  it("'local' takes slots within its share, and writes them into Redis before it takes one there", async () => {
    // max 5 over 2 instances: a share of floor(5 / 2) = 2.
    const limiter = limiterOf({ max: 5, instances: 2 });
    const key = new RedisSlots({ redis, prefix: limiter.options.prefix, max: 5, ttlMs: 100 }).keyOf('k');
    try {
      limiter.forceOpen();
      const a = (await limiter.acquire('k')) as HeldSlot;
      const b = (await limiter.acquire('k')) as HeldSlot;
      expect([a.source, b.source]).toEqual(['local', 'local']);
      expect(await limiter.acquire('k')).toBeUndefined();
      expect(limiter.stats()).toMatchObject({ held: 2, heldUnwritten: 2, share: 2, refused: 1, state: 'open' });
      expect(await redis.zcard(key)).toBe(0);
      await a.release(); // never in Redis: nothing to send
      // Back: the slot held meanwhile is in Redis before the next one is taken there.
      limiter.forceClose();
      const c = (await limiter.acquire('k')) as HeldSlot;
      expect(c.source).toBe('redis');
      expect((await redis.zrange(key, '0', '-1')).sort()).toEqual([b.id, c.id].sort());
      expect(limiter.stats()).toMatchObject({ held: 2, heldUnwritten: 0 });
    } finally {
      await limiter.close();
    }
  });

  it('gives back in Redis a slot whose calls ran there late, after a freeze: no holder is left behind', async () => {
    // The acquire and the write-back sent while Redis is frozen miss their deadline, and Redis runs
    // them when it wakes: the slot, taken locally and released meanwhile, must not stay in Redis.
    const own = await startRedisServer();
    const client = own.client();
    try {
      await waitReady(client);
      const limiter = new ConcurrencyLimiter({
        redis: client,
        prefix: `c:${randomUUID()}:`,
        instances: 1,
        max: 4,
        breaker: { timeoutMs: 50 },
      });
      const key = new RedisSlots({ redis: client, prefix: limiter.options.prefix, max: 4, ttlMs: 100 }).keyOf('k');
      own.freeze();
      let slot: HeldSlot | undefined;
      try {
        slot = (await limiter.acquire('k')) as HeldSlot;
        expect(slot.source).toBe('local');
        expect(await slot.release()).toBe(true);
      } finally {
        own.thaw();
      }
      // Redis has run the late acquire: the next acquire first gives that slot back.
      await until(
        async () => (await client.zscore(key, slot.id)) !== null || limiter.stats().heldUnwritten === 0,
        5_000,
        'the late acquire',
        10,
      );
      limiter.forceClose();
      const next = (await limiter.acquire('k')) as HeldSlot;
      expect(next.source).toBe('redis');
      expect(await client.zrange(key, '0', '-1')).toEqual([next.id]);
      await limiter.close();
    } finally {
      client.disconnect();
      await own.stop();
    }
  });

  it("'fail-closed' takes none and 'fail-open' every slot asked, switched at run time", async () => {
    const limiter = limiterOf({ max: 2, mode: 'fail-closed' });
    try {
      limiter.forceOpen();
      expect(await limiter.acquire('k')).toBeUndefined();
      limiter.setMode('fail-open');
      const slots = await Promise.all([1, 2, 3].map(() => limiter.acquire('k')));
      expect(slots.map((s) => s?.source)).toEqual(['fail-open', 'fail-open', 'fail-open']);
      expect(() => limiter.setMode('open' as 'local')).toThrow(/`mode`/);
    } finally {
      await limiter.close();
    }
  });

  it('neither throws nor loses a slot while its client is disconnected, and close() leaves no timer', async () => {
    const client = server.client();
    await waitReady(client);
    const limiter = new ConcurrencyLimiter({
      redis: client,
      prefix: `c:${randomUUID()}:`,
      instances: 1,
      max: 3,
      ttlMs: 60_000,
      renewEveryMs: 10,
    });
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      // Every interval the limiter starts (a renewal per slot) must be cleared by close(): they are
      // unref'd, so the process would exit all the same, but nothing may run after close().
      const started = new Set<unknown>();
      const cleared = new Set<unknown>();
      const setSpy = vi.spyOn(globalThis, 'setInterval').mockImplementation(((...args: Parameters<typeof setInterval>) => {
        const timer = realSetInterval(...args);
        started.add(timer);
        return timer;
      }) as typeof setInterval);
      const clearSpy = vi.spyOn(globalThis, 'clearInterval').mockImplementation(((timer: NodeJS.Timeout) => {
        cleared.add(timer);
        realClearInterval(timer);
      }) as typeof clearInterval);
      const slot = (await limiter.acquire('k', { cost: 2 })) as HeldSlot;
      client.disconnect(); // every renewal now fails to reach Redis
      await sleep(100);
      expect(slot.signal.aborted).toBe(false);
      expect(limiter.stats().held).toBe(2);
      // With a share of the whole limit (one instance), a local slot comes; the limit still holds.
      expect((await limiter.acquire('k'))?.source).toBe('local');
      expect(await limiter.acquire('k')).toBeUndefined();
      await limiter.close();
      setSpy.mockRestore();
      clearSpy.mockRestore();
      expect(limiter.stats().held).toBe(0);
      expect(started.size).toBe(2); // the two slots' renewals
      expect([...started].filter((timer) => !cleared.has(timer))).toEqual([]);
      expect(await slot.release()).toBe(true); // close() gave it back: the same release, its result
      await expect(limiter.acquire('k')).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await sleep(20);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it("with instances 'auto', each instance's share is its claim of max, counted by heartbeats", async () => {
    const prefix = `c:${randomUUID()}:`;
    const make = (): ConcurrencyLimiter => new ConcurrencyLimiter({ redis, prefix, max: 9, heartbeatMs: 100 });
    const [a, b, c] = [make(), make(), make()];
    try {
      // Before any beat answered, a share of floor(9 / maxInstances 10) = 0; then a third of 9 each.
      await until(() => [a, b, c].every((l) => l.stats().share === 3), 10_000, 'three shares of 3', 20);
      a.forceOpen();
      const held = await Promise.all([1, 2, 3, 4].map(() => a.acquire('k')));
      expect(held.map((s) => s?.source)).toEqual(['local', 'local', 'local', undefined]);
    } finally {
      await Promise.all([a.close(), b.close(), c.close()]);
    }
  });
});

describe('ConcurrencyLimiter: metrics', () => {
  it('reports the slots held (written or not), the acquires by source, the share and the breaker', async () => {
    const reader = new TestReader();
    const meter = new MeterProvider({ readers: [reader] }).getMeter('test');
    const limiter = limiterOf({ max: 4, instances: 2 });
    using _instrumentation = instrumentConcurrencyLimiter(limiter, { name: 'jobs', meter });
    try {
      await limiter.acquire('k', { cost: 2 });
      limiter.forceOpen();
      await limiter.acquire('k'); // 3 held here, over the share of 2: refused
      await limiter.acquire('j'); // another key: local
      const points = async (name: string) =>
        Object.fromEntries(
          ((await collect(reader)).find((m) => m.descriptor.name === name)?.dataPoints ?? []).map((p) => [
            JSON.stringify(Object.fromEntries(Object.entries(p.attributes).filter(([k]) => k !== 'resilimit.limiter'))),
            p.value,
          ]),
        );
      expect(await points(MetricName.SLOTS_HELD)).toEqual({ '{"resilimit.written":true}': 2, '{"resilimit.written":false}': 1 });
      expect(await points(MetricName.SLOTS_ACQUIRES)).toMatchObject({
        '{"resilimit.source":"redis"}': 1,
        '{"resilimit.source":"local"}': 1,
        '{"resilimit.source":"none"}': 1,
      });
      expect(await points(MetricName.SLOTS_SHARE)).toEqual({ '{}': 2 });
      expect(await points(MetricName.BREAKER_STATE)).toMatchObject({ '{"resilimit.state":"open"}': 1 });
      expect(() => instrumentConcurrencyLimiter({ limit() {}, acquire() {}, stats() {} } as never)).toThrow(
        /Expected `limiter` to be a ConcurrencyLimiter/,
      );
    } finally {
      await limiter.close();
    }
  });
});
