/**
 * The concurrency limit's Redis side (`RedisSlots`, `lua/slots.lua`) on a real Redis: at most `max`
 * held across clients, leases timed by Redis's clock (or the injected one), ended leases free,
 * renew and release idempotent and safe against each other, bad input named.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/base/errors.js';
import { RedisSlots, type RedisSlotsOptions } from '../../src/redis/RedisSlots.js';
import { prng } from '../support/model.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;
let redis: Redis;
const clients: Redis[] = [];

beforeAll(async () => {
  server = await useRedis();
  redis = server.client();
  await waitReady(redis);
  for (let i = 0; i < 4; i++) {
    const c = server.client();
    await waitReady(c);
    clients.push(c);
  }
});
afterAll(async () => {
  for (const c of [redis, ...clients]) c.disconnect();
  await server?.close();
});

function slots(options: Partial<RedisSlotsOptions> & { max: number; ttlMs: number }, client: Redis = redis): RedisSlots {
  return new RedisSlots({ redis: client, prefix: `s:${randomUUID()}:`, ...options });
}

describe('RedisSlots', () => {
  it('never lets more than max be held across four clients, costs of 1 to 3, and counts every slot back', async () => {
    const prefix = `s:${randomUUID()}:`;
    const max = 10;
    const each = clients.map((c) => new RedisSlots({ redis: c, prefix, max, ttlMs: 60_000 }));
    const random = prng(11);
    let held = 0;
    let most = 0;
    let refused = 0;
    let acquired = 0;
    // 4 clients × 2 holders each, 60 rounds of acquire, hold a turn or two, release.
    await Promise.all(
      each.flatMap((s, c) =>
        [0, 1].map(async (h) => {
          for (let round = 0; round < 60; round++) {
            const id = `${c}-${h}-${round}`;
            const cost = 1 + Math.floor(random() * 3);
            const reply = await s.acquire('k', id, cost);
            expect(reply.held).toBeLessThanOrEqual(max);
            if (!reply.ok) {
              refused += 1;
              continue;
            }
            acquired += 1;
            held += cost;
            most = Math.max(most, held);
            expect(held).toBeLessThanOrEqual(max);
            await new Promise((resolve) => setImmediate(resolve));
            held -= cost;
            expect((await s.release('k', id, cost)).ok).toBe(true);
          }
        }),
      ),
    );
    expect(most).toBeGreaterThan(max / 2); // the limit was reached, not just respected
    expect(acquired).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    expect(await redis.exists(each[0]?.keyOf('k') as string)).toBe(0); // every slot back: the key is gone
  });

  it('frees a slot whose lease ended (its holder stopped renewing), and a renewal keeps one', async () => {
    const t = { now: 1_000_000 };
    const s = slots({ max: 2, ttlMs: 100, now: () => t.now });
    expect(await s.acquire('k', 'a')).toMatchObject({ ok: true, held: 1, untilMs: 1_000_100 });
    expect(await s.acquire('k', 'b')).toMatchObject({ ok: true, held: 2 });
    expect(await s.acquire('k', 'c')).toMatchObject({ ok: false, held: 2, untilMs: 0 });
    t.now += 60;
    expect(await s.renew('k', 'a')).toMatchObject({ ok: true, untilMs: 1_000_160 });
    t.now += 40; // b's lease ends at 1_000_100: now
    expect(await s.acquire('k', 'c')).toMatchObject({ ok: true, held: 2 });
    expect(await s.renew('k', 'b')).toMatchObject({ ok: false, untilMs: 0 }); // lost: not held
    t.now += 60; // a's renewed lease ends now
    expect(await s.acquire('k', 'd')).toMatchObject({ ok: true, held: 2 });
  });

  it('times leases by Redis, not by the client', async () => {
    const s = slots({ max: 1, ttlMs: 5_000 });
    const reply = await s.acquire('k', 'a');
    expect(reply.ok).toBe(true);
    expect(reply.untilMs - reply.nowMs).toBe(5_000);
    const [seconds] = await redis.time();
    expect(Math.abs(reply.nowMs - Number(seconds) * 1000)).toBeLessThan(2_000);
    const pttl = await redis.pttl(s.keyOf('k'));
    expect(pttl).toBeGreaterThan(4_000);
    expect(pttl).toBeLessThanOrEqual(5_000);
  });

  it('takes one slot for an acquire sent twice, and renew and release are safe to repeat and against each other', async () => {
    const s = slots({ max: 3, ttlMs: 60_000 });
    expect(await s.acquire('k', 'a', 2)).toMatchObject({ ok: true, held: 2 });
    expect(await s.acquire('k', 'a', 2)).toMatchObject({ ok: true, held: 2 });
    expect(await s.release('k', 'a', 2)).toMatchObject({ ok: true, held: 0 });
    expect(await s.release('k', 'a', 2)).toMatchObject({ ok: false, held: 0 });
    expect(await s.renew('k', 'a', 2)).toMatchObject({ ok: false, held: 0 }); // a renewal after the release takes nothing
    expect(await s.acquire('k', 'b', 3)).toMatchObject({ ok: true, held: 3 });
  });

  it('names bad input, and a key of another type fails as Redis says', async () => {
    expect(() => slots({ max: 0, ttlMs: 1 })).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_OPTION, message: expect.stringMatching(/`max`/) }),
    );
    expect(() => slots({ max: 1, ttlMs: 1.5 })).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_OPTION, message: expect.stringMatching(/`ttlMs`/) }),
    );
    const s = slots({ max: 2, ttlMs: 1_000 });
    expect(() => s.acquire('k', 'a', 3)).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_OPTION, message: expect.stringMatching(/`cost`.*1 to max \(2\)/) }),
    );
    expect(() => s.acquire('', 'a')).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_KEY }));
    expect(() => s.release('k', '')).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ID }));
    await redis.set(s.keyOf('x'), 'a string');
    await expect(s.acquire('x', 'a')).rejects.toMatchObject({ code: ErrorCode.REDIS_REPLY, message: expect.stringMatching(/WRONGTYPE/) });
  });
});
