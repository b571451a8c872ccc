/**
 * One closed-loop cell of `bench/steady.ts`, measured on both sides of the wire over its measured
 * interval only: the store's decisions and their latency, this process's CPU (`process.cpuUsage`) and
 * the redis-server's (`INFO cpu`), and the decisions Redis made; and a cell's rounds, pooled.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { closedLoop, samplesOf } from './closedLoop.ts';
import { STORE_OUTCOMES, type Contender, type ContenderFactory } from './contenders.ts';
import type { Level } from './levels.ts';
import { Samples } from './samples.ts';
import type { BenchServer } from './server.ts';

export type Live = { factory: ContenderFactory; contender: Contender };

/** One cell's measured interval. */
export type Run = {
  elapsedMs: number;
  store: Samples;
  /** Calls settled in the interval, whoever answered. */
  calls: number;
  denied: number;
  /** Calls answered by something other than the store (resilimit's local tier). */
  local: number;
  nodeUs: number;
  redisUs: number;
  /** Decisions Redis made between the two CPU readings. */
  redisDecisions: number;
  /** resilimit: why it answered calls itself (`stats().byReason` over the interval, 'decided' left out). */
  reasons: Record<string, number>;
};

/** A cell's rounds, pooled, with the levels its keys held at each round's start and end. */
export type Pool = Run & { rounds: number[]; start: Level[]; end: Level[] };

export const emptyPool = (): Pool => ({
  elapsedMs: 0,
  store: new Samples(),
  calls: 0,
  denied: 0,
  local: 0,
  nodeUs: 0,
  redisUs: 0,
  redisDecisions: 0,
  reasons: {},
  rounds: [],
  start: [],
  end: [],
});

export function nodeCpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** The redis-server's CPU µs so far (every thread) and its script calls, read at one instant. */
export async function redisNow(server: BenchServer): Promise<{ cpuUs: number; scriptCalls: number }> {
  const text = (await server.admin.call('INFO', 'cpu', 'commandstats')) as string;
  let cpuUs = 0;
  let scriptCalls = 0;
  for (const line of text.split(/\r?\n/)) {
    const cpu = /^used_cpu_(?:user|sys):([\d.]+)/.exec(line);
    if (cpu !== null) cpuUs += Number(cpu[1]) * 1e6;
    const script = /^cmdstat_(?:eval|evalsha):calls=(\d+)/.exec(line);
    if (script !== null) scriptCalls += Number(script[1]);
  }
  return { cpuUs, scriptCalls };
}

export async function measure(
  server: BenchServer,
  { contender }: Live,
  keys: readonly string[],
  concurrency: number,
  warmupMs: number,
  durationMs: number,
): Promise<Run> {
  let node0 = 0;
  let redis0: ReturnType<typeof redisNow> = Promise.resolve({ cpuUs: 0, scriptCalls: 0 });
  let stats0: ReturnType<NonNullable<Contender['stats']>> | undefined;
  const result = await closedLoop({
    concurrency,
    warmupMs,
    durationMs,
    keys,
    call: contender.decide,
    onMeasure: () => {
      node0 = nodeCpuUs();
      redis0 = redisNow(server);
      stats0 = contender.stats?.();
    },
  });
  const nodeUs = nodeCpuUs() - node0;
  const redis1 = await redisNow(server);
  const stats1 = contender.stats?.();
  const before = await redis0;
  const store = samplesOf(result, STORE_OUTCOMES);
  const reasons: Record<string, number> = {};
  if (stats0 !== undefined && stats1 !== undefined) {
    for (const [reason, n] of Object.entries(stats1.byReason)) {
      const delta = n - (stats0.byReason[reason as keyof typeof stats0.byReason] ?? 0);
      if (reason !== 'decided' && delta !== 0) reasons[reason] = delta;
    }
  }
  return {
    elapsedMs: result.elapsedMs,
    store,
    calls: result.total,
    denied: result.byOutcome.get('denied')?.count ?? 0,
    local: result.total - store.count,
    nodeUs,
    redisUs: redis1.cpuUs - before.cpuUs,
    // resilimit counts its Redis decisions itself (a script call makes several); a peer makes one per script call.
    redisDecisions:
      stats0 !== undefined && stats1 !== undefined
        ? stats1.bySource.redis - stats0.bySource.redis
        : redis1.scriptCalls - before.scriptCalls,
    reasons,
  };
}

export function addRun(pool: Pool, run: Run): void {
  pool.elapsedMs += run.elapsedMs;
  pool.rounds.push((run.store.count * 1000) / run.elapsedMs);
  pool.store.merge(run.store);
  pool.calls += run.calls;
  pool.denied += run.denied;
  pool.local += run.local;
  pool.nodeUs += run.nodeUs;
  pool.redisUs += run.redisUs;
  pool.redisDecisions += run.redisDecisions;
  for (const [reason, n] of Object.entries(run.reasons)) pool.reasons[reason] = (pool.reasons[reason] ?? 0) + n;
}

/**
 * Waits (at most 5 s) until resilimit's breaker is closed and its journal written back: a write-back
 * pass running in the other contender's cell would count in that contender's Node CPU.
 */
export async function settle({ contender }: Live): Promise<void> {
  for (let waited = 0; waited < 5_000; waited += 50) {
    const stats = contender.stats?.();
    if (stats === undefined || (stats.state === 'closed' && stats.reconcile.pending === 0)) return;
    await sleep(50);
  }
}

/** The figures printed and saved for a pooled cell. */
export function figures(pool: Pool) {
  const { p50, p99, max } = pool.store.summary();
  return {
    decisionsPerSecond: (pool.store.count * 1000) / pool.elapsedMs,
    callsPerSecond: (pool.calls * 1000) / pool.elapsedMs,
    p50,
    p99,
    max,
    nodeUsPerCall: pool.nodeUs / pool.calls,
    redisUsPerDecision: pool.redisUs / pool.redisDecisions,
    calls: pool.calls,
    storeDecisions: pool.store.count,
    redisDecisions: pool.redisDecisions,
    denied: pool.denied,
    local: pool.local,
    localReasons: pool.reasons,
    elapsedMs: pool.elapsedMs,
    rounds: pool.rounds,
    levelAtStart: pool.start,
    levelAtEnd: pool.end,
  };
}

/** The contenders in round `r`'s order: each goes first in turn. */
export function rotate<T>(items: readonly T[], r: number): T[] {
  const k = r % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
}

/**
 * Closes the contenders; says how often resilimit's breaker had opened in the limiter closed last,
 * and how many calls it admitted locally that Redis never saw (its journal dropped them).
 */
export async function closeAll(lives: readonly Live[]): Promise<string> {
  const notes: string[] = [];
  for (const { contender } of lives) {
    const stats = contender.stats?.();
    if (stats !== undefined) {
      notes.push(
        `resilimit's breaker had opened ${stats.opened} time${stats.opened === 1 ? '' : 's'} in its last limiter, whose journal had dropped ${stats.reconcile.dropped.toLocaleString('en-US')} calls`,
      );
    }
    await contender.close();
  }
  return notes.join('; ');
}
