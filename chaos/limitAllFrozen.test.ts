/**
 * limitAll() on a Redis Cluster while the master of its key is frozen (SIGSTOP) for 1.5 s, longer than
 * the window: three limiters in this process (three instances, counted by heartbeats on another
 * master, so they keep beating), one limit of 20 a second, counted by slices of 50 ms and by the exact
 * log, offered four times the limit in all. In every window of 1 s: admitted ≤ 1.1 × the limit,
 * Redis-decided alone ≤ the limit.
 *
 * Two clocks measure it: the decisions' own (`resetAtMs - windowMs`: for a call Redis admitted in a
 * slice, the slice's end, until which plus the window Redis counts it; for a local one, its time), and
 * the time each admission reached the caller. Before the fix, the local windows of limitAll() answered
 * on the whole share whatever Redis had told (limit()'s answer on this instance's part), and let a call
 * Redis admitted in a slice go at its own time plus the window: 22 to 26 of 20 by slices, over 22 in
 * 5 of 6 runs; 22 to 24 by the exact log, over in 2 of 6. docs/resolution.md states what remains:
 * an instance that has not heard from Redis for a while answers on the free part it last saw.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ResilientLimiter, type LimitAllDecision } from '../src/index.ts';
import { windowModel } from '../src/redis/models/choose.ts';
import type { WindowModel } from '../src/redis/models/WindowModel.ts';
import { maxInAnyWindow, prng } from '../test/support/model.ts';
import type { RedisCluster } from '../test/support/cluster.ts';
import { useCluster } from '../test/support/useCluster.ts';

const LIMIT = 20;
const WINDOW_MS = 1000;
const INSTANCES = 3;
/** The documented bound of mode 'local': 1.1 × the limit (22 here; the shares alone add up to 3 × 7 = 21). */
const BOUND = Math.floor(LIMIT * 1.1);
/** What happens when, in ms from the start of the load: the freeze lasts longer than a window. */
const TIMELINE = { freeze: 2500, thaw: 4000, end: 7000 };

/** An admitted call: when, on the decision's clock and as the caller saw it, and who decided it. */
type Admitted = { stampMs: number; seenMs: number; instance: number; source: string; reason: string };

/** A prefix whose heartbeat set (`<prefix>instances`) is on another master than `key`'s window: the instances keep beating. */
function prefixApart(cluster: RedisCluster, model: WindowModel): { prefix: string; victim: number } {
  for (;;) {
    const prefix = `frozen:${randomUUID()}:`;
    const victim = cluster.nodeOf(model.allWindow(prefix, 'k', WINDOW_MS).redisKey);
    if (cluster.nodeOf(`${prefix}instances`) !== victim) return { prefix, victim };
  }
}

/** Runs the timeline with `offered[i]` × the limit a second offered by instance i (Poisson arrivals); every admitted call. */
async function run(cluster: RedisCluster, resolutionMs: number | undefined, offered: readonly number[], seed: number): Promise<Admitted[]> {
  const random = prng(seed);
  const { prefix, victim } = prefixApart(cluster, windowModel({ windowMs: WINDOW_MS, resolutionMs }));
  const limiters = Array.from({ length: INSTANCES }, () => {
    const redis = cluster.client({
      enableOfflineQueue: false,
      redisOptions: { maxRetriesPerRequest: 0 },
      retryDelayOnFailover: 0,
      retryDelayOnClusterDown: 0,
    });
    return new ResilientLimiter({ redis, prefix, limit: LIMIT, windowMs: WINDOW_MS, resolutionMs, local: { instances: 'auto' } });
  });
  const admitted: Admitted[] = [];
  const node = cluster.nodes[victim];
  try {
    // Instances beat fast at first: they count each other within a beat (reason: a loaded machine).
    const counted = Date.now() + 5000;
    while (limiters.some((l) => l.stats().instances < INSTANCES)) {
      if (Date.now() > counted) throw new Error('the limiters did not count each other');
      await sleep(20);
    }
    let running = true;
    const pending = new Set<Promise<void>>();
    const record = (instance: number) => (d: LimitAllDecision) => {
      if (!d.allowed) return;
      const stampMs = (d.decisions[0]?.resetAtMs as number) - WINDOW_MS;
      admitted.push({ stampMs, seenMs: performance.timeOrigin + performance.now(), instance, source: d.source, reason: d.reason });
    };
    const loads = limiters.map(async (l, instance) => {
      const perMs = ((offered[instance] as number) * LIMIT) / WINDOW_MS;
      let next = performance.now();
      while (running) {
        while (performance.now() >= next) {
          next += -Math.log(1 - random()) / perMs;
          const call = l.limitAll([{ key: 'k', limit: LIMIT, windowMs: WINDOW_MS }]).then(record(instance));
          pending.add(call);
          void call.finally(() => pending.delete(call));
        }
        await sleep(1);
      }
    });
    const start = performance.now();
    const at = (ms: number) => sleep(Math.max(0, ms - (performance.now() - start)));
    await at(TIMELINE.freeze);
    node?.freeze();
    await at(TIMELINE.thaw);
    node?.thaw();
    await at(TIMELINE.end);
    running = false;
    await Promise.all(loads);
    await Promise.all([...pending]);
    return admitted;
  } finally {
    node?.thaw();
    await Promise.all(limiters.map((l) => l.close()));
  }
}

