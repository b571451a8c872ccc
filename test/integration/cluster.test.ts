import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import calculateSlot from 'cluster-key-slot';
import type { Cluster } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { RedisWindow, ResilientLimiter, type LimiterDecision, type RedisDecision, type ResilientLimiterOptions } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';
import { maxInAnyWindow, prng, ReferenceWindow } from '../support/model.js';

// Every master knows the script before any test counts script calls (a NOSCRIPT adds an EVAL).
const cluster = useCluster({ clients: 3, warmScript: true });
/** Several clients of the one cluster: every test spreads its calls over them. */
let clients: readonly Cluster[];
let redis: Cluster;
beforeAll(() => {
  ({ clients, redis } = cluster);
});

/** `perMaster` keys on each master, each in a slot of its own, none in `avoid`. */
function keysOnEveryMaster(prefix: string, perMaster: number, avoid?: ReadonlySet<number>): string[] {
  return cluster.keysOnEveryMaster(perMaster, (k) => redisKey(prefix, k), avoid === undefined ? {} : { avoidSlots: avoid });
}

/** Script calls run by each master since it started. */
function scriptCalls(): Promise<number[]> {
  return Promise.all(cluster.nodes.map((_, i) => cluster.scriptCalls(i)));
}

function limiters(count: number, options: Omit<ResilientLimiterOptions, 'redis'>): ResilientLimiter[] {
  return clients.slice(0, count).map((c) => new ResilientLimiter({ redis: c, local: { instances: 1 }, ...options }));
}

