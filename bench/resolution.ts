/**
 * By the limit: Redis memory per key and Redis CPU per decision of resilimit's exact log, of its
 * window counted by slices (`resolutionMs`: 60 slices a window), and of rate-limiter-flexible's
 * `RateLimiterRedis` (a fixed-window counter), in one redis-server, side by side.
 *
 * 1. Memory: keys whose window is full, filled through each contender's API (the exact log one call
 *    of cost 1 per permit, up to limit 10,000: above, a key would hold a million members; the slices
 *    over the 60 slices of the window, their times injected; RLF `consume(key, limit)`), `MEMORY
 *    USAGE … SAMPLES 0`, mean over the keys.
 * 2. Redis CPU per decision (`INFO cpu` of the redis-server over the measured interval, per decision
 *    Redis made) and decisions/s at 64 callers over 2,000 keys filled to half their limit, the keys of
 *    the limit before removed first (slices:
 *    every slice of the window holds calls; the exact log up to limit 1,000), contenders
 *    alternating, 5 rounds pooled.
 * 3. By the number of keys (10³ … 10⁶, env KEY_COUNTS to change), at limit 1,000 (no key fills
 *    while measured, even at 10³ keys): every key given FILL_CALLS calls through each contender's API (64 callers), Redis
 *    memory per key as `used_memory` grew over that fill ÷ keys (the keyspace's own overhead
 *    included), then Redis CPU per decision and decisions/s at 64 callers over all the keys, 2 rounds.
 *
 *   node bench/resolution.ts
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { waitReady } from '../test/support/redis.ts';
import { bytes, perSecond, ratio, table } from './support/format.ts';
import { makeKeys, scaled } from './support/keys.ts';
import { Bench, main } from './support/report.ts';
import { createRedisClient, RedisWindow, ResilientLimiter } from './support/resilimit.ts';
import { startServer, type BenchServer } from './support/server.ts';

const WINDOW_MS = 60_000;
const RESOLUTION_MS = 1_000;
const MEMORY_LIMITS = [10, 100, 1_000, 10_000, 1_000_000];
/** Above it the exact log is not filled (a key would hold `limit` members: ~100 B each). */
const EXACT_MAX = 10_000;
const MEMORY_KEYS = 10;
const CPU_LIMITS = [1_000, 10_000, 1_000_000];
const CPU_KEYS = 2_000;
const CALLERS = 64;
const ROUNDS = 5;
const MEASURE_MS = scaled(1_000);

type Contender = { name: string; decide(key: string): Promise<boolean>; stop(): Promise<void> };

async function serverCpuUs(server: BenchServer): Promise<number> {
  const info = await server.redis.info('cpu');
  return (Number(info['used_cpu_user']) + Number(info['used_cpu_sys'])) * 1e6;
}

/** Fills a sliced window's key to `permits`, spread over the 60 slices before now (times injected). */
async function fillSlices(redis: Redis, prefix: string, limit: number, key: string, permits: number): Promise<void> {
  const start = Date.now() - WINDOW_MS + RESOLUTION_MS;
  let at = start;
  const filler = new RedisWindow({ redis, prefix, limit, windowMs: WINDOW_MS, resolutionMs: RESOLUTION_MS, now: () => at });
  const slices = WINDOW_MS / RESOLUTION_MS - 1;
  for (let s = 0; s < slices; s += 1) {
    at = start + s * RESOLUTION_MS;
    const share = Math.floor(permits / slices) + (s < permits % slices ? 1 : 0);
    if (share > 0) await filler.limit(key, { cost: share });
  }
}