/** The most admitted in any window, by the decisions' clock and by the caller's, and Redis's alone; printed with the calls by source. */
function most(name: string, admitted: readonly Admitted[]): { stamped: number; seen: number; redis: number } {
  const count = (of: readonly Admitted[], at: (a: Admitted) => number) =>
    maxInAnyWindow(
      of.map((a) => ({ at: at(a), cost: 1 })),
      WINDOW_MS,
    );
  const figures = {
    stamped: count(admitted, (a) => a.stampMs),
    seen: count(admitted, (a) => a.seenMs),
    redis: count(
      admitted.filter((a) => a.source === 'redis'),
      (a) => a.stampMs,
    ),
  };
  const by: Record<string, number> = {};
  for (const a of admitted) by[`${a.source}/${a.reason}`] = (by[`${a.source}/${a.reason}`] ?? 0) + 1;
  // The busiest window by the decisions' clock: its calls, ms from the first one, instance, source/reason.
  const sorted = [...admitted].sort((a, b) => a.stampMs - b.stampMs);
  let busiest: Admitted[] = [];
  for (let end = 0, start = 0; end < sorted.length; end++) {
    while ((sorted[start] as Admitted).stampMs <= (sorted[end] as Admitted).stampMs - WINDOW_MS) start++;
    if (end - start + 1 > busiest.length) busiest = sorted.slice(start, end + 1);
  }
  const from = busiest[0]?.stampMs ?? 0;
  const calls = busiest.map((a) => `${Math.round(a.stampMs - from)} #${a.instance} ${a.source}/${a.reason}`).join(', ');
  console.log(
    `${name}: most admitted in a window of ${WINDOW_MS} ms ${JSON.stringify(figures)} (limit ${LIMIT}); ${JSON.stringify(by)}; the busiest: ${calls}`,
  );
  return figures;
}

describe('limitAll() on a Cluster whose master of the key is frozen 1.5 s, three instances', () => {
  const cluster = useCluster({});
  const even = { offered: '4 × the limit in all', rates: [1.33, 1.33, 1.33] };
  it.each([
    { counted: 'by slices of 50 ms', resolutionMs: 50, ...even, seed: 3 },
    { counted: 'by the exact log', resolutionMs: undefined, ...even, seed: 4 },
  ])(
    'counted $counted, offered $offered: within 1.1 × the limit in every window, Redis alone within it',
    async ({ counted, resolutionMs, offered, rates, seed }) => {
      const admitted = await run(cluster, resolutionMs, rates, seed);
      const { stamped, seen, redis } = most(`counted ${counted}, offered ${offered}`, admitted);
      // Redis decided most calls: the load reached it before and after the freeze.
      expect(admitted.filter((a) => a.source === 'redis').length).toBeGreaterThan(3 * LIMIT);
      expect(redis).toBeLessThanOrEqual(LIMIT);
      expect(stamped).toBeLessThanOrEqual(BOUND);
      expect(seen).toBeLessThanOrEqual(BOUND);
    },
    30_000,
  );
});
