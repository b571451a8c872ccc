import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createRedisClient, ErrorCode, ResilientLimiter, type LimiterDecision, type ResilientLimiterOptions } from '../../src/index.js';
import { startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

// limiter.acquire() against a real Redis: real time, short windows (2 per 300 ms), bounds on timing.

let server: RedisChild;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  server = await startRedisServer();
});
afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  // Until each client has ended: a disconnecting ioredis client holds a timer (disconnectTimeout) that
  // the next test's count of timers would take for its own (the close test failed so, under load).
  await Promise.all(
    clients.splice(0).map(async (c) => {
      c.disconnect();
      if (c.status !== 'end') await once(c, 'end');
    }),
  );
});
afterAll(async () => {
  await server?.close();
});

async function limiter(options: Partial<ResilientLimiterOptions> = {}): Promise<ResilientLimiter> {
  const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
  clients.push(redis);
  await waitReady(redis);
  const l = new ResilientLimiter({
    redis,
    prefix: `acq:${randomUUID()}:`,
    limit: 2,
    windowMs: 300,
    local: { instances: 1 },
    // Gates a loaded machine cannot trip: these tests are about waiting for Redis's permits, and a Redis
    // starved of CPU by other test files for a few ms would send a call to the local window ('slow').
    breaker: { timeoutMs: 1_000 },
    slowCallMs: 1_000,
    ...options,
  });
  limiters.push(l);
  return l;
}

/** Ref'd timers of this process (unref'd ones, as the limiter's own, are not listed). */
function refTimers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}

/** Settles `p` into what happened and when, in ms since `start`. */
async function outcome(p: Promise<LimiterDecision>, start: number) {
  try {
    const decision = await p;
    return { decision, error: undefined, at: performance.now() - start };
  } catch (error) {
    return { decision: undefined, error, at: performance.now() - start };
  }
}

