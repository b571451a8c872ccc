/**
 * Growth: resilimit's Redis-tier throughput at 64 concurrent calls, and Redis memory per key, as
 * the key count grows 1k → 10k → 100k and the limit 10 → 100 → 1,000. Before each cell every key's
 * window is pre-filled to half its limit (capped at 2M members in all, to keep the run bounded),
 * so that the scripts work on sets of the size that limit implies.
 *
 *   node bench/probes/growth.ts
 */
import { closedLoop, samplesOf } from '../support/closedLoop.ts';
import { resilimit, STORE_OUTCOMES } from '../support/contenders.ts';
import { bytes, ms, percent, perSecond, table } from '../support/format.ts';
import { makeKeys, scaled } from '../support/keys.ts';
import { Bench, main } from '../support/report.ts';
import type { RedisWindow as RedisWindowType } from '../../src/index.ts';
import { RedisWindow } from '../support/resilimit.ts';
import { startServer, type BenchServer } from '../support/server.ts';

const KEY_COUNTS = [1_000, 10_000, 100_000];
const LIMITS = [10, 100, 1_000];
const WINDOW_MS = 60_000;
const CONCURRENCY = 64;
const WARMUP_MS = scaled(1_000);
const MEASURE_MS = scaled(3_000);
const MEMBER_BUDGET = 2_000_000;
const MEMORY_SAMPLE = 200;
const PREFIX = 'resilimit:';

/**
 * Writes `perKey` admitted calls into every key's window, as lua/sliding-window.lua stores cost-1
 * calls (member = call id, score = admission time in ms, TTL to when the newest leaves the window),
 * at times spread over the last 30 s. Checked afterwards through the script itself.
 */
async function prefill(server: BenchServer, window: RedisWindowType, users: readonly string[], perKey: number): Promise<void> {
  const now = Date.now();
  // About 100,000 members per pipeline: one of 1,000 keys × 500 members crashed Node once (SIGSEGV).
  const keysPerPipeline = Math.max(1, Math.floor(100_000 / Math.max(perKey, 1)));
  for (let start = 0; start < users.length; start += keysPerPipeline) {
    const batch = server.admin.pipeline();
    for (const user of users.slice(start, start + keysPerPipeline)) {
      const key = window.keyOf(user);
      const args: (string | number)[] = [];
      let newest = 0;
      for (let j = 0; j < perKey; j += 1) {
        const at = now - 30_000 + Math.floor((30_000 * j) / perKey);
        newest = Math.max(newest, at);
        args.push(at, `pre${j}-${user}`);
      }
      batch.zadd(key, ...args);
      batch.pexpire(key, newest + WINDOW_MS - now);
    }
    await batch.exec();
  }
}

