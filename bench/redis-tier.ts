/**
 * Redis tier: decisions/s and latency of closed-loop callers at 1, 16, 64 and 256 concurrent calls,
 * 10,000 uniformly random keys, limit 100 per 60 s, healthy Redis. Every contender runs against
 * the same redis-server child, with FLUSHALL (and SCRIPT FLUSH) before each cell and fresh clients.
 * The headline counts only the decisions each contender's store made: resilimit may answer from
 * its local tier under load ('slow', 'saturated', 'deny-cache'), and those are reported apart.
 * Each cell is measured in several short rounds, the contenders' order rotated each round, and
 * pooled: on a shared 2-core machine a single run varies by ±30 %. redis-benchmark gives the
 * server's own ceiling for each script.
 *
 *   node bench/redis-tier.ts
 */
import { ceilings } from './support/ceilings.ts';
import { closedLoop, samplesOf } from './support/closedLoop.ts';
import {
  naive,
  rateLimiterFlexible,
  resilimit,
  resilimitOneByOne,
  STORE_OUTCOMES,
  upstash,
  type ContenderFactory,
} from './support/contenders.ts';
import { ms, perSecond, percent, ratio, table } from './support/format.ts';
import { makeKeys, scaled } from './support/keys.ts';
import { Samples } from './support/samples.ts';
import { Bench, main } from './support/report.ts';
import { startServer } from './support/server.ts';

const CONCURRENCY = [1, 16, 64, 256];
const KEY_COUNT = 10_000;
const WINDOW = { limit: 100, windowMs: 60_000 };
const ROUNDS = 3;
const WARMUP_MS = scaled(500);
const MEASURE_MS = scaled(1_000);
const CONTENDERS: readonly ContenderFactory[] = [resilimit, resilimitOneByOne, rateLimiterFlexible, upstash, naive];
const RESILIMITS: readonly ContenderFactory[] = [resilimit, resilimitOneByOne];

type Cell = {
  contender: string;
  concurrency: number;
  elapsedMs: number;
  storeDecisionsPerSecond: number;
  /** Decisions/s of each round. */
  rounds: number[];
  storeDecisions: number;
  allCalls: number;
  denied: number;
  p50: number;
  p99: number;
  max: number;
  /** Calls answered by something other than the store, by outcome label. */
  elsewhere: Record<string, number>;
  /** Redis CPU in scripts per decision it made, warm-ups included, µs. */
  serverUsecPerDecision: number;
  /** Decisions per script call (more than 1 when calls are coalesced). */
  decisionsPerScriptCall: number;
  /** resilimit only: stats() differences over the measured intervals. */
  statsBySource?: Record<string, number>;
  statsByReason?: Record<string, number>;
};

/** A cell's rounds, pooled. */
type Pool = {
  elapsedMs: number;
  rounds: number[];
  store: Samples;
  all: number;
  denied: number;
  elsewhere: Record<string, number>;
  scriptCalls: number;
  scriptUsec: number;
  decisions: number;
  bySource?: Record<string, number>;
  byReason?: Record<string, number>;
};

function add(into: Record<string, number>, from: Record<string, number>, sign = 1): void {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + sign * v;
}

function cellOf(name: string, concurrency: number, pool: Pool): Cell {
  const { p50, p99, max } = pool.store.summary();
  const cell: Cell = {
    contender: name,
    concurrency,
    elapsedMs: pool.elapsedMs,
    storeDecisionsPerSecond: (pool.store.count * 1000) / pool.elapsedMs,
    rounds: pool.rounds,
    storeDecisions: pool.store.count,
    allCalls: pool.all,
    denied: pool.denied,
    p50,
    p99,
    max,
    elsewhere: pool.elsewhere,
    serverUsecPerDecision: pool.scriptUsec / pool.decisions,
    decisionsPerScriptCall: pool.decisions / pool.scriptCalls,
  };
  if (pool.bySource !== undefined) cell.statsBySource = pool.bySource;
  if (pool.byReason !== undefined) cell.statsByReason = pool.byReason;
  return cell;
}

