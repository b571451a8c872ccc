/**
 * Redis memory per key with a full window: `MEMORY USAGE key SAMPLES 0` (every element counted),
 * averaged over several keys, at limits 10, 100, 1,000 and 10,000, for resilimit's
 * lua/sliding-window.lua (through RedisWindow), the plain sliding-window script (one ZSET script, no
 * breaker) and rate-limiter-flexible's RateLimiterRedis (its key after `limit` consumptions); plus
 * resilimit filled by 5 calls of cost limit/5 (a cost > 1). Every window is filled by real calls.
 *
 *   node bench/memory.ts
 */
import type { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { waitReady } from '../test/support/redis.ts';
import { bytes, ratio, table } from './support/format.ts';
import { naiveLimit } from './support/naive.ts';
import { pool } from './support/pool.ts';
import { Bench, main } from './support/report.ts';
import { RedisWindow } from './support/resilimit.ts';
import { startServer, type BenchServer } from './support/server.ts';

const LIMITS = [10, 100, 1_000, 10_000];
const WINDOW_MS = 60_000;
const IN_FLIGHT = 128;
/** 50 keys, fewer at large limits (the average over a handful of full 10,000-call windows is stable). */
const keysFor = (limit: number): number => Math.min(50, Math.floor(200_000 / limit));

type Measure = { bytesPerKey: number; elements: number; encoding: string; sampleMember: string };

async function average(server: BenchServer, keys: readonly string[], elements: (key: string) => Promise<number>): Promise<Measure> {
  let total = 0;
  let count = 0;
  for (const key of keys) {
    total += await server.memoryUsage(key);
    count += await elements(key);
  }
  const first = keys[0] as string;
  const encoding = String(await server.admin.object('ENCODING', first));
  const type = await server.admin.type(first);
  const sampleMember = type === 'zset' ? ((await server.admin.zrange(first, '-1', '-1'))[0] ?? '') : '';
  return { bytesPerKey: total / keys.length, elements: count / keys.length, encoding, sampleMember };
}

main(async () => {
  const bench = new Bench('memory', 'Redis memory per key with a full window');
  const server = await startServer();
  const client: Redis = server.redis.client();
  await waitReady(client);
  const rows: { limit: number; keys: number; resilimit: Measure; naive: Measure; rlf: Measure; resilimitCost: Measure }[] = [];
  try {
    for (const limit of LIMITS) {
      const n = keysFor(limit);
      const users = Array.from({ length: n }, (_, i) => `user:${i}`);
      await server.flush();

      bench.progress(`limit ${limit}: resilimit`);
      const window = new RedisWindow({ redis: client, limit, windowMs: WINDOW_MS, prefix: 'resilimit:' });
      await pool(n * limit, IN_FLIGHT, (i) => window.limit(users[i % n] as string));
      const resilimit = await average(
        server,
        users.map((u) => window.keyOf(u)),
        (k) => client.zcard(k),
      );

      bench.progress(`limit ${limit}: resilimit, cost ${limit / 5}`);
      const costly = new RedisWindow({ redis: client, limit, windowMs: WINDOW_MS, prefix: 'resilimit-cost:' });
      await pool(n * 5, IN_FLIGHT, (i) => costly.limit(users[i % n] as string, { cost: limit / 5 }));
      const resilimitCost = await average(
        server,
        users.map((u) => costly.keyOf(u)),
        (k) => client.zcard(k),
      );

      bench.progress(`limit ${limit}: plain script`);
      await pool(n * limit, IN_FLIGHT, (i) => naiveLimit(client, `naive:${users[i % n] as string}`, limit, WINDOW_MS));
      const naive = await average(
        server,
        users.map((u) => `naive:${u}`),
        (k) => client.zcard(k),
      );

      bench.progress(`limit ${limit}: rate-limiter-flexible`);
      const rlf = new RateLimiterRedis({ storeClient: client, points: limit, duration: WINDOW_MS / 1000 });
      await pool(n * limit, IN_FLIGHT, (i) => rlf.consume(users[i % n] as string));
      const rlfMeasure = await average(
        server,
        users.map((u) => `rlflx:${u}`),
        async (k) => Number(await client.get(k)),
      );

      for (const [name, m, want] of [
        ['resilimit', resilimit, limit],
        ['resilimit cost', resilimitCost, 6],
        ['naive', naive, limit],
        ['rate-limiter-flexible', rlfMeasure, limit],
      ] as const) {
        if (m.elements !== want) throw new Error(`${name} at limit ${limit}: ${m.elements} elements per key, expected ${want}`);
      }
      rows.push({ limit, keys: n, resilimit, naive, rlf: rlfMeasure, resilimitCost });
    }

    bench.section(
      `Bytes per key (MEMORY USAGE … SAMPLES 0, averaged; redis-server ${server.version}, default listpack thresholds)`,
      `${table(
        [
          'limit',
          'keys averaged',
          'resilimit',
          'plain script',
          'rate-limiter-flexible',
          'resilimit, 5 calls of cost limit/5',
          'resilimit ÷ plain script',
          'resilimit per admitted call',
          'encoding (resilimit / plain script)',
        ],
        rows.map((r) => [
          r.limit.toLocaleString('en-US'),
          String(r.keys),
          bytes(r.resilimit.bytesPerKey),
          bytes(r.naive.bytesPerKey),
          bytes(r.rlf.bytesPerKey),
          bytes(r.resilimitCost.bytesPerKey),
          ratio(r.resilimit.bytesPerKey, r.naive.bytesPerKey),
          (r.resilimit.bytesPerKey / r.limit).toFixed(1),
          `${r.resilimit.encoding} / ${r.naive.encoding}`,
        ]),
      )}\n\nEach window is filled by real calls (limit calls of cost 1; for the cost case 5 calls of cost limit/5, stored as 5 members plus the \`*\` member that holds the extra cost). Sample members: resilimit \`${rows[0]?.resilimit.sampleMember}\` (its generated call id), cost case \`${rows[0]?.resilimitCost.sampleMember}\`, plain script \`${rows[0]?.naive.sampleMember}\` (\`<now>-<8 random base-36 chars>\`). rate-limiter-flexible is a fixed-window counter: one small string whatever the limit.`,
    );
    await bench.finish({ windowMs: WINDOW_MS, redis: server.version, rows });
  } finally {
    await server.close();
  }
});