async function memoryTable(bench: Bench, server: BenchServer): Promise<string[][]> {
  const redis = server.redis.client();
  await waitReady(redis);
  const rows: string[][] = [];
  for (const limit of MEMORY_LIMITS) {
    bench.progress(`memory at limit ${limit.toLocaleString('en-US')}`);
    const keys = makeKeys(MEMORY_KEYS, `mem${limit}:`);
    const mean = async (keyOf: (key: string) => string): Promise<number> => {
      let sum = 0;
      for (const key of keys) sum += await server.memoryUsage(keyOf(key));
      return sum / keys.length;
    };
    let exact: number | undefined;
    if (limit <= EXACT_MAX) {
      const w = new RedisWindow({ redis, prefix: `e${limit}:`, limit, windowMs: WINDOW_MS });
      for (const key of keys) await Promise.all(Array.from({ length: limit }, () => w.limit(key)));
      exact = await mean((key) => w.keyOf(key));
    }
    const sliced = new RedisWindow({ redis, prefix: `s${limit}:`, limit, windowMs: WINDOW_MS, resolutionMs: RESOLUTION_MS });
    for (const key of keys) await fillSlices(redis, `s${limit}:`, limit, key, limit);
    const slicedBytes = await mean((key) => sliced.keyOf(key));
    const rlf = new RateLimiterRedis({ storeClient: redis, points: limit, duration: WINDOW_MS / 1000, keyPrefix: `r${limit}` });
    for (const key of keys) await rlf.consume(key, limit);
    const rlfBytes = await mean((key) => `r${limit}:${key}`);
    rows.push([
      limit.toLocaleString('en-US'),
      exact === undefined ? `— (about ${bytes(limit * 100)})` : bytes(exact),
      bytes(slicedBytes),
      bytes(rlfBytes),
      ratio(slicedBytes, rlfBytes),
    ]);
  }
  redis.disconnect();
  return rows;
}

async function resilimitContender(
  server: BenchServer,
  name: string,
  prefix: string,
  limit: number,
  resolutionMs?: number,
): Promise<Contender> {
  const redis = createRedisClient(server.redis.url);
  await waitReady(redis as Redis);
  const limiter = new ResilientLimiter({
    redis,
    prefix,
    limit,
    windowMs: WINDOW_MS,
    local: { instances: 1 },
    ...(resolutionMs === undefined ? {} : { resolutionMs }),
  });
  return {
    name,
    decide: async (key) => {
      const d = await limiter.limit(key);
      if (d.source !== 'redis') throw new Error(`${name}: a decision not made by Redis (${d.reason}): the measure would not be Redis's`);
      return d.allowed;
    },
    stop: async () => {
      await limiter.close();
      redis.disconnect();
    },
  };
}

async function rlfContender(server: BenchServer, prefix: string, limit: number): Promise<Contender> {
  const client = server.redis.client();
  await waitReady(client);
  const rlf = new RateLimiterRedis({ storeClient: client, points: limit, duration: WINDOW_MS / 1000, keyPrefix: prefix });
  return {
    name: 'RLF',
    decide: (key) =>
      rlf.consume(key).then(
        () => true,
        (e: unknown) => {
          if (e instanceof RateLimiterRes) return false;
          throw e;
        },
      ),
    stop: async () => {
      client.disconnect();
    },
  };
}