main(async () => {
  const bench = new Bench('redis-tier', 'Redis tier: decisions/s and latency, healthy Redis');
  const server = await startServer();
  const keys = makeKeys(KEY_COUNT);
  const cells: Cell[] = [];
  try {
    // Concurrency outermost: the contenders of one column run close together in time; within a
    // column, rounds rotate the order so that no contender always runs first or last.
    for (const concurrency of CONCURRENCY) {
      const pools = new Map<ContenderFactory, Pool>(
        CONTENDERS.map((f) => [
          f,
          { elapsedMs: 0, rounds: [], store: new Samples(), all: 0, denied: 0, elsewhere: {}, scriptCalls: 0, scriptUsec: 0, decisions: 0 },
        ]),
      );
      for (let round = 0; round < ROUNDS; round += 1) {
        const order = [...CONTENDERS.slice(round % CONTENDERS.length), ...CONTENDERS.slice(0, round % CONTENDERS.length)];
        for (const factory of order) {
          bench.progress(`× ${concurrency}, round ${round + 1}/${ROUNDS}: ${factory.name}`);
          const pool = pools.get(factory) as Pool;
          await server.flush();
          await server.resetStats();
          const contender = await factory.create(server, WINDOW);
          let before: ReturnType<NonNullable<typeof contender.stats>> | undefined;
          const result = await closedLoop({
            concurrency,
            warmupMs: WARMUP_MS,
            durationMs: MEASURE_MS,
            keys,
            call: contender.decide,
            onMeasure: () => {
              before = contender.stats?.();
            },
          });
          const after = contender.stats?.();
          await contender.close();
          const scripts = await server.scriptStats();
          const store = samplesOf(result, STORE_OUTCOMES);
          pool.elapsedMs += result.elapsedMs;
          pool.rounds.push((store.count * 1000) / result.elapsedMs);
          pool.store.merge(store);
          pool.all += result.total;
          pool.denied += result.byOutcome.get('denied')?.count ?? 0;
          for (const [outcome, samples] of result.byOutcome) {
            if (!STORE_OUTCOMES.includes(outcome)) pool.elsewhere[outcome] = (pool.elsewhere[outcome] ?? 0) + samples.count;
          }
          pool.scriptCalls += scripts.calls;
          pool.scriptUsec += scripts.usec;
          // resilimit counts its Redis decisions itself (a coalesced script call makes several);
          // every peer makes one per script call.
          pool.decisions += after === undefined ? scripts.calls : after.bySource.redis;
          if (before !== undefined && after !== undefined) {
            add((pool.bySource ??= {}), after.bySource);
            add(pool.bySource, before.bySource, -1);
            add((pool.byReason ??= {}), after.byReason);
            add(pool.byReason, before.byReason, -1);
          }
        }
      }
      for (const factory of CONTENDERS) cells.push(cellOf(factory.name, concurrency, pools.get(factory) as Pool));
    }
    for (const cell of cells) {
      for (const counts of [cell.statsBySource, cell.statsByReason]) {
        if (counts !== undefined) for (const [k, v] of Object.entries(counts)) if (v === 0) delete counts[k];
      }
    }

    bench.progress('redis-benchmark ceilings');
    const ceiling = await ceilings(server, { keyspace: KEY_COUNT, limit: WINDOW.limit, windowMs: WINDOW.windowMs, requests: 200_000 });
    const rps = (script: string): number => {
      const c = ceiling.find((x) => x.script === script);
      return c !== undefined && 'requestsPerSecond' in c ? c.requestsPerSecond : Number.NaN;
    };
    const of = (f: ContenderFactory, c: number): Cell => cells.find((x) => x.contender === f.name && x.concurrency === c) as Cell;

    bench.section(
      `Decisions made by Redis per second, and their latency (${KEY_COUNT.toLocaleString('en-US')} keys, limit ${WINDOW.limit} per ${WINDOW.windowMs / 1000} s; ${ROUNDS} rounds of ${WARMUP_MS / 1000} s warm-up + ${MEASURE_MS / 1000} s measured per cell, pooled; redis-server ${server.version})`,
      `${table(
        ['contender', ...CONCURRENCY.flatMap((c) => [`${c}: decisions/s`, 'p50 ms', 'p99 ms'])],
        CONTENDERS.map((f) => [
          f.name,
          ...CONCURRENCY.flatMap((c) => {
            const cell = of(f, c);
            return [perSecond(cell.storeDecisionsPerSecond), ms(cell.p50), ms(cell.p99)];
          }),
        ]),
      )}\n\nOnly decisions the store made count: a call resilimit answered from its local tier is left out of decisions/s and of the latency columns (see below). \`coalesce: false\` (one script call per decision) is shown for comparison; by default the calls of one event-loop turn share script calls of at most 16.`,
    );

    bench.section(
      'Spread: decisions/s of each round (fresh clients, empty Redis each round)',
      table(
        ['contender', ...CONCURRENCY.map((c) => `${c}`)],
        CONTENDERS.map((f) => [
          f.name,
          ...CONCURRENCY.map((c) =>
            of(f, c)
              .rounds.map((r) => perSecond(r))
              .join(' / '),
          ),
        ]),
      ),
    );

    bench.section(
      'Server ceiling per script (redis-benchmark, no client library)',
      `${table(
        ['script', 'requests/s', 'command'],
        ceiling.map((c) =>
          'requestsPerSecond' in c ? [c.script, perSecond(c.requestsPerSecond), `\`${c.command}\``] : [c.script, 'failed', c.error],
        ),
      )}\n\n\`redis-benchmark -P 16 -c 50 -n 200000 -r ${KEY_COUNT} --csv\` against the same server, each after FLUSHALL and SCRIPT LOAD, best of two runs. \`__rand_int__\` is a 12-digit random number below ${KEY_COUNT.toLocaleString('en-US')}.`,
    );

    bench.section(
      'Redis CPU per decision (µs spent in EVAL/EVALSHA per decision Redis made, from INFO commandstats, warm-ups included)',
      `${table(
        ['contender', ...CONCURRENCY.map((c) => `${c}`)],
        CONTENDERS.map((f) => [
          f.name,
          ...CONCURRENCY.map((c) => {
            const x = of(f, c);
            return `${x.serverUsecPerDecision.toFixed(1)}${x.decisionsPerScriptCall > 1.05 ? ` (${x.decisionsPerScriptCall.toFixed(1)} per call)` : ''}`;
          }),
        ]),
      )}\n\nOne core's worth of Redis at this cost per decision bounds the throughput at 1,000,000 / µs decisions/s.`,
    );

    bench.section(
      'resilimit relative to the peers (decisions/s ratio > 1× means resilimit is faster; p99 ratio > 1× means slower)',
      table(
        [
          'resilimit',
          'concurrency',
          '÷ RateLimiterRedis decisions/s',
          '÷ RateLimiterRedis p99',
          '÷ @upstash decisions/s',
          '÷ plain script decisions/s',
          '÷ plain script ceiling',
          '÷ own script ceiling',
        ],
        RESILIMITS.flatMap((r) =>
          CONCURRENCY.map((c) => {
            const x = of(r, c);
            return [
              r === resilimit ? 'defaults' : 'coalesce: false',
              String(c),
              ratio(x.storeDecisionsPerSecond, of(rateLimiterFlexible, c).storeDecisionsPerSecond),
              ratio(x.p99, of(rateLimiterFlexible, c).p99),
              ratio(x.storeDecisionsPerSecond, of(upstash, c).storeDecisionsPerSecond),
              ratio(x.storeDecisionsPerSecond, of(naive, c).storeDecisionsPerSecond),
              ratio(x.storeDecisionsPerSecond, rps('plain script')),
              ratio(x.storeDecisionsPerSecond, rps('resilimit lua/sliding-window.lua')),
            ];
          }),
        ),
        'llrrrrrr',
      ),
    );

    const peersElsewhere = CONTENDERS.filter((f) => !RESILIMITS.includes(f))
      .map((f) => {
        const other = CONCURRENCY.reduce((sum, c) => sum + Object.values(of(f, c).elsewhere).reduce((a, b) => a + b, 0), 0);
        return `${f.name}: ${other.toLocaleString('en-US')}`;
      })
      .join('; ');
    bench.section(
      'resilimit: who decided the measured calls',
      `${table(
        [
          'resilimit',
          'concurrency',
          'calls',
          'decided by Redis',
          'stats().bySource.redis',
          'answered locally',
          'local share',
          'stats().byReason over the interval',
        ],
        RESILIMITS.flatMap((r) =>
          CONCURRENCY.map((c) => {
            const x = of(r, c);
            const local = Object.values(x.elsewhere).reduce((a, b) => a + b, 0);
            const reasons = Object.entries(x.statsByReason ?? {})
              .map(([reason, n]) => `${reason} ${n.toLocaleString('en-US')}`)
              .join(', ');
            return [
              r === resilimit ? 'defaults' : 'coalesce: false',
              String(c),
              x.allCalls.toLocaleString('en-US'),
              x.storeDecisions.toLocaleString('en-US'),
              (x.statsBySource?.['redis'] ?? 0).toLocaleString('en-US'),
              local.toLocaleString('en-US'),
              percent(local, x.allCalls),
              reasons || '—',
            ];
          }),
        ),
        'llrrrrrl',
      )}\n\nstats() is read when measuring starts and ends, so it also counts the few calls still in flight at the end. Calls not decided by Redis, peers (all concurrencies): ${peersElsewhere}. Rejections are Redis decisions and count; with ${KEY_COUNT.toLocaleString('en-US')} keys, limit ${WINDOW.limit} and an empty Redis per cell there are few.`,
    );

    await bench.finish({
      keys: KEY_COUNT,
      window: WINDOW,
      rounds: ROUNDS,
      warmupMs: WARMUP_MS,
      measureMs: MEASURE_MS,
      redis: server.version,
      cells,
      ceilings: ceiling,
    });
  } finally {
    await server.close();
  }
});
