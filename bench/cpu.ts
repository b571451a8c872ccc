/**
 * CPU per decision, on both sides of the wire: for every Redis-tier contender, 64 closed-loop
 * callers over 10,000 uniformly random keys, limit 100 per 60 s, healthy Redis; this process's CPU
 * (`process.cpuUsage`, the contender's client and the loop alike) and the redis-server child's
 * (`INFO cpu`, all of its threads) over the measured interval, each divided by the decisions made
 * in it. CPU time, not wall time: on a shared 2-core machine decisions/s moved 1.0–1.7× between
 * rounds while CPU per decision moved a few percent. Rounds rotate the contenders' order; medians.
 *
 *   node bench/cpu.ts
 */
import { closedLoop, samplesOf } from './support/closedLoop.ts';
import {
  rateLimiterFlexible,
  resilimit,
  resilimitOneByOne,
  STORE_OUTCOMES,
  upstash,
  naive,
  type ContenderFactory,
} from './support/contenders.ts';
import { perSecond, table } from './support/format.ts';
import { makeKeys, scaled } from './support/keys.ts';
import { Bench, main } from './support/report.ts';
import { startServer, type BenchServer } from './support/server.ts';

const CONCURRENCY = 64;
const KEY_COUNT = 10_000;
const WINDOW = { limit: 100, windowMs: 60_000 };
const ROUNDS = 5;
const WARMUP_MS = scaled(500);
const MEASURE_MS = scaled(1_500);
const CONTENDERS: readonly ContenderFactory[] = [resilimit, resilimitOneByOne, rateLimiterFlexible, upstash, naive];
/** The reference of the ratios and of the targets: rate-limiter-flexible's RateLimiterRedis. */
const REFERENCE = rateLimiterFlexible;

type Round = { decisionsPerSecond: number; nodeUs: number; redisUs: number };

/** CPU µs the redis-server child has used so far (user + system, every thread). */
async function serverCpuUs(server: BenchServer): Promise<number> {
  const info = await server.redis.info('cpu');
  return (Number(info['used_cpu_user']) + Number(info['used_cpu_sys'])) * 1e6;
}

function nodeCpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

async function round(server: BenchServer, factory: ContenderFactory, keys: readonly string[]): Promise<Round> {
  await server.flush();
  const contender = await factory.create(server, WINDOW);
  let nodeStart = 0;
  let redisStart: Promise<number> = Promise.resolve(0);
  let before: ReturnType<NonNullable<typeof contender.stats>> | undefined;
  const result = await closedLoop({
    concurrency: CONCURRENCY,
    warmupMs: WARMUP_MS,
    durationMs: MEASURE_MS,
    keys,
    call: contender.decide,
    onMeasure: () => {
      nodeStart = nodeCpuUs();
      redisStart = serverCpuUs(server);
      before = contender.stats?.();
    },
  });
  const nodeUs = nodeCpuUs() - nodeStart;
  const redisUs = (await serverCpuUs(server)) - (await redisStart);
  const after = contender.stats?.();
  await contender.close();
  // Decisions the store made in the measured interval: resilimit counts its own (its local tier may
  // answer some under load: those are not Redis's); every peer's calls are all the store's.
  const decisions =
    after !== undefined && before !== undefined ? after.bySource.redis - before.bySource.redis : samplesOf(result, STORE_OUTCOMES).count;
  return { decisionsPerSecond: (decisions * 1000) / result.elapsedMs, nodeUs: nodeUs / result.total, redisUs: redisUs / decisions };
}

main(async () => {
  const bench = new Bench('cpu', 'CPU per decision, this process and Redis');
  const server = await startServer();
  const keys = makeKeys(KEY_COUNT);
  const rounds = new Map<ContenderFactory, Round[]>(CONTENDERS.map((f) => [f, []]));
  try {
    for (let r = 0; r < ROUNDS; r += 1) {
      const order = [...CONTENDERS.slice(r % CONTENDERS.length), ...CONTENDERS.slice(0, r % CONTENDERS.length)];
      for (const factory of order) {
        bench.progress(`round ${r + 1}/${ROUNDS}: ${factory.name}`);
        (rounds.get(factory) as Round[]).push(await round(server, factory, keys));
      }
    }
    const summary = CONTENDERS.map((f) => {
      const of = rounds.get(f) as Round[];
      const nodeUs = median(of.map((x) => x.nodeUs));
      const redisUs = median(of.map((x) => x.redisUs));
      return {
        contender: f.name,
        decisionsPerSecond: median(of.map((x) => x.decisionsPerSecond)),
        nodeUs,
        redisUs,
        totalUs: nodeUs + redisUs,
      };
    });
    const ref = summary[CONTENDERS.indexOf(REFERENCE)] as (typeof summary)[number];
    const x = (a: number, b: number): string => `${(a / b).toFixed(2)}×`;
    bench.section(
      `CPU per decision (${CONCURRENCY} concurrent callers, ${KEY_COUNT.toLocaleString('en-US')} keys, limit ${WINDOW.limit} per ${WINDOW.windowMs / 1000} s, breaker closed; median of ${ROUNDS} rounds of ${MEASURE_MS / 1000} s; redis-server ${server.version})`,
      `${table(
        ['contender', 'decisions/s', 'Node µs', 'Redis µs', 'total µs', `Node ÷ ${REFERENCE.name}`, 'Redis ÷', 'total ÷'],
        summary.map((s) => [
          s.contender,
          perSecond(s.decisionsPerSecond),
          s.nodeUs.toFixed(2),
          s.redisUs.toFixed(2),
          s.totalUs.toFixed(2),
          x(s.nodeUs, ref.nodeUs),
          x(s.redisUs, ref.redisUs),
          x(s.totalUs, ref.totalUs),
        ]),
      )}\n\nNode µs: this process's CPU per call settled in the measured interval (the contender's client and the benchmark's loop; the loop is the same for all). Redis µs: the redis-server process's CPU per decision it made. Targets: Redis ≤ 1.0×, total ≤ 0.67× ${REFERENCE.name}'s.`,
    );
    await bench.finish({ summary, rounds: Object.fromEntries([...rounds].map(([f, r]) => [f.name, r])) });
  } finally {
    await server.close();
  }
});