describe('on a Redis Cluster of three masters: exactness across slots', () => {
  it('keeps an exact window per key in a burst from several clients, with keys on every master', async () => {
    const prefix = `t:${randomUUID()}:`;
    const windows = clients.map((c) => new RedisWindow({ redis: c, prefix, limit: 5, windowMs: 60_000 }));
    const keys = keysOnEveryMaster(prefix, 10);
    expect(new Set(keys.map((k) => calculateSlot(redisKey(prefix, k)))).size).toBe(30);
    const before = await scriptCalls();
    const decisions = await Promise.all(
      keys.flatMap((k) => Array.from({ length: 8 }, (_, i) => (windows[i % 3] as RedisWindow).limit(k).then((d) => ({ k, d })))),
    );
    for (const k of keys) {
      const own = decisions.filter((x) => x.k === k).map((x) => x.d);
      // As the model says for 8 calls of cost 1 in one window: 5 admitted, leaving 4, 3, 2, 1, 0.
      expect({
        k,
        remaining: own
          .filter((d) => d.allowed)
          .map((d) => d.remaining)
          .sort(),
      }).toEqual({ k, remaining: [0, 1, 2, 3, 4] });
      expect({ k, rejected: own.filter((d) => !d.allowed).map((d) => d.remaining) }).toEqual({ k, rejected: [0, 0, 0] });
    }
    for (const w of windows) for (const k of keys) expect((await w.peek(k)).remaining).toBe(0);
    // Every master ran its ten keys' calls (one script call each) and holds their windows.
    const after = await scriptCalls();
    expect(after.map((n, i) => n - (before[i] as number))).toEqual([80, 80, 80].map((n) => n + 10 * windows.length));
    const perNode = await Promise.all(
      cluster.nodes.map(async (n) => Number(/keys=(\d+)/.exec((await n.info('keyspace'))['db0'] ?? '')?.[1] ?? 0)),
    );
    expect(perNode.every((count) => count >= 10)).toBe(true);
  });

  it("RedisWindow: sequential traffic per key, on every master through several clients, matches the model on Redis's clock", async () => {
    const prefix = `t:${randomUUID()}:`;
    const limit = 4;
    const windowMs = 150;
    const windows = clients.map((c) => new RedisWindow({ redis: c, prefix, limit, windowMs }));
    const keys = keysOnEveryMaster(prefix, 6);
    const checked = await Promise.all(
      keys.map(async (key, k) => {
        const random = prng(100 + k);
        const model = new ReferenceWindow(limit, windowMs);
        const seen = { admitted: 0, rejected: 0 };
        for (let i = 0; i < 80; i++) {
          if (random() < 0.5) await sleep(Math.floor(random() * 25));
          const cost = random() < 0.15 ? 2 : 1;
          const {
            nowMs,
            duplicate,
            blocked: _blocked,
            ...decision
          } = await (windows[Math.floor(random() * 3)] as RedisWindow).limit(key, { cost });
          model.forget(nowMs);
          expect({ key, i, ...decision }).toEqual({ key, i, ...model.limitAt(nowMs, cost), limit, source: 'redis' });
          expect(duplicate).toBe(false);
          seen[decision.allowed ? 'admitted' : 'rejected'] += cost;
        }
        return { key, ...seen };
      }),
    );
    // On every key, the window slid (more than one window's permits were admitted) and was filled.
    for (const seen of checked) expect({ ...seen, ok: seen.admitted > limit && seen.rejected > 0 }).toMatchObject({ ok: true });
  });

  it('RedisWindow: concurrent calls from several clients never exceed the limit in any window, and fill it', async () => {
    const prefix = `t:${randomUUID()}:`;
    const limit = 10;
    const windowMs = 100;
    const windows = clients.map((c) => new RedisWindow({ redis: c, prefix, limit, windowMs }));
    const keys = keysOnEveryMaster(prefix, 4);
    const byKey = new Map<string, RedisDecision[]>(keys.map((k) => [k, []]));
    const until = Date.now() + 800;
    await Promise.all(
      keys.flatMap((key) =>
        windows.flatMap((w) =>
          Array.from({ length: 2 }, async () => {
            while (Date.now() < until) byKey.get(key)?.push(await w.limit(key));
          }),
        ),
      ),
    );
    for (const [key, decisions] of byKey) {
      const admitted = decisions.filter((d) => d.allowed).map((d) => ({ at: d.nowMs, cost: 1 }));
      expect({ key, max: maxInAnyWindow(admitted, windowMs) }).toEqual({ key, max: limit });
      // About 8 windows went by: the limit was reached again and again, not just respected.
      expect(admitted.length).toBeGreaterThanOrEqual(limit * 5);
      expect(admitted.length).toBeLessThanOrEqual(limit * 10);
      expect(decisions.length).toBeGreaterThan(admitted.length);
    }
  });

  it('ResilientLimiter: sequential traffic per key through several limiters matches the model, call by call', async () => {
    const prefix = `t:${randomUUID()}:`;
    const limit = 4;
    const windowMs = 200;
    const c = { t: 1_000_000 };
    const ls = limiters(3, { prefix, limit, windowMs, clock: () => c.t, breaker: { timeoutMs: 2000 }, slowCallMs: 2000 });
    try {
      const keys = keysOnEveryMaster(prefix, 8);
      const models = new Map(keys.map((k) => [k, new ReferenceWindow(limit, windowMs)]));
      const random = prng(7);
      const reasons = new Map<string, number>();
      for (let round = 0; round < 60; round++) {
        // One call per key in this turn, on any limiter: concurrent over keys and masters, sequential per key.
        const calls = keys.map((key) => ({ key, cost: random() < 0.2 ? 2 : 1, l: ls[Math.floor(random() * 3)] as ResilientLimiter }));
        const decisions = await Promise.all(calls.map(({ key, cost, l }) => l.limit(key, { cost })));
        calls.forEach(({ key, cost }, i) => {
          const d = decisions[i] as LimiterDecision;
          const want = (models.get(key) as ReferenceWindow).limitAt(c.t, cost);
          reasons.set(d.reason, (reasons.get(d.reason) ?? 0) + 1);
          if (d.reason === 'decided') {
            expect({ round, key, ...d }).toEqual({
              round,
              key,
              ...want,
              limit,
              source: 'redis',
              reason: 'decided',
              reducedCapacity: false,
              id: want.allowed ? expect.any(String) : undefined,
            });
          } else {
            // A key Redis rejected is rejected locally until its retryAfterMs (deny cache): the model agrees.
            expect({ round, key, reason: d.reason, allowed: d.allowed }).toEqual({
              round,
              key,
              reason: 'deny-cache',
              allowed: want.allowed,
            });
          }
        });
        c.t += Math.floor(random() * 60);
      }
      expect([...reasons.keys()].sort()).toEqual(['decided', 'deny-cache']);
      for (const [key, model] of models) expect({ key, max: model.maxInAnyWindow() }).toEqual({ key, max: limit });
    } finally {
      await Promise.all(ls.map((l) => l.close()));
    }
  });

  it("ResilientLimiter: concurrent calls from several limiters never exceed the limit in any window (Redis's clock)", async () => {
    const prefix = `t:${randomUUID()}:`;
    const limit = 8;
    const windowMs = 100;
    const ls = limiters(3, { prefix, limit, windowMs, breaker: { timeoutMs: 2000 }, slowCallMs: 2000 });
    try {
      const keys = keysOnEveryMaster(prefix, 4);
      const byKey = new Map<string, LimiterDecision[]>(keys.map((k) => [k, []]));
      // At least 800 ms, and until every key has had 6 windows' worth admitted (10 s at most): a machine
      // busy starting other test files' clusters made fewer calls in 800 ms than 5 windows need, once.
      const started = Date.now();
      const enough = (key: string): boolean => (byKey.get(key) ?? []).filter((d) => d.allowed).length >= limit * 6;
      const going = (key: string): boolean => Date.now() - started < 800 || (!enough(key) && Date.now() - started < 10_000);
      await Promise.all(
        keys.flatMap((key) =>
          ls.flatMap((l) =>
            Array.from({ length: 2 }, async () => {
              while (going(key)) byKey.get(key)?.push(await l.limit(key));
            }),
          ),
        ),
      );
      const windows = Math.ceil((Date.now() - started) / windowMs) + 1;
      for (const [key, decisions] of byKey) {
        // Redis decided every call, or its deny cache repeated a rejection: nothing came from the fallback.
        expect({ key, others: decisions.filter((d) => d.reason !== 'decided' && d.reason !== 'deny-cache').map((d) => d.reason) }).toEqual({
          key,
          others: [],
        });
        expect(decisions.some((d) => !d.allowed)).toBe(true);
        // Only Redis admits here; an admitted call is the newest in its window, so resetAtMs - windowMs is its time.
        const admitted = decisions.filter((d) => d.allowed).map((d) => ({ at: d.resetAtMs - windowMs, cost: 1 }));
        expect({ key, max: maxInAnyWindow(admitted, windowMs) }).toEqual({ key, max: limit });
        expect(admitted.length).toBeGreaterThanOrEqual(limit * 5);
        expect(admitted.length).toBeLessThanOrEqual(limit * windows);
      }
    } finally {
      await Promise.all(ls.map((l) => l.close()));
    }
  });

  it('ResilientLimiter with resolutionMs: several limiters on keys of every master never exceed the limit in any window', async () => {
    const prefix = `t:${randomUUID()}:`;
    const limit = 8;
    const windowMs = 200;
    const ls = limiters(3, { prefix, limit, windowMs, resolutionMs: 20, breaker: { timeoutMs: 2000 }, slowCallMs: 2000 });
    try {
      const keys = keysOnEveryMaster(prefix, 3);
      const byKey = new Map<string, LimiterDecision[]>(keys.map((k) => [k, []]));
      const started = Date.now();
      const enough = (key: string): boolean => (byKey.get(key) ?? []).filter((d) => d.allowed).length >= limit * 4;
      const going = (key: string): boolean => Date.now() - started < 800 || (!enough(key) && Date.now() - started < 10_000);
      await Promise.all(
        keys.flatMap((key) =>
          ls.map(async (l) => {
            while (going(key)) byKey.get(key)?.push(await l.limit(key));
          }),
        ),
      );
      for (const [key, decisions] of byKey) {
        expect({ key, others: decisions.filter((d) => d.reason !== 'decided' && d.reason !== 'deny-cache').map((d) => d.reason) }).toEqual({
          key,
          others: [],
        });
        // An admitted call's resetAtMs is the end of its slice plus the window: binned by slice end, no
        // window holds more than the limit (each call counts from before its slice's end).
        const admitted = decisions.filter((d) => d.allowed).map((d) => ({ at: d.resetAtMs - windowMs, cost: 1 }));
        expect({ key, max: maxInAnyWindow(admitted, windowMs) <= limit }).toEqual({ key, max: true });
        expect(admitted.length).toBeGreaterThanOrEqual(limit * 3);
      }
    } finally {
      await Promise.all(ls.map((l) => l.close()));
    }
  });

  it('ResilientLimiter with hotKeys: leases on keys of every master (the lease marker in the key\u2019s slot), never over the limit', async () => {
    const prefix = `t:${randomUUID()}:`;
    const limit = 300;
    // One window longer than the run: every admission of a key is in one window, so the bound is its count.
    const windowMs = 30_000;
    const ls = limiters(3, { prefix, limit, windowMs, hotKeys: { validityMs: 100 }, breaker: { timeoutMs: 2000 }, slowCallMs: 2000 });
    try {
      const keys = keysOnEveryMaster(prefix, 2);
      const byKey = new Map<string, LimiterDecision[]>(keys.map((k) => [k, []]));
      const started = Date.now();
      const full = (key: string): boolean => (byKey.get(key) ?? []).some((d) => !d.allowed);
      await Promise.all(
        keys.flatMap((key) =>
          ls.map(async (l) => {
            while (!full(key) && Date.now() - started < 10_000) byKey.get(key)?.push(await l.limit(key));
          }),
        ),
      );
      for (const [key, decisions] of byKey) {
        // A take whose marker were in another slot would fail (CROSSSLOT): a reply error, not 'decided'.
        expect({ key, others: decisions.filter((d) => d.reason !== 'decided' && d.reason !== 'deny-cache').map((d) => d.reason) }).toEqual({
          key,
          others: [],
        });
        const admitted = decisions.filter((d) => d.allowed).length;
        expect({ key, admitted: admitted <= limit, refused: full(key) }).toEqual({ key, admitted: true, refused: true });
        // Leases took part: a member `<permits>*<lease id>` in the key's sorted set.
        const members = await redis.zrange(redisKey(prefix, key), '0', '-1');
        expect(members.some((m) => /^\d+\*/.test(m))).toBe(true);
      }
    } finally {
      await Promise.all(ls.map((l) => l.close()));
    }
  });

  it('runs the resilient limiter, its reconciliation and its heartbeats', async () => {
    // A deadline a loaded machine cannot miss (its Cluster round trips took longer than the default
    // 50 ms once, under two busy loops and the other test files): this test is about reconciliation
    // and heartbeats, and a missed deadline answers locally.
    const l = new ResilientLimiter({
      redis,
      prefix: `t:${randomUUID()}:`,
      limit: 4,
      windowMs: 60_000,
      heartbeatMs: 100,
      breaker: { timeoutMs: 2000 },
      slowCallMs: 2000,
    });
    try {
      const first = await Promise.all(Array.from({ length: 6 }, () => l.limit('k')));
      expect(first.filter((d) => d.allowed && d.source === 'redis')).toHaveLength(4);
      // Its first beat answered: it holds a lease, and answers on its whole share while Redis cannot.
      for (let i = 0; (l.stats().leaseLeftMs ?? 0) === 0; i++) {
        if (i > 250) throw new Error('no heartbeat answered in 5 s');
        await sleep(20);
      }
      l.forceOpen();
      const local = await l.limit('other');
      expect(local).toMatchObject({ allowed: true, source: 'local' });
      l.forceClose();
      await l.reconcile();
      expect(l.stats().reconcile).toMatchObject({ written: 1, pending: 0 });
      expect(await l.limit('other')).toMatchObject({ source: 'redis', remaining: 2 });
      await sleep(250);
      expect(l.stats().instances).toBe(1);
    } finally {
      await l.close();
    }
  });
});

