/**
 * Hot keys (`hotKeys`) when an instance fails apart or Redis loses data, against a real redis-server:
 * a lease leaves the share reserved for a silent instance alone, the local tier's share in an outage
 * is not shrunk by a lease's unused permits, a lease dies with the data Redis lost, and `block()`
 * gives a lease's unused permits back. A second review's findings: each but the key-lost case failed
 * before its fix.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { LimiterDecision } from '../../src/index.js';
import { run, useLimiters } from '../support/limiters.js';
import { until } from '../support/wait.js';

// heartbeatMs 100: instances count each other and a flush is seen within a few tenths of a second.
const lim = useLimiters({ limit: 100, windowMs: 60_000, heartbeatMs: 100, breaker: { timeoutMs: 2_000 } });
const admitted = (ds: readonly LimiterDecision[]): number => ds.filter((d) => d.allowed).length;

describe('hotKeys when instances fail apart', () => {
  it('leaves the share reserved for a silent instance alone: a lease is decided against the same limit as a call', async () => {
    const prefix = `f1:${randomUUID()}:`;
    const options = { prefix, limit: 1_000, local: { instances: 'auto' as const, leaseMs: 300 } };
    const a = await lim.limiter({ ...options, hotKeys: { validityMs: 1_000 } });
    const b = await lim.limiter(options);
    // Counted, and each holds half (a claim rises once three beats in a row granted it).
    await until(() => [a, b].every((l) => l.stats().instances === 2 && l.stats().localLimit === 500), 5_000, 'both counted, half each');
    // b loses Redis (its breaker held open) and answers on its local share of 500; a, hot, keeps
    // deciding in Redis, which must keep b's share free for as long as b may be answering locally.
    b.forceOpen();
    const byB = admitted(await run(b, 'k', 1_000));
    // b's heartbeats stop: a sees it silent after 1.5 beats (150 ms); 400 ms leaves room on a loaded machine.
    await sleep(400);
    const byA = admitted(await run(a, 'k', 1_000));
    expect(byB).toBe(500);
    expect(byB + byA).toBeLessThanOrEqual(1_000);
  });

  it('keeps the local share whole in an outage after a lease: its unused permits are not counted as the others\u2019', async () => {
    const t = { now: 1_700_000_000_000 };
    const a = await lim.limiter({ clock: () => t.now, local: { instances: 1 }, hotKeys: { validityMs: 1_000 } });
    const before = admitted(await run(a, 'k', 20));
    a.forceOpen();
    const during = admitted(await run(a, 'k', 150));
    // As without hotKeys: the whole limit in the window, the lease's calls first, then the local tier's.
    expect(before + during).toBe(100);
  });

  it('stops admitting on a lease once Redis lost its data (a flush): never over the limit', async () => {
    const prefix = `f3:${randomUUID()}:`;
    const options = { prefix, local: { instances: 'auto' as const } };
    const a = await lim.limiter({ ...options, hotKeys: { validityMs: 1_000 } });
    const b = await lim.limiter(options);
    await until(() => a.stats().instances === 2 && b.stats().instances === 2, 5_000, 'both instances counted');
    const before = admitted(await run(a, 'k', 30)); // a lease of 16 then 41 permits: some left unused
    const lost = [once(a, 'dataLost'), once(b, 'dataLost')];
    await lim.admin.flushall();
    await Promise.all(lost);
    await Promise.all([a.reconcile(), b.reconcile()]);
    const after = admitted(await run(b, 'k', 100)) + admitted(await run(a, 'k', 100));
    expect(before).toBe(30);
    expect(before + after).toBeLessThanOrEqual(100);
  });

  it('stays within the limit when Redis loses the key alone while a lease is held', async () => {
    const t = { now: 1_700_000_000_000 };
    const prefix = `f4:${randomUUID()}:`;
    const a = await lim.limiter({ prefix, clock: () => t.now, local: { instances: 1 }, hotKeys: { validityMs: 1_000 } });
    const before = admitted(await run(a, 'k', 30)); // 3 alone, leases of 16 and 41 (30 of it left)
    // The key alone is lost (evicted, or another program's DEL): no flush to see, only this instance's
    // check of its own calls when Redis answers (OneCall.settle). The lease held goes on (its 30 left);
    // the next take finds Redis short of 60 of this instance's calls and is answered locally.
    await lim.admin.del(`${prefix}{k}`);
    t.now += 10;
    const after = admitted(await run(a, 'k', 200));
    expect(before + after).toBeLessThanOrEqual(100);
  });

  it('gives a lease\u2019s unused permits back at block(): they count for after the block', async () => {
    const t = { now: 1_700_000_000_000 };
    const prefix = `f5:${randomUUID()}:`;
    const a = await lim.limiter({ prefix, clock: () => t.now, local: { instances: 1 }, hotKeys: { validityMs: 1_000 } });
    const b = await lim.limiter({ prefix, clock: () => t.now, local: { instances: 1 }, hotKeys: false });
    await run(a, 'k', 5); // 3 alone, then a lease of 16 (2 used)
    await a.block('k', 10);
    t.now += 20; // the block has ended
    await until(async () => (await b.peek('k')).remaining === 95, 2_000, 'the give-back');
  });
});
