/**
 * Keys in steady state: resilimit (defaults) against rate-limiter-flexible's RateLimiterRedis when
 * every key already holds calls, as a running service's keys do (the other Redis benchmarks flush
 * Redis before each cell, so their keys hold a few calls when measured). Limit 100 per 60 s.
 *
 * 1. By callers: closed-loop callers 1, 4, 16, 64, 256 over 10,000 keys holding 50 calls or a few
 *    more (a set of keys per round, filled just before it).
 * 2. By fill, at 64 callers: fresh keys, and 12,000 keys at 50, 95 and 100 calls (full: every call
 *    refused by the store).
 *
 * Each contender is one long-lived limiter per table with its own key prefix, filled through its
 * own public API (resilimit: a `limit(key)` per call; rate-limiter-flexible: `consume(key, n)`,
 * which leaves the counter as n calls would), and never flushed between its cells. Before each cell
 * the calls each key holds in its window are read from Redis and short keys topped up; measured
 * calls only add, so the cells are short (each adds a few calls per key) and the levels found are
 * printed. Rounds alternate the contenders (order rotated) and are pooled. Decisions/s and p99 count
 * the decisions the store made (resilimit's local answers apart); Node CPU (`process.cpuUsage`) is
 * per call settled, Redis CPU (`INFO cpu` of the redis-server) per decision Redis made, both over
 * the measured interval only.
 *
 * Not a steady flow in one respect: the fill's calls are made seconds before they are measured, so
 * none leaves the window during a cell and resilimit's script seldom trims a key, where a key in a
 * steady flow loses a call about as often as it gains one.
 *
 *   node bench/steady.ts
 *   node bench/steady.ts --resolution 1000   # resilimit counting by slices (resolutionMs) instead
 */
