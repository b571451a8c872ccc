/**
 * Leases: silence is not departure. An instance that stops beating keeps its share reserved
 * by the others for its lease plus its longest window; it answers locally at its share while its lease
 * is in force, and as `local.afterLease` says after that. One process, real Redis; an instance "loses
 * Redis" through `forceOpen()` (its beats stop, as they do when its breaker opens or its network breaks).
 * The multi-process version, with proxies cut, is `chaos/partition.test.ts`.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter, type LimiterDecision, type ResilientLimiterOptions } from '../../src/index.js';
import { run, useLimiters } from '../support/limiters.js';

const redis = useLimiters({ limit: 20, windowMs: 60_000, heartbeatMs: 100 });

/** A limiter counting instances, on leases of 300 ms; `options.local` is merged over that. */
function limiter(options: Partial<ResilientLimiterOptions> & { prefix: string }): Promise<ResilientLimiter> {
  return redis.limiter({ ...options, local: { instances: 'auto', leaseMs: 300, ...options.local } });
}

const admitted = (ds: LimiterDecision[], source: LimiterDecision['source']): number =>
  ds.filter((d) => d.allowed && d.source === source).length;

/** Polls `done` every 20 ms; 5 s is for a loaded machine (the beats come every 100 ms, or 20 ms while instances are unrecovered). */
async function waitFor(what: string, done: () => boolean): Promise<void> {
  for (let i = 0; !done(); i++) {
    if (i > 250) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

describe('one instance loses Redis, the other does not', () => {
  it('keeps the silent instance counted and its share reserved: Redis gives the other only its own share', async () => {
    const prefix = `lease:${randomUUID()}:`;
    const a = await limiter({ prefix });
    const b = await limiter({ prefix });
    await waitFor('both to count 2 and hold half', () => [a, b].every((l) => l.stats().instances === 2 && l.stats().localLimit === 10));
    await sleep(150); // past a beat: b's lease is fresh
    b.forceOpen();
    // b answers locally at its share (10 of 20) while its lease is in force.
    expect(admitted(await run(b, 'k', 20), 'local')).toBe(10);
    // Past 3 beats b's member is no longer beating; before leases a counted 1 and Redis gave it all 20.
    await sleep(400);
    expect(a.stats()).toMatchObject({ instances: 2, unrecovered: 1 });
    expect(admitted(await run(a, 'k', 20), 'redis')).toBe(10);
    // b's lease has ended (300 ms): 'shrink' answers on a tenth of its share, 1 of 10, on a fresh key;
    // a still holds b's share (lease + window), so Redis gives it 10 there too.
    expect(b.stats().leaseLeftMs).toBe(0);
    expect(admitted(await run(b, 'k2', 5), 'local')).toBe(1);
    expect(admitted(await run(a, 'k2', 20), 'redis')).toBe(10);
  });

  it('frees the share at once when the silent instance closes, and after its lease plus its window when it does not', async () => {
    const prefix = `lease:${randomUUID()}:`;
    const a = await limiter({ prefix, windowMs: 2000 });
    const b = await limiter({ prefix, windowMs: 2000 });
    const c = await limiter({ prefix, windowMs: 2000 });
    await waitFor('all to count 3', () => [a, b, c].every((l) => l.stats().instances === 3));
    b.forceOpen();
    c.forceOpen();
    const silentAt = performance.now();
    await waitFor('a to see b and c silent', () => a.stats().unrecovered === 2);
    expect(a.stats().instances).toBe(3);
    c.forceClose();
    await c.close(); // its leave reaches Redis: a counts it gone at its next beat
    await waitFor('a to count c gone', () => a.stats().instances === 2);
    expect(a.stats().unrecovered).toBe(1);
    // b's hold ends 2.3 s after its last beat (lease 300 ms + window 2 s): then a counts it gone too.
    await waitFor('a to count b gone', () => a.stats().instances === 1);
    console.log(
      `a silent instance's share was held ${Math.round(performance.now() - silentAt)} ms (lease 300 ms + window 2,000 ms, beats of 100 ms)`,
    );
    expect(a.stats().unrecovered).toBe(0);
  });
});

describe('local.name', () => {
  it("a process restarted under the same name takes back its predecessor's lease and claim at its first beat", async () => {
    const prefix = `lease:${randomUUID()}:`;
    const a = await limiter({ prefix, local: { name: 'pod-a' } });
    const b = await limiter({ prefix, local: { name: 'pod-b' } });
    await waitFor('both to count 2 and hold half', () => [a, b].every((l) => l.stats().instances === 2 && l.stats().localLimit === 10));
    a.forceOpen(); // a crashes: its beats stop, it never leaves
    await waitFor('b to see a silent', () => b.stats().unrecovered === 1);
    await sleep(300); // a name is taken over only from a process silent for 3 beats (a restart takes longer)
    // Before names, its share stayed reserved for its lease plus the window (60 s here), and the
    // restarted process counted as a third instance.
    const restarted = await limiter({ prefix, local: { name: 'pod-a' } });
    await waitFor('b to count 2, none silent', () => b.stats().instances === 2 && b.stats().unrecovered === 0);
    await waitFor('the restarted one to hold half', () => restarted.stats().localLimit === 10);
    expect(admitted(await run(b, 'k', 20), 'redis')).toBe(20);
  });

  it('never takes a name another process beats under: the second goes by a unique id, and both count', async () => {
    const prefix = `lease:${randomUUID()}:`;
    const a = await limiter({ prefix, local: { name: 'same-host' } });
    const b = await limiter({ prefix, local: { name: 'same-host' } });
    await waitFor('both to count 2 and hold half', () => [a, b].every((l) => l.stats().instances === 2 && l.stats().localLimit === 10));
  });

  it('refuses a name the heartbeat set cannot hold, naming the option', async () => {
    const client = await redis.client();
    for (const name of ['', '-x', '@x', 'two words', 'x'.repeat(129), 42]) {
      expect(() => new ResilientLimiter({ redis: client, limit: 1, windowMs: 1000, local: { name: name as string } })).toThrow(
        'Expected `local.name` to be 1 to 128 characters without white space',
      );
    }
  });
});

describe('afterLease', () => {
  it.each([
    ['fail-closed', 'fail-closed', 0],
    ['fail-open', 'fail-open', 5],
    ['keep', 'local', 5],
  ] as const)("'%s': once the lease has ended, answers as %s", async (afterLease, source, allowed) => {
    const prefix = `lease:${randomUUID()}:`;
    const a = await limiter({ prefix, limit: 10, local: { afterLease } });
    const b = await limiter({ prefix, limit: 10, local: { afterLease } });
    await waitFor('both to count 2 and hold half', () => [a, b].every((l) => l.stats().instances === 2 && l.stats().localLimit === 5));
    b.forceOpen();
    await waitFor("b's lease to end", () => b.stats().leaseLeftMs === 0);
    const ds = await run(b, 'k', 5);
    expect(ds.map((d) => d.source)).toEqual(Array(5).fill(source));
    expect(ds.filter((d) => d.allowed)).toHaveLength(allowed);
  });

  it('an instance that never beat has no lease: it answers on limit / local.maxInstances, reason no-lease', async () => {
    const down = createRedisClient({ host: '127.0.0.1', port: 1, lazyConnect: true });
    const l = redis.track(new ResilientLimiter({ redis: down, prefix: `lease:${randomUUID()}:`, limit: 30, windowMs: 60_000 }));
    const ds = await run(l, 'k', 10);
    expect(ds.every((d) => d.source === 'local' && d.reason === 'no-lease')).toBe(true);
    expect(ds.filter((d) => d.allowed)).toHaveLength(3); // 30 / 10
    const four = redis.track(
      new ResilientLimiter({ redis: down, prefix: `lease:${randomUUID()}:`, limit: 30, windowMs: 60_000, local: { maxInstances: 4 } }),
    );
    expect((await run(four, 'k', 10)).filter((d) => d.allowed)).toHaveLength(8); // ceil(30 / 4)
  });
});

describe('options', () => {
  it('refuses a lease shorter than 3 heartbeats, and an unknown afterLease, naming the option', async () => {
    const client = await redis.client();
    expect(() => new ResilientLimiter({ redis: client, limit: 1, windowMs: 1000, heartbeatMs: 200, local: { leaseMs: 500 } })).toThrow(
      /local\.leaseMs.*600/,
    );
    expect(() => new ResilientLimiter({ redis: client, limit: 1, windowMs: 1000, local: { afterLease: 'later' as never } })).toThrow(
      /local\.afterLease.*'shrink'/,
    );
  });
});
