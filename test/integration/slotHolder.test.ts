/**
 * `SlotHolder` on a real Redis: a held slot is renewed past its lease, a lost one aborts its signal
 * (never a throw), release is idempotent, a Redis that cannot answer costs no slot and no error, and
 * close() gives every slot back and leaves no timer.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/base/errors.js';
import { type HeldSlot, SlotHolder, SlotLostError } from '../../src/limiter/SlotHolder.js';
import { RedisSlots } from '../../src/redis/RedisSlots.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';
import { until } from '../support/wait.js';

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

describe('SlotHolder: waiting for a slot', () => {
  function holderOf(max: number, pollMs = 10_000): { holder: SlotHolder; slots: RedisSlots } {
    // A poll of 10 s by default: within a test, only a slot given back here wakes a waiter.
    const slots = new RedisSlots({ redis, prefix: `w:${randomUUID()}:`, max, ttlMs: 60_000 });
    return { holder: new SlotHolder(slots, { renewEveryMs: 20_000, pollMs }), slots };
  }

  it('serves the waiters of a key in the order they came, each as a slot comes back here', async () => {
    const { holder } = holderOf(1);
    try {
      const first = (await holder.acquire('k')) as HeldSlot;
      const order: string[] = [];
      const waits = ['a', 'b', 'c'].map((name) =>
        holder.acquire('k', { maxWaitMs: 30_000 }).then((slot) => {
          order.push(name);
          return slot as HeldSlot;
        }),
      );
      await first.release();
      const a = await waits[0];
      expect(order).toEqual(['a']);
      await a?.release();
      const b = await waits[1];
      await b?.release();
      const c = await waits[2];
      expect(order).toEqual(['a', 'b', 'c']);
      await c?.release();
    } finally {
      await holder.close();
    }
  });

  it('sees a slot given back by another process at its next poll', async () => {
    const { holder, slots } = holderOf(1, 20);
    try {
      expect((await slots.acquire('k', 'elsewhere')).ok).toBe(true);
      const waiting = holder.acquire('k', { maxWaitMs: 30_000 });
      await sleep(50);
      await slots.release('k', 'elsewhere');
      expect(await waiting).toBeDefined();
    } finally {
      await holder.close();
    }
  });

  it('gives up after maxWaitMs with undefined, is rejected by its signal or by close(), and leaves no waiter behind', async () => {
    const { holder } = holderOf(1, 20);
    const first = (await holder.acquire('k')) as HeldSlot;
    expect(await holder.acquire('k', { maxWaitMs: 60 })).toBeUndefined();
    const abort = new AbortController();
    const aborted = holder.acquire('k', { maxWaitMs: 30_000, signal: abort.signal });
    abort.abort(new Error('gone'));
    await expect(aborted).rejects.toThrow('gone');
    const closing = expect(holder.acquire('k', { maxWaitMs: 30_000 })).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await holder.close();
    await closing;
    expect(await first.release()).toBe(true); // close() gave it back: the same release, its result
    await expect(holder.acquire('k', { cost: 2 })).rejects.toMatchObject({ code: ErrorCode.CLOSED });
  });

  it('names bad input before anything waits', async () => {
    const { holder } = holderOf(2);
    await expect(holder.acquire('k', { cost: 3 })).rejects.toMatchObject({ code: ErrorCode.INVALID_OPTION });
    await expect(holder.acquire('k', { maxWaitMs: -1 })).rejects.toMatchObject({ code: ErrorCode.INVALID_OPTION });
    await expect(holder.acquire('')).rejects.toMatchObject({ code: ErrorCode.INVALID_KEY });
    await holder.close();
  });
});

describe('SlotHolder', () => {
  it('keeps a slot past its lease while it renews it, and frees it on release, once', async () => {
    // Time on an injected clock, moved by less than a lease between renewals: no bound on this
    // machine's speed. Five moves of 200 ms are 1,000 ms: more than three leases of 300 ms.
    const t = { now: 1_000_000 };
    const options = { redis, prefix: `h:${randomUUID()}:`, max: 1, ttlMs: 300, now: () => t.now };
    const slots = new RedisSlots(options);
    let renewed = 0;
    const renew = slots.renew.bind(slots);
    slots.renew = async (...args) => {
      const reply = await renew(...args);
      if (reply.ok) renewed += 1;
      return reply;
    };
    const holder = new SlotHolder(slots, { renewEveryMs: 10, pollMs: 10 });
    const other = new RedisSlots(options);
    const slot = (await holder.acquire('k')) as HeldSlot;
    expect(slot).toBeDefined();
    for (let i = 0; i < 5; i++) {
      const before = renewed;
      t.now += 200;
      await until(() => renewed > before, 5_000, 'a renewal', 5);
    }
    expect((await other.acquire('k', 'other')).ok).toBe(false);
    expect(slot.signal.aborted).toBe(false);
    const first = slot.release();
    expect(slot.release()).toBe(first);
    expect(await first).toBe(true);
    expect(holder.size).toBe(0);
    expect((await other.acquire('k', 'other')).ok).toBe(true);
  });

  it('aborts the signal of a slot whose lease ended, with a SlotLostError, and calls onLost once', async () => {
    const t = { now: 1_000_000 };
    const lost: HeldSlot[] = [];
    const slots = new RedisSlots({ redis, prefix: `h:${randomUUID()}:`, max: 1, ttlMs: 100, now: () => t.now });
    const holder = new SlotHolder(slots, { renewEveryMs: 10, pollMs: 10, onLost: (s) => lost.push(s) });
    const slot = (await holder.acquire('k')) as HeldSlot;
    t.now += 500; // as if this process had been frozen past its lease
    await until(() => slot.signal.aborted, 5_000, 'the lost signal', 5);
    expect(slot.signal.reason).toBeInstanceOf(SlotLostError);
    expect(String(slot.signal.reason)).toMatch(/lost: its lease ended before it was renewed/);
    await sleep(50); // more ticks: no second report
    expect(lost).toEqual([slot]);
    expect(holder.size).toBe(0);
    expect(await slot.release()).toBe(false);
    expect((await slots.acquire('k', 'next')).ok).toBe(true);
  });

  it('says an onLost that throws as a warning, not as an unhandled rejection', async () => {
    const t = { now: 1_000_000 };
    const slots = new RedisSlots({ redis, prefix: `h:${randomUUID()}:`, max: 1, ttlMs: 100, now: () => t.now });
    const holder = new SlotHolder(slots, {
      renewEveryMs: 10,
      pollMs: 10,
      onLost: () => {
        throw new Error('a bug in the callback');
      },
    });
    const warnings: Error[] = [];
    const unhandled: unknown[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('warning', onWarning);
    process.on('unhandledRejection', onUnhandled);
    try {
      const slot = (await holder.acquire('k')) as HeldSlot;
      t.now += 500;
      await until(() => warnings.some((w) => /a bug in the callback/.test(w.message)), 5_000, 'the warning', 5);
      expect(slot.signal.aborted).toBe(true);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      process.off('unhandledRejection', onUnhandled);
      await holder.close();
    }
  });

  it('neither throws nor loses a slot while Redis cannot answer, and close() gives up every slot and timer', async () => {
    const client = server.client();
    await waitReady(client);
    const slots = new RedisSlots({ redis: client, prefix: `h:${randomUUID()}:`, max: 3, ttlMs: 60_000 });
    // Counts the renewals sent (each still goes to the real client).
    let renewals = 0;
    const renew = slots.renew.bind(slots);
    slots.renew = (...args) => {
      renewals += 1;
      return renew(...args);
    };
    const holder = new SlotHolder(slots, { renewEveryMs: 10, pollMs: 10 });
    const slot = (await holder.acquire('k', { cost: 2 })) as HeldSlot;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on('unhandledRejection', onUnhandled);
    try {
      client.disconnect(); // every renewal now fails to reach Redis
      await sleep(100);
      expect(slot.signal.aborted).toBe(false);
      expect(holder.size).toBe(1);
      expect(renewals).toBeGreaterThan(2); // the renewals went on, each failing quietly
      await holder.close(); // its release cannot reach Redis either: it resolves all the same
      expect(holder.size).toBe(0);
      const after = renewals;
      await sleep(50);
      expect(renewals).toBe(after); // no timer left
      await expect(slot.release()).rejects.toMatchObject({ code: ErrorCode.REDIS_UNAVAILABLE });
      await expect(holder.acquire('k')).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await sleep(20);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