import { loadavg } from 'node:os';
import { relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import { rateLimiterFlexible, resilimit, resilimitWith, type ContenderFactory } from './support/contenders.ts';
import { ms, percent, perSecond, ratio, table } from './support/format.ts';
import { makeKeys, scaled } from './support/keys.ts';
import { type Filled, levels, readSlices, summarize, topUp } from './support/levels.ts';
import { Bench, main } from './support/report.ts';
import { startServer, type BenchServer } from './support/server.ts';
import {
  addRun,
  closeAll,
  emptyPool,
  figures,
  type Live,
  measure,
  nodeCpuUs,
  type Pool,
  redisNow,
  rotate,
  settle,
} from './support/steadyCell.ts';

const WINDOW = { limit: 100, windowMs: 60_000 };
/** `--resolution <ms>`: resilimit counts by slices of that many ms (`resolutionMs`) instead of the exact log. */
const RESOLUTION = process.argv.includes('--resolution') ? Number(process.argv[process.argv.indexOf('--resolution') + 1]) : undefined;
const sliced =
  RESOLUTION === undefined
    ? undefined
    : resilimitWith(`resilimit ResilientLimiter, resolutionMs: ${RESOLUTION}`, { resolutionMs: RESOLUTION });
if (sliced !== undefined) readSlices(sliced, RESOLUTION as number);
const CONTENDERS: readonly ContenderFactory[] = [sliced ?? resilimit, rateLimiterFlexible];
const ROUNDS = 3;
const WARMUP_MS = scaled(100);

const CALLERS = [1, 4, 16, 64, 256];
const CALLER_KEYS = 10_000;
/** Keys are filled to this level, and topped up to it before a cell when below. */
const HALF = 50;
/** Measured ms per cell by callers: short where decisions are many, so that a round adds few calls per key. */
const callerMeasureMs = (callers: number): number => scaled(callers === 1 ? 600 : callers === 4 ? 400 : 300);

const FILL_CALLERS = 64;
/**
 * The keys climb 0 → 50 → 95 → 100 in one go: it must end within the 60 s window, or the first
 * calls of the fill leave it while the full keys are measured (and resilimit's deny cache then
 * refuses the top-ups). On this machine resilimit's fill runs about 50,000 calls/s: 1.2 M calls.
 */
const FILL_KEYS = 12_000;
/** Fresh keys per round of the empty fill: each measured call finds an empty key, or one it called once. */
const FRESH_KEYS = 100_000;
const FILLS = [0, 50, 95, 100];
/** At 95 a call more per key matters (at 100 the window is full): fewer decisions there. */
const fillMeasureMs = (fill: number): number => scaled(fill === 95 ? 150 : 300);
/** The limiters are warm from the fill: a short warm-up, which adds calls to the keys too. */
const FILL_WARMUP_MS = 50;

async function open(server: BenchServer): Promise<Live[]> {
  const lives: Live[] = [];
  for (const factory of CONTENDERS) lives.push({ factory, contender: await factory.create(server, WINDOW) });
  return lives;
}

/**
 * Tops `keys` up to `level` through `live`, with a healthy resilimit. Once its breaker has opened or
 * its journal has dropped calls (on this loaded machine, a stall past its 50 ms deadline, in a fill
 * or in the cell before), it answers the keys its warm window knows from its local tier ('reconciling')
 * for up to a window: it is then replaced by a new limiter and the keys topped up again (at most
 * twice), and `replaced` says where.
 */
async function fillTo(
  server: BenchServer,
  live: Live,
  keys: readonly string[],
  level: number,
  where: string,
  replaced: string[],
): Promise<Filled> {
  const tripped = (): boolean => {
    const stats = live.contender.stats?.();
    return stats !== undefined && (stats.opened > 0 || stats.reconcile.dropped > 0);
  };
  for (let attempt = 0; ; attempt += 1) {
    const stats = live.contender.stats?.();
    if (stats !== undefined && tripped()) {
      replaced.push(
        `${where} (breaker opened ${stats.opened} time${stats.opened === 1 ? '' : 's'}, journal dropped ${stats.reconcile.dropped.toLocaleString('en-US')} calls)`,
      );
      await live.contender.close();
      live.contender = await live.factory.create(server, WINDOW);
    }
    const filled = await topUp(server, live.factory, live.contender, keys, WINDOW, level);
    if (!tripped() || attempt === 2) return filled;
  }
}

/** The note on resilimit's limiters replaced in a table. */
const replacements = (replaced: readonly string[]): string =>
  replaced.length === 0
    ? 'No limiter was replaced'
    : `resilimit's limiter was replaced by a new one ${replaced.length} time${replaced.length === 1 ? '' : 's'}: ${replaced.join('; ')}`;

const loads = (): string =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(', ');
const us = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : '—');
/** "0 (0 %)", or "1,234 (0.52 %: slow 1,200, breaker-open 34)". */
const localAnswers = (pool: Pool): string => {
  const reasons = Object.entries(pool.reasons)
    .map(([reason, n]) => `${reason} ${n.toLocaleString('en-US')}`)
    .join(', ');
  return `${pool.local.toLocaleString('en-US')} (${percent(pool.local, pool.calls)}${reasons === '' ? '' : `: ${reasons}`})`;
};
/** The columns that set resilimit beside rate-limiter-flexible, with the ratio of each figure. */
const COMPARED = [
  ...['decisions/s resilimit', 'RLF', 'resilimit ÷ RLF', 'p99 ms resilimit', 'RLF', 'resilimit ÷ RLF'],
  ...['Node µs/call resilimit', 'RLF', 'resilimit ÷ RLF', 'Redis µs/decision resilimit', 'RLF', 'resilimit ÷ RLF'],
];
type Figures = ReturnType<typeof figures>;
const compared = (r: Figures, f: Figures): string[] => [
  ...[r.decisionsPerSecond, f.decisionsPerSecond].map(perSecond),
  ratio(r.decisionsPerSecond, f.decisionsPerSecond),
  ...[r.p99, f.p99].map(ms),
  ratio(r.p99, f.p99),
  ...[r.nodeUsPerCall, f.nodeUsPerCall].map(us),
  ratio(r.nodeUsPerCall, f.nodeUsPerCall),
  ...[r.redisUsPerDecision, f.redisUsPerDecision].map(us),
  ratio(r.redisUsPerDecision, f.redisUsPerDecision),
];
const mean1 = (x: number): string => x.toFixed(1);
/** "50.0 → 55.3" over rounds: the lowest mean at a round's start, the highest at a round's end. */
const levelRange = (pool: Pool): string =>
  `${mean1(Math.min(...pool.start.map((l) => l.mean)))} → ${mean1(Math.max(...pool.end.map((l) => l.mean)))} (max ${Math.max(...pool.end.map((l) => l.max))})`;