/** 64 callers over `keys` for MEASURE_MS: decisions and the redis-server's CPU per decision. */
async function measure(
  server: BenchServer,
  c: Contender,
  keys: readonly string[],
): Promise<{ decisions: number; seconds: number; cpuUs: number }> {
  let next = 0;
  let decisions = 0;
  const cpu0 = await serverCpuUs(server);
  const t0 = performance.now();
  const until = t0 + MEASURE_MS;
  await Promise.all(
    Array.from({ length: CALLERS }, async () => {
      while (performance.now() < until) {
        await c.decide(keys[next++ % keys.length] as string);
        decisions += 1;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  return { decisions, seconds, cpuUs: (await serverCpuUs(server)) - cpu0 };
}

/** Key counts of the growth table (env KEY_COUNTS: a comma-separated list). */
const KEY_COUNTS = (process.env['KEY_COUNTS'] ?? '1000,10000,100000,1000000').split(',').map(Number);
const GROWTH_LIMIT = 1_000;
const FILL_CALLS = 1;

async function usedMemory(server: BenchServer): Promise<number> {
  return Number((await server.redis.info('memory'))['used_memory']);
}

/** By the number of keys: memory per key (the fill's growth of used_memory) and Redis CPU per decision, each mode and RLF. */
async function keyCountTable(bench: Bench, server: BenchServer): Promise<string[][]> {
  const rows: string[][] = [];
  const admin = server.redis.client();
  await waitReady(admin);
  for (const count of KEY_COUNTS) {
    const keys = makeKeys(count, `n${count}:`);
    const contenders = [
      await resilimitContender(server, 'exact', `ne${count}:`, GROWTH_LIMIT),
      await resilimitContender(server, 'slices', `ns${count}:`, GROWTH_LIMIT, RESOLUTION_MS),
      await rlfContender(server, `nr${count}`, GROWTH_LIMIT),
    ];
    const perKey = new Map<string, number>();
    for (const c of contenders) {
      bench.progress(`${count.toLocaleString('en-US')} keys: filling for ${c.name}`);
      const before = await usedMemory(server);
      let next = 0;
      await Promise.all(
        Array.from({ length: CALLERS }, async () => {
          for (let i = next++; i < count * FILL_CALLS; i = next++) await c.decide(keys[i % count] as string);
        }),
      );
      perKey.set(c.name, ((await usedMemory(server)) - before) / count);
    }
    const totals = new Map<string, { decisions: number; seconds: number; cpuUs: number }>();
    for (let round = 0; round < 2; round += 1) {
      for (const c of round % 2 === 0 ? contenders : [...contenders].reverse()) {
        bench.progress(`${count.toLocaleString('en-US')} keys, round ${round + 1}/2: ${c.name}`);
        const m = await measure(server, c, keys);
        const t = totals.get(c.name) ?? { decisions: 0, seconds: 0, cpuUs: 0 };
        totals.set(c.name, { decisions: t.decisions + m.decisions, seconds: t.seconds + m.seconds, cpuUs: t.cpuUs + m.cpuUs });
      }
    }
    for (const c of contenders) await c.stop();
    const row = [count.toLocaleString('en-US')];
    for (const name of ['exact', 'slices', 'RLF']) {
      const t = totals.get(name) as { decisions: number; seconds: number; cpuUs: number };
      row.push(bytes(perKey.get(name) as number), (t.cpuUs / t.decisions).toFixed(2), perSecond(t.decisions / t.seconds));
    }
    rows.push(row);
    await admin.flushall(); // the next key count's memory is measured from an empty keyspace
  }
  admin.disconnect();
  return rows;
}

/** The exact log is filled call by call: at limit 1,000 half full that is a million calls already. */
const CPU_EXACT_MAX = 1_000;

async function cpuTable(bench: Bench, server: BenchServer): Promise<string[][]> {
  const rows: string[][] = [];
  const admin = server.redis.client();
  await waitReady(admin);
  for (const limit of CPU_LIMITS) {
    // The cell before's keys removed first: a minute after its fill they expire together, and Redis
    // deleting a million members then was charged to whichever contender this cell was measuring.
    await admin.flushall();
    const keys = makeKeys(CPU_KEYS, `cpu${limit}:`);
    const half = Math.floor(limit / 2);
    bench.progress(`limit ${limit.toLocaleString('en-US')}: filling ${CPU_KEYS} keys to half`);
    for (const key of keys) await fillSlices(admin, `cs${limit}:`, limit, key, half);
    const fillRlf = new RateLimiterRedis({ storeClient: admin, points: limit, duration: WINDOW_MS / 1000, keyPrefix: `cr${limit}` });
    for (const key of keys) await fillRlf.consume(key, half);
    const contenders = [
      await resilimitContender(server, 'slices', `cs${limit}:`, limit, RESOLUTION_MS),
      await rlfContender(server, `cr${limit}`, limit),
    ];
    if (limit <= CPU_EXACT_MAX) {
      const exact = new RedisWindow({ redis: admin, prefix: `ce${limit}:`, limit, windowMs: WINDOW_MS });
      for (let i = 0; i < keys.length; i += 20) {
        await Promise.all(keys.slice(i, i + 20).flatMap((key) => Array.from({ length: half }, () => exact.limit(key))));
      }
      contenders.push(await resilimitContender(server, 'exact', `ce${limit}:`, limit));
    }
    const totals = new Map<string, { decisions: number; seconds: number; cpuUs: number }>();
    for (let round = 0; round < ROUNDS; round += 1) {
      const order = round % 2 === 0 ? contenders : [...contenders].reverse();
      for (const c of order) {
        bench.progress(`limit ${limit.toLocaleString('en-US')}, round ${round + 1}/${ROUNDS}: ${c.name}`);
        const m = await measure(server, c, keys);
        const t = totals.get(c.name) ?? { decisions: 0, seconds: 0, cpuUs: 0 };
        totals.set(c.name, { decisions: t.decisions + m.decisions, seconds: t.seconds + m.seconds, cpuUs: t.cpuUs + m.cpuUs });
      }
    }
    for (const c of contenders) await c.stop();
    const r = totals.get('RLF') as { decisions: number; seconds: number; cpuUs: number };
    const cell = (name: string): string[] => {
      const t = totals.get(name);
      if (t === undefined) return ['—', '—', '—', '—'];
      return [
        perSecond(t.decisions / t.seconds),
        ratio(t.decisions / t.seconds, r.decisions / r.seconds),
        (t.cpuUs / t.decisions).toFixed(2),
        ratio(t.cpuUs / t.decisions, r.cpuUs / r.decisions),
      ];
    };
    rows.push([
      limit.toLocaleString('en-US'),
      ...cell('slices'),
      ...cell('exact'),
      perSecond(r.decisions / r.seconds),
      (r.cpuUs / r.decisions).toFixed(2),
    ]);
  }
  admin.disconnect();
  return rows;
}

main(async () => {
  const bench = new Bench('resolution', 'By the limit: the exact log, the window counted by slices, and a fixed-window counter');
  const server = await startServer();
  const load = (): string =>
    loadavg()
      .map((x) => x.toFixed(2))
      .join(', ');
  bench.note(
    `Command: \`node bench/resolution.ts\`. Node ${process.version}, redis-server ${server.version}. Window ${WINDOW_MS / 1000} s; slices of ${RESOLUTION_MS} ms (\`resolutionMs: ${RESOLUTION_MS}\`, 60 a window). RLF: rate-limiter-flexible \`RateLimiterRedis\`. Load average at the start ${load()}.`,
  );
  const memory = await memoryTable(bench, server);
  bench.section(
    `Redis memory per key, window full (${MEMORY_KEYS} keys each)`,
    `${table(['limit', 'exact log', 'slices (60)', 'RLF', 'slices ÷ RLF'], memory)}\n\nThe exact log keeps a member per call (filled one call at a time up to limit ${EXACT_MAX.toLocaleString('en-US')}; above, the estimate at about 100 B a member); the slices keep a count per slice, the same whatever the limit but for the counts' widths.`,
  );
  const cpu = await cpuTable(bench, server);
  bench.section(
    `Redis CPU per decision at ${CALLERS} callers, ${CPU_KEYS.toLocaleString('en-US')} keys half full (load average at the end ${load()})`,
    `${table(
      [
        'limit',
        'slices: decisions/s',
        '÷ RLF',
        'Redis µs/decision',
        '÷ RLF',
        'exact log: decisions/s',
        '÷ RLF',
        'Redis µs/decision',
        '÷ RLF',
        'RLF: decisions/s',
        'Redis µs/decision',
      ],
      cpu,
    )}\n\nresilimit with defaults (the exact log; up to limit ${CPU_EXACT_MAX.toLocaleString('en-US')}, filled call by call: 1,000,000 calls at that limit) and with \`resolutionMs\` (its calls coalesced into script calls of several decisions), every decision made by Redis (checked); ${ROUNDS} rounds of ${MEASURE_MS} ms, contenders alternating, pooled. Each key's 59 past slices hold calls (filled with injected times, spread over the window), so every decision reads a hash of about 60 slices.`,
  );
  const byKeys = await keyCountTable(bench, server);
  bench.section(
    `By the number of keys, limit ${GROWTH_LIMIT} (load average at the end ${load()})`,
    `${table(
      [
        'keys',
        'exact: bytes/key',
        'Redis µs/decision',
        'decisions/s',
        'slices: bytes/key',
        'Redis µs/decision',
        'decisions/s',
        'RLF: bytes/key',
        'Redis µs/decision',
        'decisions/s',
      ],
      byKeys,
    )}\n\nEach key given ${FILL_CALLS} calls through the contender's API (${CALLERS} callers), then measured at ${CALLERS} callers over every key, 2 rounds of ${MEASURE_MS} ms, contenders alternating. Bytes per key: how much \`used_memory\` grew over the fill, divided by the keys (Redis's keyspace overhead included, about 50–70 B a key); the keys hold few calls, so this is the growth by key count, not by fill (see the tables above).`,
  );
  await bench.finish({ memory, cpu, byKeys });
  await server.close();
});