main(async () => {
  const bench = new Bench('growth', 'Growth: resilimit Redis tier as keys and limits grow');
  const server = await startServer();
  const rows: Record<string, unknown>[] = [];
  const printed: string[][] = [];
  try {
    for (const keyCount of KEY_COUNTS) {
      const users = makeKeys(keyCount);
      for (const limit of LIMITS) {
        const perKey = Math.min(Math.floor(limit / 2), Math.floor(MEMBER_BUDGET / keyCount));
        bench.progress(`${keyCount.toLocaleString('en-US')} keys, limit ${limit}: pre-filling ${perKey} per key`);
        await server.flush();
        const window = new RedisWindow({ redis: server.admin, limit, windowMs: WINDOW_MS, prefix: PREFIX });
        await prefill(server, window, users, perKey);
        const check = await window.peek(users[0] as string);
        if (check.remaining !== limit - perKey) throw new Error(`pre-fill check: remaining ${check.remaining}, expected ${limit - perKey}`);

        bench.progress(`${keyCount.toLocaleString('en-US')} keys, limit ${limit}: measuring`);
        const contender = await resilimit.create(server, { limit, windowMs: WINDOW_MS });
        let before: Record<string, number> = {};
        const result = await closedLoop({
          concurrency: CONCURRENCY,
          warmupMs: WARMUP_MS,
          durationMs: MEASURE_MS,
          keys: users,
          call: contender.decide,
          onMeasure: () => {
            before = { ...contender.stats?.().byReason };
          },
        });
        const after: Record<string, number> = contender.stats?.().byReason ?? {};
        await contender.close();

        // Memory: a random sample of keys, and the whole dataset over the key count.
        let sampled = 0;
        let sampledBytes = 0;
        let members = 0;
        for (let i = 0; i < MEMORY_SAMPLE; i += 1) {
          const key = window.keyOf(users[(Math.random() * keyCount) | 0] as string);
          const size = await server.memoryUsage(key);
          if (size === 0) continue;
          sampled += 1;
          sampledBytes += size;
          members += await server.admin.zcard(key);
        }
        const info = await server.redis.info('memory');
        const dbsize = await server.admin.dbsize();
        const usedPerKey = (Number(info['used_memory']) - Number(info['used_memory_startup'])) / Math.max(1, dbsize);

        const store = samplesOf(result, STORE_OUTCOMES);
        const { p50, p99 } = store.summary();
        const local: Record<string, number> = {};
        for (const [reason, n] of Object.entries(after)) {
          const d = n - (before[reason] ?? 0);
          if (reason !== 'decided' && d > 0) local[reason] = d;
        }
        const localTotal = Object.values(local).reduce((a, b) => a + b, 0);
        const row = {
          keys: keyCount,
          limit,
          prefilledPerKey: perKey,
          redisDecisionsPerSecond: (store.count * 1000) / result.elapsedMs,
          allDecisionsPerSecond: (result.total * 1000) / result.elapsedMs,
          p50,
          p99,
          denied: result.byOutcome.get('denied')?.count ?? 0,
          redisDecisions: store.count,
          calls: result.total,
          local,
          bytesPerKey: sampledBytes / Math.max(1, sampled),
          membersPerKey: members / Math.max(1, sampled),
          usedMemoryPerKey: usedPerKey,
        };
        rows.push(row);
        printed.push([
          keyCount.toLocaleString('en-US'),
          limit.toLocaleString('en-US'),
          String(perKey),
          perSecond(row.redisDecisionsPerSecond),
          ms(p50),
          ms(p99),
          percent(row.denied, store.count),
          perSecond(row.allDecisionsPerSecond),
          localTotal === 0
            ? '—'
            : Object.entries(local)
                .map(([r, n]) => `${r} ${percent(n, result.total)}`)
                .join(', '),
          row.membersPerKey.toFixed(1),
          bytes(row.bytesPerKey),
          bytes(usedPerKey),
        ]);
      }
    }
    bench.section(
      `resilimit, ${CONCURRENCY} concurrent calls, uniformly random keys (${WARMUP_MS / 1000} s warm-up + ${MEASURE_MS / 1000} s measured per cell; windows pre-filled to half the limit, at most ${MEMBER_BUDGET.toLocaleString('en-US')} members in all)`,
      `${table(
        [
          'keys',
          'limit',
          'pre-filled per key',
          'Redis decisions/s',
          'p50 ms',
          'p99 ms',
          'Redis denied',
          'all decisions/s',
          'answered locally',
          'members per key (after)',
          'MEMORY USAGE per key',
          'used_memory ÷ keys',
        ],
        printed,
      )}\n\nRedis decisions/s and latency count only the calls Redis decided; 'all decisions/s' adds the calls answered locally (mostly the deny cache once keys are over their limit: a key Redis rejected is rejected locally until its retry-after, with no Redis call). Memory: MEMORY USAGE … SAMPLES 0 averaged over ${MEMORY_SAMPLE} random existing keys after the run; used_memory ÷ keys also counts the keyspace's own overhead.`,
    );
    await bench.finish({ concurrency: CONCURRENCY, windowMs: WINDOW_MS, memberBudget: MEMBER_BUDGET, redis: server.version, rows });
  } finally {
    await server.close();
  }
});
