/**
 * lua/sliced-window.lua against a model of its rule, on a real redis-server: random sequences of every
 * op (decisions of random cost, limit and penalty, peeks, write-backs of older, newer, future and
 * expired calls, refunds of real, repeated and made-up ids, resets, blocks and unblocks, windowMs changed by
 * less or more than a slice as `update()` would), with time jumps from 0 to 65,536 slices, on the
 * script's injected clock. After every op: the reply against the model's, a peek's `used`, the key's
 * TTL (read and removed inside the op's MULTI, the key deleted by the test when its TTL ends on the
 * injected clock), and the hash's invariants (slice fields only from "l" on, at most W / res + 2 of
 * them; a peek writes nothing). Written by a review: it found three defects (a write-back after every
 * slice died left fields without "l"; a refusal while blocked moved "l" over dead slices; a window
 * raised by less than a slice kept the TTL of the old one).
 *
 *   N=300 STEPS=250 npx vitest run test/integration/slicedWindow.model.test.ts   # more seeds
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { joinPrelude } from '../../src/redis/scripts/script.js';
import { prng, SliceCounts } from '../support/model.js';
import { startRedisServer, type RedisChild } from '../support/redis.js';
import { decodeSliced, sliceFieldErrors, slicedFields } from '../support/slicedHash.js';

// LUA: another copy of the script to test (joined with the prelude of lua/ as the loader joins it).
const SRC = joinPrelude(readFileSync(process.env['LUA'] ?? new URL('../../lua/sliced-window.lua', import.meta.url), 'utf8'));
let server: RedisChild;
let r: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  r = server.client();
});
afterAll(async () => {
  await server.close();
});

type Op = string;
class Model extends SliceCounts {
  b = 0;
  ids = new Set<string>();
  decide(now: number, cost: number, limit: number, blockMs: number) {
    const n = this.used(now);
    const blocked = this.b > now;
    const cur = Math.floor(now / this.res);
    if (cost > 0 && !blocked && n + cost <= limit) {
      this.add(cur, cost);
      return { allowed: 1, used: n + cost, retry: 0, flags: 0 };
    }
    let retry = this.retry(now, n + Math.max(cost, 1) - limit);
    let allowed = 0;
    let isBlocked = blocked;
    if (blocked) retry = Math.max(retry, this.b - now);
    else if (cost > 0 && blockMs > 0) {
      this.b = now + blockMs;
      retry = Math.max(retry, blockMs);
      isBlocked = true;
    } else if (cost === 0 && n + 1 - limit <= 0) allowed = 1;
    return { allowed, used: n, retry, flags: isBlocked && !allowed ? 2 : 0 };
  }
  refund(now: number, s: number, cost: number, id: string) {
    const liveH = this.liveH(now);
    if (liveH === undefined || s < this.first(now) || s > liveH) return 0;
    // A slice up to a reset's holds no call from before it.
    if (this.resetAt !== undefined && s <= Math.floor(this.resetAt / this.res)) return 0;
    const c = this.slices.get(s) ?? 0;
    if (c >= cost && !this.ids.has(id)) {
      this.ids.add(id);
      this.slices.set(s, c - cost);
      return cost;
    }
    return 0;
  }
  resetAt: number | undefined;
  reset(now: number) {
    this.slices.clear();
    this.h = undefined;
    this.b = 0;
    this.resetAt = now;
    return 0;
  }
  block(now: number, ms: number) {
    this.b = ms === 0 ? 0 : now + ms;
    return this.b;
  }
  gc(now: number) {
    const f = this.first(now);
    for (const s of [...this.slices.keys()]) if (s < f) this.slices.delete(s);
    if (this.h !== undefined && this.h < f) this.h = undefined;
  }
}

async function run(seed: number, steps: number): Promise<string[]> {
  const rand = prng(seed);
  const pick = <T>(a: T[]) => a[Math.floor(rand() * a.length)] as T;
  let W = pick([1000, 700, 100, 4000]);
  const res = pick([1, 7, 100, 250, W].filter((x) => x <= W && W / x <= 4096));
  const key = `k${seed}`;
  const fkey = `${key}:f`;
  const m = new Model(W, res);
  let now = 1_000_000 + Math.floor(rand() * 100000);
  let exp = Infinity; // key's expiry on the injected clock
  let fexp = Infinity;
  const admitted: { id: string; s: number; cost: number }[] = [];
  const log: Op[] = [`W=${W} res=${res}`];
  const errs: string[] = [];
  let idn = 0;
  const limitBase = pick([1, 3, 10, 50]);
  /** The window was lengthened since the key's TTL was last set. */
  let stale = false;
  /** The window changed during the sequence. */
  let changed = false;
  for (let step = 0; step < steps && errs.length === 0; step++) {
    const jump = pick([
      0,
      0,
      1,
      Math.floor(res / 2),
      res,
      Math.floor(rand() * W),
      W,
      W + res,
      3 * W,
      Math.floor(rand() * 3 * res),
      65536 * res + Math.floor(rand() * 3 * res),
    ]);
    now += jump;
    if (exp <= now) {
      await r.del(key);
      exp = Infinity;
      // A key that expired under a window lengthened since its last write: its calls are gone, as an
      // exact log's are (a window lengthened by update() applies to a key from its next write on).
      if (stale) {
        m.slices.clear();
        m.h = undefined;
      }
    }
    if (fexp <= now) {
      await r.del(fkey);
      fexp = Infinity;
    }
    // TTL check: key must live while live slices hold permits
    const needUntil = Math.max(
      ...m
        .live(now)
        .filter(([, c]) => c > 0)
        .map(([s]) => (s + 1) * res + W),
      0,
    );
    const kind = rand();
    let args: (string | number)[];
    let keys = [key];
    let expect_: unknown;
    let desc: string;
    if (kind < 0.05) {
      // The window changed (update({ windowMs })): by less than a slice, or more, either way.
      const next = Math.max(res, W + pick([Math.ceil(res / 2), -Math.ceil(res / 2), res, -res, W]));
      if (next / res <= 4096) {
        // From here the replies are not compared: slices dead under the old window and not dropped yet
        // count again under a longer one (as an exact log's members not trimmed yet do), which the
        // model does not follow. The TTL and the hash's invariants are still checked, on the hash.
        changed = true;
        if (next > W) stale = true;
        W = next;
        m.W = next;
      }
      continue;
    } else if (kind < 0.5) {
      const limit = Math.max(1, limitBase + Math.floor(rand() * 3) - 1);
      const cost = rand() < 0.15 ? 0 : Math.min(limit, 1 + Math.floor(rand() * Math.min(limit, 4)));
      const blockMs = rand() < 0.1 ? pick([1, res, W, 2 * W]) : 0;
      args = ['d', W, res, now, '', blockMs, '', limit, cost];
      const e = m.decide(now, cost, limit, blockMs);
      if (e.allowed && cost > 0) admitted.push({ id: `i${idn++}@${Math.floor(now / res)}`, s: Math.floor(now / res), cost });
      expect_ = `${now},0,${e.allowed},${e.used},${e.retry}`;
      desc = `d t=${now} cost=${cost} limit=${limit} blockMs=${blockMs}`;
    } else if (kind < 0.65) {
      const calls: [number, number][] = [];
      const k = 1 + Math.floor(rand() * 3);
      for (let i = 0; i < k; i++)
        calls.push([now - Math.floor(rand() * (W + 2 * res)) + (rand() < 0.1 ? 5 * res : 0), 1 + Math.floor(rand() * 3)]);
      args = ['w', W, res, now, ...calls.flat()];
      expect_ = m.writeBack(now, calls).join(',');
      desc = `w t=${now} ${JSON.stringify(calls)}`;
    } else if (kind < 0.85) {
      let s: number, cost: number, id: string;
      if (admitted.length > 0 && rand() < 0.8) {
        const a = pick(admitted);
        s = a.s;
        id = a.id;
        cost = rand() < 0.8 ? a.cost : 1 + Math.floor(rand() * 3);
      } else {
        s = Math.floor(now / res) - Math.floor(rand() * (W / res + 2));
        cost = 1;
        id = `x${idn++}@${s}`;
      }
      args = ['f', W, res, now, s, cost, id];
      keys = [key, fkey];
      expect_ = String(m.refund(now, s, cost, id));
      desc = `f t=${now} s=${s} cost=${cost} id=${id}`;
    } else if (kind < 0.9) {
      args = ['r', W, res, now];
      expect_ = m.reset(now);
      desc = `r t=${now}`;
    } else {
      const ms = pick([0, 0, 1, res, W, 3 * W]);
      args = ['b', W, res, now, ms];
      expect_ = m.block(now, ms);
      desc = `b t=${now} ms=${ms}`;
    }
    const before = await slicedFields(r, key);
    const sentAt = performance.now();
    const out = await r
      .multi()
      .eval(SRC, keys.length, ...keys, ...args)
      .pttl(key)
      .pttl(fkey)
      .persist(key)
      .persist(fkey)
      .hgetallBuffer(key)
      .exec();
    const reply = out![0]![1] as unknown;
    const ttl = out![1]![1] as number;
    const fttl = out![2]![1] as number;
    const after = decodeSliced(key, out![5]![1] as Record<string, Buffer>);
    // PTTL reads Redis's real clock a little after the script set the TTL: at most the round trip of
    // the MULTI later (ms on a loaded machine), so that much is added back, and 1 ms of rounding.
    const slack = Math.ceil(performance.now() - sentAt) + 1;
    if (ttl >= 0) exp = now + ttl + slack;
    if (ttl === -2) exp = Infinity;
    if (fttl >= 0) fexp = now + fttl + slack;
    if (fttl === -2) fexp = Infinity;
    log.push(`${desc} W=${W} -> ${JSON.stringify(reply)} ${JSON.stringify(after)} exp=${exp}`);
    let got: string;
    if (args[0] === 'd') got = String(reply).split(',').slice(0, 5).join(',');
    else if (args[0] === 'w') got = (reply as number[]).join(',');
    else got = String(reply);
    if (!changed && got !== String(expect_)) errs.push(`reply ${got} expected ${expect_}`);
    // invariants
    m.gc(now);
    const liveUntil = Math.max(
      ...m
        .live(now)
        .filter(([, c]) => c > 0)
        .map(([s]) => (s + 1) * res + W),
      m.b,
      0,
    );
    // Every write that sets the TTL sets it for the current window: a decision of cost > 0, a block,
    // a write-back that wrote (not a peek, a refund, or a write-back of expired calls only).
    if ((args[0] === 'd' && args[8] !== 0) || args[0] === 'b' || (args[0] === 'w' && String(got).split(',')[0] !== '0')) stale = false;
    if (!changed && liveUntil > now && exp < liveUntil) errs.push(`TTL ends at ${exp} before ${liveUntil}`);
    if (!changed && needUntil > now && Object.keys(before).length === 0 && m.used(now) > 0) errs.push('key gone while live permits');
    // On the hash itself: the key lives until its newest slice with permits leaves this window.
    const newestEnd = after['h'] !== undefined && Number(after['n']) > 0 ? (Number(after['h']) + 1) * res + W : 0;
    if (changed && !stale && newestEnd > now && exp < newestEnd) errs.push(`TTL ends at ${exp} before the newest slice's end ${newestEnd}`);
    errs.push(...sliceFieldErrors(after, W, res));
    // peek to compare state
    const peek = String(await r.eval(SRC, 1, key, 'd', W, res, now, '', 0, '', 1000000, 0)).split(',');
    const pu = m.used(now);
    if (!changed && Number(peek[3]) !== pu) errs.push(`peek used ${peek[3]} expected ${pu}`);
    const after2 = await slicedFields(r, key);
    if (JSON.stringify(after2) !== JSON.stringify(after)) errs.push('peek wrote');
  }
  return errs.length ? [...log.slice(-12), ...errs] : [];
}

it('matches the model of the slice rule over random sequences of every op, and keeps its invariants', async () => {
  const fails: string[][] = [];
  const N = Number(process.env['N'] ?? 60);
  for (let seed = 1; seed <= N; seed++) {
    const e = await run(seed, Number(process.env['STEPS'] ?? 150));
    if (e.length) fails.push([`seed ${seed}`, ...e]);
  }
  for (const f of fails.slice(0, Number(process.env['SHOW'] ?? 4))) console.log(f.join('\n'));
  console.log('failing seeds', fails.map((f) => f[0]).join(' '));
  expect(fails.length).toBe(0);
}, 300_000);