describe('on a Redis Cluster of three masters: coalescing per hash slot', () => {
  /** Keys that share a hash slot in pairs (found by search: the whole user key is the hash tag). */
  function sameSlotPairs(prefix: string, pairs: number): [string, string][] {
    const seen = new Map<number, string>();
    const found: [string, string][] = [];
    const nodes = new Set<number>();
    for (let i = 0; found.length < pairs; i++) {
      const key = `p${i}`;
      const slot = calculateSlot(redisKey(prefix, key));
      const other = seen.get(slot);
      const node = cluster.nodeOf(redisKey(prefix, key));
      // One pair per master first, so that every master gets one.
      if (other !== undefined && (!nodes.has(node) || nodes.size === cluster.nodes.length)) {
        found.push([other, key]);
        nodes.add(node);
        seen.delete(slot);
      } else if (other === undefined) {
        seen.set(slot, key);
      }
    }
    return found;
  }

  it('sends a turn of calls over many slots as one script call per slot (16 calls at most), decided exactly as one by one', async () => {
    const limit = 3;
    const windowMs = 60_000;
    const t = 1_000_000;
    const run = async (coalesce: boolean) => {
      const prefix = `t:${randomUUID()}:`;
      const l = new ResilientLimiter({
        redis,
        prefix,
        limit,
        windowMs,
        coalesce,
        clock: () => t,
        local: { instances: 1 },
        breaker: { timeoutMs: 2000 },
        slowCallMs: 2000,
      });
      try {
        const pairs = sameSlotPairs(prefix, 3);
        const singles = keysOnEveryMaster(prefix, 3, new Set(pairs.map(([a]) => calculateSlot(redisKey(prefix, a)))));
        // 3 slots holding two keys (3 calls each), 9 slots holding one key (4 calls each), and one of
        // them with 16 more: 20 calls, more than one script call carries.
        const calls: { key: string; cost: number }[] = [];
        for (const [a, b] of pairs) for (let i = 0; i < 3; i++) calls.push({ key: a, cost: 1 }, { key: b, cost: 1 + (i % 2) });
        for (const key of singles) for (let i = 0; i < 4; i++) calls.push({ key, cost: i === 1 ? 2 : 1 });
        for (let i = 0; i < 16; i++) calls.push({ key: singles[0] as string, cost: 1 });
        const perSlot = new Map<number, { calls: number; node: number }>();
        for (const { key } of calls) {
          const slot = calculateSlot(redisKey(prefix, key));
          const entry = perSlot.get(slot) ?? { calls: 0, node: cluster.nodeOf(redisKey(prefix, key)) };
          entry.calls += 1;
          perSlot.set(slot, entry);
        }
        const expected = cluster.nodes.map(() => 0);
        for (const { calls: n, node } of perSlot.values()) expected[node] = (expected[node] as number) + (coalesce ? Math.ceil(n / 16) : n);
        const before = await scriptCalls();
        const decisions = await Promise.all(calls.map(({ key, cost }) => l.limit(key, { cost })));
        const after = await scriptCalls();
        const models = new Map<string, ReferenceWindow>();
        calls.forEach(({ key, cost }, i) => {
          if (!models.has(key)) models.set(key, new ReferenceWindow(limit, windowMs));
          const want = (models.get(key) as ReferenceWindow).limitAt(t, cost);
          expect({ i, key, ...decisions[i] }).toEqual({
            i,
            key,
            ...want,
            limit,
            source: 'redis',
            reason: 'decided',
            reducedCapacity: false,
            id: want.allowed ? expect.any(String) : undefined,
          });
        });
        return { calls: calls.length, slots: perSlot.size, measured: after.map((n, i) => n - (before[i] as number)), expected, decisions };
      } finally {
        await l.close();
      }
    };
    const coalesced = await run(true);
    const oneByOne = await run(false);
    expect(coalesced.slots).toBe(12);
    // Per master, as counted by each master's INFO commandstats: one script call per slot (the slot
    // with 20 calls takes two), against one per call without coalescing.
    expect(coalesced.measured).toEqual(coalesced.expected);
    expect(coalesced.measured.reduce((a, b) => a + b)).toBe(13);
    expect(coalesced.measured.every((n) => n >= 4)).toBe(true);
    expect(oneByOne.measured).toEqual(oneByOne.expected);
    expect(oneByOne.measured.reduce((a, b) => a + b)).toBe(coalesced.calls);
    // The generated ids differ between the runs; the decisions are the same.
    const withoutId = (ds: LimiterDecision[]) => ds.map(({ id: _, ...d }) => d);
    expect(withoutId(coalesced.decisions)).toEqual(withoutId(oneByOne.decisions));
  });
});