main(async () => {
  const bench = new Bench('steady', 'Keys in steady state: resilimit and RateLimiterRedis with filled keys');
  const started = performance.now();
  const node0 = nodeCpuUs();
  const server = await startServer();
  const scale = process.env['BENCH_TIME_SCALE'] === undefined ? '' : `BENCH_TIME_SCALE=${process.env['BENCH_TIME_SCALE']} `;
  bench.note(
    `Command: \`${scale}node ${relative(process.cwd(), process.argv[1] ?? 'bench/steady.ts')}\`. Node ${process.version}, redis-server ${server.version}. Limit ${WINDOW.limit} per ${WINDOW.windowMs / 1000} s; ${ROUNDS} rounds per cell, contenders alternating (order rotated), pooled; a warm-up of ${WARMUP_MS} ms per cell by callers, ${FILL_WARMUP_MS} ms by fill. resilimit: \`ResilientLimiter\` with defaults (\`local: { instances: 1 }\`${RESOLUTION === undefined ? '' : `, resolutionMs: ${RESOLUTION}`}); RLF: rate-limiter-flexible \`RateLimiterRedis\`, a plain ioredis client.`,
  );
  const redisStart = await redisNow(server);
  const data: Record<string, unknown> = {
    window: WINDOW,
    rounds: ROUNDS,
    warmupMs: { byCallers: WARMUP_MS, byFill: FILL_WARMUP_MS },
    redis: server.version,
    node: process.version,
  };
  /** Top-ups that left keys short of their level (the contender answered the calls without its store). */
  const shortfalls: string[] = [];
  try {
    // ---- 1. By callers -------------------------------------------------------------------------
    const load1 = loads();
    // A set of keys per round, filled just before it: a round's cells add 5 to 10 calls per key.
    const keySets = Array.from({ length: ROUNDS }, (_, r) => makeKeys(CALLER_KEYS, `steady${r}:`));
    const byCallers = new Map<string, Pool>();
    const cellOf = (f: ContenderFactory, c: number): Pool => byCallers.get(`${f.name}|${c}`) as Pool;
    for (const f of CONTENDERS) for (const c of CALLERS) byCallers.set(`${f.name}|${c}`, emptyPool());
    let lives = await open(server);
    const fillCalls: Record<string, number> = Object.fromEntries(CONTENDERS.map((f) => [f.name, 0]));
    let topUps = 0;
    const replaced1: string[] = [];
    // Rounds outermost: every column is measured on each round's keys, as they creep up from 50.
    for (let round = 0; round < ROUNDS; round += 1) {
      const keys = keySets[round] as string[];
      for (const live of lives) {
        bench.progress(
          `by callers, round ${round + 1}/${ROUNDS}: filling ${CALLER_KEYS.toLocaleString('en-US')} keys to ${HALF}: ${live.factory.name}`,
        );
        const { calls } = await fillTo(server, live, keys, HALF, `filling round ${round + 1}'s keys`, replaced1);
        fillCalls[live.factory.name] = (fillCalls[live.factory.name] ?? 0) + calls;
      }
      for (const [ci, callers] of CALLERS.entries()) {
        for (const live of rotate(lives, round + ci)) {
          bench.progress(`by callers, round ${round + 1}/${ROUNDS}, ${callers} callers: ${live.factory.name}`);
          const pool = cellOf(live.factory, callers);
          const filled = await fillTo(server, live, keys, HALF, `before ${callers} callers, round ${round + 1}`, replaced1);
          topUps += filled.calls;
          if (filled.missing > 0)
            shortfalls.push(`${live.factory.name}, ${callers} callers: ${filled.missing.toLocaleString('en-US')} calls`);
          pool.start.push(summarize(filled.levels));
          for (const l of lives) await settle(l);
          addRun(pool, await measure(server, live, keys, callers, WARMUP_MS, callerMeasureMs(callers)));
          pool.end.push(summarize(await levels(server, live.factory, keys, WINDOW)));
        }
      }
    }
    const health1 = await closeAll(lives);
    const load1End = loads();

    const [R, F] = CONTENDERS as [ContenderFactory, ContenderFactory];
    bench.section(
      `By callers: ${CALLER_KEYS.toLocaleString('en-US')} keys a round, filled to ${HALF} calls of ${WINDOW.limit} (load average ${load1} at the start, ${load1End} at the end)`,
      `${table(
        ['callers', ...COMPARED, 'resilimit: answered locally'],
        CALLERS.map((c) => {
          const [r, f] = [figures(cellOf(R, c)), figures(cellOf(F, c))];
          return [String(c), ...compared(r, f), localAnswers(cellOf(R, c))];
        }),
      )}\n\nMeasured per round: ${CALLERS.map((c) => `${callerMeasureMs(c)} ms at ${c}`).join(', ')}, after the warm-up. Decisions/s and p99: the decisions the store made (a call resilimit answered from its local tier is counted in the last column instead). Node µs: this process's CPU per call settled (the contender's client and the benchmark's loop alike). Redis µs: the redis-server's CPU per decision it made (resilimit: \`stats().bySource.redis\`; RLF: its script calls). Each round has its own ${CALLER_KEYS.toLocaleString('en-US')} keys, filled to ${HALF} through each contender just before it (resilimit: ${(fillCalls[R.name] ?? 0).toLocaleString('en-US')} calls of \`limit(key)\` in all; RLF: ${(fillCalls[F.name] ?? 0).toLocaleString('en-US')} calls' worth of \`consume(key, n)\`); before each cell a key below ${HALF} would be topped up to it (${topUps.toLocaleString('en-US')} calls: calls leave the window ${WINDOW.windowMs / 1000} s after they were made). Measured calls only add: the levels found are in the last table. ${replacements(replaced1)}. At the end, ${health1}.`,
    );
    bench.section(
      'By callers, spread: decisions/s of each round',
      table(
        ['callers', 'resilimit', 'RLF'],
        CALLERS.map((c) => [String(c), ...[R, F].map((f) => cellOf(f, c).rounds.map(perSecond).join(' / '))]),
      ),
    );
    bench.section(
      'By callers: calls per key in the window at the start and the end of the cells (mean over keys; lowest start → highest end over the rounds; the largest key at an end)',
      table(
        ['callers', 'resilimit', 'RLF'],
        CALLERS.map((c) => [String(c), levelRange(cellOf(R, c)), levelRange(cellOf(F, c))]),
      ),
    );
    data['byCallers'] = {
      keys: CALLER_KEYS,
      level: HALF,
      measureMs: Object.fromEntries(CALLERS.map((c) => [c, callerMeasureMs(c)])),
      loadAverage: { start: load1, end: load1End },
      fillCalls,
      topUpCalls: topUps,
      health: health1,
      replaced: replaced1,
      cells: CONTENDERS.flatMap((f) => CALLERS.map((c) => ({ contender: f.name, callers: c, ...figures(cellOf(f, c)) }))),
    };

    // ---- 2. By fill ----------------------------------------------------------------------------
    await server.flush(); // table 1's keys would otherwise expire during table 2's cells
    const load2 = loads();
    const fillKeys = makeKeys(FILL_KEYS, 'fill:');
    const fresh = Array.from({ length: ROUNDS }, (_, r) => makeKeys(FRESH_KEYS, `fresh${r}:`));
    const byFill = new Map<string, Pool>();
    const fillOf = (f: ContenderFactory, fill: number): Pool => byFill.get(`${f.name}|${fill}`) as Pool;
    for (const f of CONTENDERS) for (const fill of FILLS) byFill.set(`${f.name}|${fill}`, emptyPool());
    lives = await open(server);
    const fillCalls2: Record<string, number> = Object.fromEntries(CONTENDERS.map((f) => [f.name, 0]));
    const replaced2: string[] = [];
    const add = (live: Live, calls: number): void => {
      fillCalls2[live.factory.name] = (fillCalls2[live.factory.name] ?? 0) + calls;
    };
    // One set of keys climbs 50 → 95 → 100: each level is reached by topping up the one before.
    for (const [fi, fill] of FILLS.entries()) {
      if (fill > 0) {
        for (const live of lives) {
          bench.progress(`by fill: filling ${FILL_KEYS.toLocaleString('en-US')} keys to ${fill}: ${live.factory.name}`);
          add(live, (await fillTo(server, live, fillKeys, fill, `filling to ${fill}`, replaced2)).calls);
        }
      }
      for (let round = 0; round < ROUNDS; round += 1) {
        const keysNow = fill === 0 ? (fresh[round] as string[]) : fillKeys;
        for (const live of rotate(lives, round + fi)) {
          bench.progress(`by fill ${fill}, round ${round + 1}/${ROUNDS}: ${live.factory.name}`);
          const pool = fillOf(live.factory, fill);
          if (fill > 0) {
            const filled = await fillTo(server, live, fillKeys, fill, `before fill ${fill}, round ${round + 1}`, replaced2);
            add(live, filled.calls);
            if (filled.missing > 0) shortfalls.push(`${live.factory.name}, fill ${fill}: ${filled.missing.toLocaleString('en-US')} calls`);
            pool.start.push(summarize(filled.levels));
          } else {
            pool.start.push({ mean: 0, min: 0, max: 0 });
          }
          for (const l of lives) await settle(l);
          addRun(pool, await measure(server, live, keysNow, FILL_CALLERS, FILL_WARMUP_MS, fillMeasureMs(fill)));
          pool.end.push(summarize(await levels(server, live.factory, keysNow, WINDOW)));
        }
      }
    }
    const health2 = await closeAll(lives);
    const load2End = loads();
    const fillName = (fill: number): string =>
      fill === 0
        ? `empty (${FRESH_KEYS.toLocaleString('en-US')} fresh keys a round)`
        : fill === WINDOW.limit
          ? `full (${fill})`
          : String(fill);

    bench.section(
      `By fill: ${FILL_CALLERS} callers, ${FILL_KEYS.toLocaleString('en-US')} keys (load average ${load2} at the start, ${load2End} at the end)`,
      `${table(
        ['calls per key', ...COMPARED, 'refused resilimit / RLF', 'resilimit: answered locally'],
        FILLS.map((fill) => {
          const [r, f] = [figures(fillOf(R, fill)), figures(fillOf(F, fill))];
          return [
            fillName(fill),
            ...compared(r, f),
            `${percent(r.denied, r.storeDecisions)} / ${percent(f.denied, f.storeDecisions)}`,
            localAnswers(fillOf(R, fill)),
          ];
        }),
        `l${'r'.repeat(14)}`,
      )}\n\nMeasured per round: ${FILLS.map((fill) => `${fillMeasureMs(fill)} ms at ${fill}`).join(', ')}, after the warm-up: short, so that the keys stay near their level (the levels found are in the last table; at 95 a key that reaches 100 refuses). The keys were filled through each contender (50, then topped up to 95, then to 100; resilimit ${(fillCalls2[R.name] ?? 0).toLocaleString('en-US')} calls of \`limit(key)\`, RLF ${(fillCalls2[F.name] ?? 0).toLocaleString('en-US')} calls' worth of \`consume(key, n)\`) and topped up before each cell. Refused: share of the store's decisions. At full, resilimit answers a key's calls after Redis refused it once from its deny cache (one call a second per key goes on to Redis), and those count as local. Node µs is per call settled, local answers included; Redis µs per decision Redis made. ${replacements(replaced2)}. At the end, ${health2}.`,
    );
    bench.section(
      'By fill: calls per key in the window at the start and the end of the cells (as above)',
      table(
        ['calls per key', 'resilimit', 'RLF'],
        FILLS.map((fill) => [fillName(fill), levelRange(fillOf(R, fill)), levelRange(fillOf(F, fill))]),
      ),
    );
    data['byFill'] = {
      keys: FILL_KEYS,
      freshKeys: FRESH_KEYS,
      callers: FILL_CALLERS,
      measureMs: Object.fromEntries(FILLS.map((fill) => [fill, fillMeasureMs(fill)])),
      loadAverage: { start: load2, end: load2End },
      fillCalls: fillCalls2,
      health: health2,
      replaced: replaced2,
      cells: CONTENDERS.flatMap((f) => FILLS.map((fill) => ({ contender: f.name, fill, ...figures(fillOf(f, fill)) }))),
    };

    if (shortfalls.length > 0) {
      bench.note(
        `**Keys short of their level at a cell's start** (top-ups the contender answered without its store): ${shortfalls.join('; ')}.`,
      );
    }
    const redisEnd = await redisNow(server);
    const wallS = (performance.now() - started) / 1000;
    const nodeS = (nodeCpuUs() - node0) / 1e6;
    const redisS = (redisEnd.cpuUs - redisStart.cpuUs) / 1e6;
    bench.note(
      `Whole run: ${wallS.toFixed(0)} s wall; CPU ${nodeS.toFixed(0)} s in this process, ${redisS.toFixed(0)} s in redis-server (fills included).`,
    );
    data['run'] = { wallS, nodeCpuS: nodeS, redisCpuS: redisS, shortfalls };
    await bench.finish(data);
  } finally {
    await server.close();
  }
});
