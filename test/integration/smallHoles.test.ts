/**
 * Smaller holes in the partial-failure work, each on a real Redis, each failing before its fix:
 * blocks and denials another instance lifted, blocks that an outage, a refund or update() lost,
 * permits left taken by close(), and decisions' waits in fractions of a millisecond.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ErrorCode, type LimiterDecision, type ResilientLimiter } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useLimiters } from '../support/limiters.js';

// A deadline a loaded machine does not miss: these tests are about what each instance remembers.
const redis = useLimiters({ limit: 3, windowMs: 60_000, local: { instances: 1 }, breaker: { timeoutMs: 2_000 } });
const limiter = redis.limiter;

/** Calls `l.limit(key)` every 50 ms until it is admitted; how long that took, ms. 5 s at most (a loaded machine). */
async function admittedWithin(l: ResilientLimiter, key: string): Promise<number> {
  const started = performance.now();
  for (;;) {
    const d = await l.limit(key);
    if (d.allowed) return performance.now() - started;
    if (performance.now() - started > 5_000) throw new Error(`${key} still refused after 5 s: ${JSON.stringify(d)}`);
    await sleep(50);
  }
}

describe('another instance lifts a block or resets a key', () => {
  it('block(key, 0) on A: B, which learnt the block from Redis, admits again within about a second (it refused for the whole block before)', async () => {
    const prefix = `holes:${randomUUID()}:`;
    const a = await limiter({ prefix });
    const b = await limiter({ prefix });
    await a.block('k', 60_000);
    expect(await b.limit('k')).toMatchObject({ allowed: false, source: 'redis' }); // B learns it, and keeps it in its deny cache
    expect(await b.limit('k')).toMatchObject({ allowed: false, reason: 'deny-cache' });
    await a.block('k', 0);
    // One Redis call a second per denied key checks the denial (the deny cache's probe); 5 s for a loaded machine.
    expect(await admittedWithin(b, 'k')).toBeLessThan(5_000);
  });

  it('reset(key) on A: B, which Redis refused for want of permits, admits again within about a second', async () => {
    const prefix = `holes:${randomUUID()}:`;
    const a = await limiter({ prefix });
    const b = await limiter({ prefix });
    for (let i = 0; i < 3; i++) await a.limit('k');
    expect(await b.limit('k')).toMatchObject({ allowed: false, source: 'redis' });
    await a.reset('k');
    expect(await admittedWithin(b, 'k')).toBeLessThan(5_000);
  });
});

describe('a block made while Redis cannot take it', () => {
  it('outlasts the recovery: the others coming back do not clear it (instances: auto)', async () => {
    const prefix = `holes:${randomUUID()}:`;
    const options = { prefix, heartbeatMs: 100, local: { instances: 'auto' as const } };
    const a = await limiter(options);
    const b = await limiter(options);
    for (let i = 0; a.stats().instances < 2; i++) {
      if (i > 250) throw new Error('a did not count b in 5 s');
      await sleep(20);
    }
    a.forceOpen();
    b.forceOpen();
    await expect(a.block('k', 60_000)).rejects.toMatchObject({ code: ErrorCode.REDIS_UNAVAILABLE });
    a.forceClose();
    b.forceClose();
    // The others beat clean again (a few beats of 100 ms): a's deny cache is cleared of denials, not of blocks.
    for (let i = 0; a.stats().unrecovered > 0; i++) {
      if (i > 250) throw new Error('b did not come back in 5 s');
      await sleep(20);
    }
    await sleep(300);
    expect(await a.limit('k')).toMatchObject({ allowed: false });
    await sleep(1_200); // past a probe's second: this block is not Redis's, no probe lifts it
    expect(await a.limit('k')).toMatchObject({ allowed: false });
  });

  it("mode 'fail-open': neither a refund of another call of the key nor update() lifts it", async () => {
    const l = await limiter({ prefix: `holes:${randomUUID()}:`, mode: 'fail-open' });
    const d = await l.limit('k');
    l.forceOpen();
    await expect(l.block('k', 60_000)).rejects.toMatchObject({ code: ErrorCode.REDIS_UNAVAILABLE });
    expect(await l.limit('k')).toMatchObject({ allowed: false });
    await l.refund('k', d.id as string);
    expect(await l.limit('k')).toMatchObject({ allowed: false });
    l.update({ limit: 5 });
    expect(await l.limit('k')).toMatchObject({ allowed: false });
  });
});

describe('close() while acquire() calls are on their way to Redis', () => {
  it('gives back the permits Redis admitted for the waiters it rejected', async () => {
    const prefix = `holes:${randomUUID()}:`;
    const l = await limiter({ prefix, limit: 5 });
    const waiting = Array.from({ length: 5 }, (_, i) =>
      l.acquire(`k${i}`, { maxWaitMs: 10_000 }).then(
        () => 'admitted',
        (error: { code?: string }) => error.code,
      ),
    );
    await l.close();
    expect(await Promise.all(waiting)).toEqual(Array(5).fill(ErrorCode.CLOSED));
    const held = await Promise.all(Array.from({ length: 5 }, (_, i) => redis.admin.zcard(redisKey(prefix, `k${i}`))));
    expect(held).toEqual([0, 0, 0, 0, 0]);
  });
});

describe('waits in whole milliseconds', () => {
  it('retryAfterMs and resetAtMs of the local window and of the deny cache are integers', async () => {
    const l = await limiter({ prefix: `holes:${randomUUID()}:`, limit: 1 });
    const decisions: LimiterDecision[] = [];
    await l.limit('redis');
    await sleep(3); // the steady clock reads fractions: let some pass
    decisions.push(await l.limit('redis'), await l.limit('redis')); // Redis's refusal, then the deny cache's
    l.forceOpen();
    await l.limit('local');
    await sleep(3);
    decisions.push(await l.limit('local'));
    expect(decisions.map((d) => d.reason)).toEqual(['decided', 'deny-cache', 'breaker-open']);
    for (const d of decisions) {
      expect(Number.isInteger(d.retryAfterMs), JSON.stringify(d)).toBe(true);
      expect(Number.isInteger(d.resetAtMs), JSON.stringify(d)).toBe(true);
    }
  });
});

describe('found in review', () => {
  it("mode 'fail-closed': another instance's refund of this instance's call does not make it refuse the key (Redis is taken at its word)", async () => {
    const prefix = `holes:${randomUUID()}:`;
    const a = await limiter({ prefix, mode: 'fail-closed' });
    const b = await limiter({ prefix, mode: 'fail-closed' });
    const x = await a.limit('k');
    expect(await b.refund('k', x.id as string)).toMatchObject({ refunded: true });
    expect(await a.limit('k')).toMatchObject({ allowed: true, source: 'redis' });
  });

  it("limitAll()'s local answer shares each item's limit among the instances, whatever local.limit is (it is limit()'s)", async () => {
    const l = await limiter({ prefix: `holes:${randomUUID()}:`, local: { instances: 1, limit: 1 } });
    l.forceOpen();
    let admitted = 0;
    for (let i = 0; i < 5; i++) if ((await l.limitAll([{ key: 'g', limit: 10, windowMs: 60_000 }])).allowed) admitted += 1;
    expect(admitted).toBe(5);
  });
});
