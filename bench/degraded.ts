/**
 * Degraded Redis: open-loop load of 2,000 calls/s over 1,000 keys for 6 s; the redis-server child
 * is frozen (SIGSTOP) from 1.5 s to 4.5 s. Latency of the calls scheduled during the freeze, for
 * resilimit (defaults) and rate-limiter-flexible with an in-memory insurance limiter, once on an
 * ioredis client with defaults and once with `commandTimeout: 100`. Calls not settled 15 s after
 * the thaw are counted as unsettled.
 *
 *   node bench/degraded.ts
 */
import type { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { waitReady, type ClientOptions } from '../test/support/redis.ts';
import { ms, ratio, table } from './support/format.ts';
import { makeKeys } from './support/keys.ts';
import { openLoop, type OpenLoopResult } from './support/openLoop.ts';
import { Bench, main } from './support/report.ts';
import { createRedisClient, ResilientLimiter } from './support/resilimit.ts';
import { Samples } from './support/samples.ts';
import { startServer, type BenchServer } from './support/server.ts';

const RATE = 2_000;
const DURATION_MS = 6_000;
const FREEZE_AT_MS = 1_500;
const THAW_AT_MS = 4_500;
const SETTLE_AFTER_THAW_MS = 15_000;
const KEY_COUNT = 1_000;
const LIMIT = 100;
const WINDOW_MS = 60_000;

type Subject = { decide: (key: string) => Promise<string>; close: () => Promise<void> };
type Factory = { name: string; create: (server: BenchServer) => Promise<Subject> };

function rlfWithInsurance(name: string, clientOptions: ClientOptions): Factory {
  return {
    name,
    async create(server) {
      const client: Redis = server.redis.client(clientOptions);
      await waitReady(client);
      const limiter = new RateLimiterRedis({
        storeClient: client,
        points: LIMIT,
        duration: WINDOW_MS / 1000,
        insuranceLimiter: new RateLimiterMemory({ points: LIMIT, duration: WINDOW_MS / 1000 }),
      });
      return {
        decide: (key) =>
          limiter.consume(key).then(
            () => 'allowed',
            (e: unknown) => (e instanceof RateLimiterRes ? 'denied' : 'error'),
          ),
        close: async () => client.disconnect(),
      };
    },
  };
}

const FACTORIES: readonly Factory[] = [
  {
    name: 'resilimit ResilientLimiter (defaults)',
    async create(server) {
      const redis = createRedisClient(server.redis.url);
      await waitReady(redis);
      const limiter = new ResilientLimiter({ redis, limit: LIMIT, windowMs: WINDOW_MS });
      return {
        decide: (key) => limiter.limit(key).then((d) => `${d.source}:${d.reason}`),
        async close() {
          await limiter.close();
          redis.disconnect();
        },
      };
    },
  },
  rlfWithInsurance('RateLimiterRedis + insurance, ioredis defaults', {}),
  rlfWithInsurance('RateLimiterRedis + insurance, ioredis commandTimeout 100', { commandTimeout: 100 }),
];

type Phase = {
  calls: number;
  p50: number;
  p99: number;
  max: number;
  unsettled: number;
  unsettledOverMs: number;
  /** Largest delay between a call's scheduled and actual issue (event-loop blocking), ms. */
  maxIssueLagMs: number;
  outcomes: Record<string, number>;
};

/** Latency (from issue) of the calls scheduled in [from, to): unsettled calls count as infinitely slow. */
function phase(result: OpenLoopResult, from: number, to: number, deadlineMs: number): Phase {
  const samples = new Samples();
  const outcomes: Record<string, number> = {};
  let unsettled = 0;
  let unsettledOverMs = Number.POSITIVE_INFINITY;
  let maxIssueLagMs = 0;
  for (let i = 0; i < result.scheduled.length; i += 1) {
    const at = result.scheduled[i] as number;
    if (at < from || at >= to) continue;
    const issued = result.issued[i] as number;
    const settled = result.settled[i] as number;
    maxIssueLagMs = Math.max(maxIssueLagMs, issued - at);
    const outcome = result.outcomes[i] as string;
    outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
    if (Number.isNaN(settled)) {
      unsettled += 1;
      unsettledOverMs = Math.min(unsettledOverMs, deadlineMs - issued);
      samples.add(Number.POSITIVE_INFINITY);
    } else {
      samples.add(settled - issued);
    }
  }
  const { count, p50, p99, max } = samples.summary();
  return { calls: count, p50, p99, max, unsettled, unsettledOverMs, maxIssueLagMs, outcomes };
}

main(async () => {
  const bench = new Bench('degraded', 'Degraded Redis: latency while redis-server is frozen (SIGSTOP)');
  const server = await startServer();
  const keys = makeKeys(KEY_COUNT);
  const rows: { name: string; freeze: Phase; healthy: Phase; after: Phase; freezeAt: number; thawAt: number }[] = [];
  try {
    for (const factory of FACTORIES) {
      bench.progress(`${factory.name}: running`);
      await server.flush();
      const subject = await factory.create(server);
      // A short healthy warm-up (not measured), so that every client has loaded its script.
      for (let i = 0; i < 200; i += 1) await subject.decide(keys[i % KEY_COUNT] as string);
      const deadlineMs = THAW_AT_MS + SETTLE_AFTER_THAW_MS;
      const result = await openLoop({
        ratePerSecond: RATE,
        durationMs: DURATION_MS,
        keys,
        call: subject.decide,
        events: [
          { atMs: FREEZE_AT_MS, run: () => server.redis.freeze() },
          { atMs: THAW_AT_MS, run: () => server.redis.thaw() },
        ],
        settleDeadlineMs: deadlineMs,
      });
      const [freezeAt = FREEZE_AT_MS, thawAt = THAW_AT_MS] = result.eventTimes;
      rows.push({
        name: factory.name,
        freezeAt,
        thawAt,
        freeze: phase(result, freezeAt, thawAt, deadlineMs),
        healthy: phase(result, 0, freezeAt, deadlineMs),
        after: phase(result, thawAt, DURATION_MS, deadlineMs),
      });
      bench.progress(`${factory.name}: closing`);
      await subject.close();
    }

    const unsettledCell = (p: Phase): string => (p.unsettled === 0 ? '0' : `${p.unsettled} (>${(p.unsettledOverMs / 1000).toFixed(1)} s)`);
    bench.section(
      `Calls scheduled during the freeze (${RATE.toLocaleString('en-US')} calls/s over ${KEY_COUNT.toLocaleString('en-US')} keys for ${DURATION_MS / 1000} s, frozen ${FREEZE_AT_MS / 1000}–${THAW_AT_MS / 1000} s; latency from each call's issue, ms)`,
      table(
        ['contender', 'calls in freeze', 'p50', 'p99', 'max', 'unsettled', 'max issue lag', 'p99 before freeze', 'p99 after thaw'],
        rows.map((r) => [
          r.name,
          r.freeze.calls.toLocaleString('en-US'),
          ms(r.freeze.p50),
          ms(r.freeze.p99),
          ms(r.freeze.max),
          unsettledCell(r.freeze),
          ms(r.freeze.maxIssueLagMs),
          ms(r.healthy.p99),
          ms(r.after.p99),
        ]),
      ),
    );
    const base = rows[0];
    if (base !== undefined) {
      bench.section(
        'Peers relative to resilimit during the freeze (how many times slower)',
        table(
          ['contender', 'p50', 'p99', 'max'],
          rows
            .slice(1)
            .map((r) => [
              r.name,
              ratio(r.freeze.p50, base.freeze.p50),
              ratio(r.freeze.p99, base.freeze.p99),
              ratio(r.freeze.max, base.freeze.max),
            ]),
        ),
      );
      const answered = Object.entries(base.freeze.outcomes)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => `${k} ${v.toLocaleString('en-US')}`)
        .join(', ');
      bench.note(`resilimit's freeze-phase calls by source:reason: ${answered}.`);
    }
    bench.note(
      `Actual freeze/thaw times (ms from start): ${rows.map((r) => `${Math.round(r.freezeAt)}/${Math.round(r.thawAt)}`).join(', ')}. Unsettled calls count as infinitely slow in the percentiles. Issue lag: calls are issued by a ~1 ms timer, so up to ~1–2 ms is the driver's own granularity; more means the event loop was blocked.`,
    );
    await bench.finish({
      rate: RATE,
      durationMs: DURATION_MS,
      freeze: [FREEZE_AT_MS, THAW_AT_MS],
      keys: KEY_COUNT,
      redis: server.version,
      rows,
    });
  } finally {
    server.redis.thaw();
    await server.close();
  }
});