describe('acquire()', () => {
  it("waits for the window, then admits one key's waiters in the order they came, without polling", async () => {
    const l = await limiter();
    const start = performance.now();
    const order: number[] = [];
    const waiting = Array.from({ length: 5 }, (_, i) =>
      l.acquire('api', { maxWaitMs: 5_000 }).then((d) => {
        order.push(i);
        return { d, at: performance.now() - start };
      }),
    );
    const done = await Promise.all(waiting);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(done.every((x) => x.d.allowed && x.d.source === 'redis')).toBe(true);
    // 2 per 300 ms: the third and fourth wait for the first two to leave the window, the fifth for the next two.
    expect(done[1]!.at).toBeLessThan(250);
    expect(done[2]!.at).toBeGreaterThanOrEqual(250);
    expect(done[4]!.at).toBeGreaterThanOrEqual(550);
    expect(done[4]!.at).toBeLessThan(3_000);
    // One call per admission, and one per retryAfterMs refusal: a handful, not a loop.
    expect(l.stats().decisions).toBeLessThanOrEqual(12);
  });

  it('resolves with the refusal at once when the permit would come after maxWaitMs', async () => {
    const l = await limiter({ windowMs: 1_000 });
    await l.limit('api');
    await l.limit('api');
    const start = performance.now();
    const alone = await outcome(l.acquire('api', { maxWaitMs: 200 }), start);
    expect(alone.decision).toMatchObject({ allowed: false, source: 'redis' });
    expect(alone.decision!.retryAfterMs).toBeGreaterThan(200);
    expect(alone.at).toBeLessThan(150);
    // Behind a waiter that sleeps until the window frees: a short wait is refused at once too.
    const timers = refTimers();
    const long = l.acquire('api', { maxWaitMs: 5_000 });
    // Until Redis has refused its head and the queue sleeps (its timer): the machine's load decides how long.
    for (const start = performance.now(); refTimers() === timers && performance.now() - start < 5_000; ) await sleep(10);
    const queuedStart = performance.now();
    const short = await outcome(l.acquire('api', { maxWaitMs: 100 }), queuedStart);
    expect(short.decision).toMatchObject({ allowed: false });
    expect(short.decision!.retryAfterMs).toBeGreaterThan(100);
    expect(short.at).toBeLessThan(50);
    await expect(long).resolves.toMatchObject({ allowed: true });
  });

  it('with maxWaitMs 0, makes one attempt, as limit() does', async () => {
    const l = await limiter({ windowMs: 1_000 });
    const answers = [];
    for (let i = 0; i < 3; i += 1) answers.push((await l.acquire('api', { maxWaitMs: 0 })).allowed);
    expect(answers).toEqual([true, true, false]);
    expect(l.stats().decisions).toBe(3);
  });

  it("retries one waiter with one id, the caller's or a generated one", async () => {
    const l = await limiter();
    const calls = vi.spyOn(l, 'limit');
    await l.limit('api', { cost: 2 });
    calls.mockClear();
    await l.acquire('api', { maxWaitMs: 2_000 });
    await l.acquire('api', { maxWaitMs: 2_000, cost: 2, id: 'req-1' });
    const ids = calls.mock.calls.map((c) => c[1]?.id);
    expect(ids.length).toBeGreaterThanOrEqual(3); // the first waited (refused, then admitted); so did the second
    const first = ids.filter((id) => id !== 'req-1');
    expect(new Set(first).size).toBe(1);
    expect(ids.at(-1)).toBe('req-1');
  });

  it("rejects an aborted waiter with the signal's reason and serves the next", async () => {
    const l = await limiter();
    // Read before the call that fills the window: Redis admits it after, so its permits come back
    // 250 ms after this at the earliest, however long the call took on a loaded machine.
    const start = performance.now();
    await l.limit('api', { cost: 2 });
    const controller = new AbortController();
    const first = outcome(l.acquire('api', { maxWaitMs: 2_000, signal: controller.signal }), start);
    const second = outcome(l.acquire('api', { maxWaitMs: 2_000, cost: 2 }), start);
    await sleep(30);
    const reason = new Error('user went away');
    controller.abort(reason);
    const aborted = await first;
    expect(aborted.error).toBe(reason);
    expect(aborted.at).toBeLessThan(200);
    // The second takes the whole limit: it could not have had it had the first been served.
    const next = await second;
    expect(next.decision).toMatchObject({ allowed: true, remaining: 0 });
    expect(next.at).toBeGreaterThanOrEqual(250);
  });

  it('gives back the permit of a waiter aborted while its call was on its way to Redis', async () => {
    const l = await limiter({ windowMs: 60_000 });
    const controller = new AbortController();
    const waiting = l.acquire('api', { maxWaitMs: 1_000, signal: controller.signal }).catch((e: unknown) => e);
    controller.abort(new Error('gone')); // the head's limit() call has left: Redis admits it for nobody
    expect(await waiting).toMatchObject({ message: 'gone' });
    // Redis admitted the head's call (its decision is counted), then it was refunded: the window holds
    // 2 free permits again (the decision and the refund are Redis calls: wait for them).
    await vi.waitFor(() => expect(l.stats().bySource.redis).toBe(1), { timeout: 2_000, interval: 5 });
    await vi.waitFor(async () => expect((await l.peek('api')).remaining).toBe(2), { timeout: 2_000, interval: 20 });
  });

  it('rejects at once, without a call, when the signal is already aborted', async () => {
    const l = await limiter();
    const error = await l.acquire('api', { maxWaitMs: 1_000, signal: AbortSignal.abort() }).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'AbortError' });
    expect(l.stats().decisions).toBe(0);
  });

  it('close() rejects every waiter with ERR_RESILIMIT_CLOSED and leaves no timer', async () => {
    const l = await limiter({ windowMs: 10_000 });
    await l.limit('a', { cost: 2 });
    await l.limit('b', { cost: 2 });
    const before = refTimers();
    const waiting = ['a', 'a', 'b'].map((key) => l.acquire(key, { maxWaitMs: 60_000 }).catch((e: unknown) => e));
    // One timer per sleeping key, once Redis has refused both heads: how long that takes is the
    // machine's load (50 ms was not always enough under two busy loops), so wait for it, up to 5 s.
    for (const start = performance.now(); refTimers() < before + 2 && performance.now() - start < 5_000; ) await sleep(10);
    // Compared with the counts around close(), not with `before` alone: a timer of the client's or
    // of an earlier test counted in `before` may end meanwhile on a loaded machine.
    const during = refTimers();
    const decisions = l.stats().decisions;
    await l.close();
    for (const error of await Promise.all(waiting)) expect(error).toMatchObject({ code: ErrorCode.CLOSED });
    expect(during - refTimers()).toBeGreaterThanOrEqual(2);
    expect(refTimers()).toBeLessThanOrEqual(before);
    await expect(l.acquire('a', { maxWaitMs: 0 })).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    expect(l.stats().decisions).toBe(decisions);
  });

  it('refuses a waiter past maxWaiters with ERR_RESILIMIT_TOO_MANY_WAITERS, all keys counted', async () => {
    const l = await limiter({ maxWaiters: 2, windowMs: 500 });
    await l.limit('a', { cost: 2 });
    await l.limit('b', { cost: 2 });
    const first = l.acquire('a', { maxWaitMs: 5_000 });
    const second = l.acquire('b', { maxWaitMs: 5_000 });
    await expect(l.acquire('c', { maxWaitMs: 5_000 })).rejects.toMatchObject({ code: ErrorCode.TOO_MANY_WAITERS });
    await first;
    // A place came free.
    await expect(l.acquire('a', { maxWaitMs: 5_000 })).resolves.toMatchObject({ allowed: true });
    await second;
  });

  it('refuses bad options with a coded error', async () => {
    const l = await limiter();
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 'resolved',
        (e: { code?: string }) => e.code,
      );
    const call = (options: unknown) => l.acquire('api', options as never);
    expect(await code(call(undefined))).toBe(ErrorCode.INVALID_OPTION);
    expect(await code(call({}))).toBe(ErrorCode.INVALID_OPTION);
    expect(await code(call({ maxWaitMs: -1 }))).toBe(ErrorCode.INVALID_OPTION);
    expect(await code(call({ maxWaitMs: 1.5 }))).toBe(ErrorCode.INVALID_OPTION);
    expect(await code(call({ maxWaitMs: 10, signal: {} }))).toBe(ErrorCode.INVALID_OPTION);
    expect(await code(call({ maxWaitMs: 10, timeoutMs: 5 }))).toBe(ErrorCode.INVALID_OPTION);
    await expect(call({ maxWait: 10 })).rejects.toThrow(/did you mean `maxWaitMs`/);
    expect(await code(call({ maxWaitMs: 10, cost: 3 }))).toBe(ErrorCode.INVALID_COST);
    expect(await code(call({ maxWaitMs: 10, id: '' }))).toBe(ErrorCode.INVALID_ID);
    expect(await code(l.acquire('', { maxWaitMs: 10 }))).toBe(ErrorCode.INVALID_KEY);
    expect(() => new ResilientLimiter({ redis: clients[0]!, limit: 1, windowMs: 1, maxWaiters: 0 })).toThrow(/maxWaiters/);
    expect(l.stats().decisions).toBe(0);
  });

  describe("while Redis cannot answer, it follows the mode's decisions", () => {
    it("fail-closed: refuses at once when the breaker's open period passes maxWaitMs, else waits it out", async () => {
      const l = await limiter({ mode: 'fail-closed', breaker: { timeoutMs: 1_000, resetTimeoutMs: 300 } });
      l.forceOpen();
      const start = performance.now();
      const short = await outcome(l.acquire('api', { maxWaitMs: 100 }), start);
      expect(short.decision).toMatchObject({ allowed: false, source: 'fail-closed', reason: 'breaker-open', retryAfterMs: 300 });
      expect(short.at).toBeLessThan(100);
      const long = outcome(l.acquire('api', { maxWaitMs: 2_000 }), performance.now());
      await sleep(100);
      l.forceClose();
      const admitted = await long;
      expect(admitted.decision).toMatchObject({ allowed: true, source: 'redis' });
      expect(admitted.at).toBeGreaterThanOrEqual(280);
      expect(admitted.at).toBeLessThan(1_500);
    });

    it('local: the local window admits and refuses, and the waiter waits for it', async () => {
      const l = await limiter({ mode: 'local' });
      l.forceOpen();
      const start = performance.now();
      const all = await Promise.all([0, 1, 2].map(() => outcome(l.acquire('api', { maxWaitMs: 2_000 }), start)));
      expect(all.map((x) => x.decision?.source)).toEqual(['local', 'local', 'local']);
      expect(all.every((x) => x.decision?.allowed)).toBe(true);
      expect(all[2]!.at).toBeGreaterThanOrEqual(250);
    });
  });
});
