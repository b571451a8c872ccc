/** A scenario's figures and chart series, computed from every call its instances made. Nothing is modelled. */
import type { LimiterStats } from '../limiter/Stats.js';
import type { BreakerState } from '../redis/Breaker.js';
import type { DecisionReason, DecisionSource } from '../types.js';
import type { ChaosPhase, Latency, ScenarioFigures, ScenarioSeries } from './types.js';

/** One `limit()` call; times are ms from the scenario's start. */
export type Call = {
  readonly instance: number;
  readonly key: string;
  readonly issuedMs: number;
  readonly latencyMs: number;
  readonly allowed: boolean;
  readonly source: DecisionSource | 'none';
  readonly reason: DecisionReason | 'none';
  /** When the deciding tier admitted it, on that tier's clock; undefined when not admitted. */
  readonly admittedAtMs: number | undefined;
  /** The key's limit as the decision gave it (0 when the call threw). */
  readonly limit: number;
  readonly threw: boolean;
};

/** One instance's own account: its event-loop stalls, breaker transitions and counters (ms from the start). */
export type InstanceRun = {
  readonly stalls: readonly { readonly atMs: number; readonly gapMs: number }[];
  readonly states: readonly { readonly atMs: number; readonly state: BreakerState }[];
  readonly unanswered: number;
  readonly unhandledRejections: number;
  readonly stats: LimiterStats | undefined;
};

export function percentiles(values: readonly number[]): Latency {
  if (values.length === 0) return { p50: 0, p95: 0, p99: 0, max: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99), max: sorted[sorted.length - 1] as number };
}

/** Admission times per key, sorted, and each key's limit (the largest a decision gave). */
function admissions(calls: readonly Call[]): Map<string, { times: number[]; limit: number }> {
  const byKey = new Map<string, { times: number[]; limit: number }>();
  for (const c of calls) {
    const entry = byKey.get(c.key) ?? { times: [], limit: 0 };
    entry.limit = Math.max(entry.limit, c.limit);
    if (c.admittedAtMs !== undefined) entry.times.push(c.admittedAtMs);
    byKey.set(c.key, entry);
  }
  for (const entry of byKey.values()) entry.times.sort((a, b) => a - b);
  return byKey;
}

/** The most admitted in any window (t − windowMs, t], checked at each admission, the key with the highest ratio to its limit. */
export function mostAdmitted(calls: readonly Call[], windowMs: number): ScenarioFigures['mostAdmitted'] {
  let best = { key: '', count: 0, limit: 0, ratio: 0 };
  for (const [key, { times, limit }] of admissions(calls)) {
    let start = 0;
    let most = 0;
    for (let end = 0; end < times.length; end++) {
      let last = end; // every admission at the same instant is inside the window too
      while (last + 1 < times.length && times[last + 1] === times[end]) last++;
      while ((times[start] as number) <= (times[end] as number) - windowMs) start++;
      most = Math.max(most, last - start + 1);
    }
    const ratio = limit > 0 ? most / limit : 0;
    if (ratio > best.ratio || best.key === '') best = { key, count: most, limit, ratio };
  }
  return best;
}

/** Index of the first element of `sorted` above `value`. */
function upperBound(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sorted[mid] as number) <= value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Admitted in (t − windowMs, t] of one key's sorted admission times. */
function inWindow(times: readonly number[], t: number, windowMs: number): number {
  return upperBound(times, t) - upperBound(times, t - windowMs);
}

export function figures(input: {
  calls: readonly Call[];
  runs: readonly InstanceRun[];
  phases: readonly ChaosPhase[];
  windowMs: number;
}): ScenarioFigures {
  const { calls, runs, phases, windowMs } = input;
  const faults = phases.filter((p) => p.fault);
  const faultStart = Math.min(...faults.map((p) => p.startMs));
  const faultEnd = Math.max(...faults.map((p) => p.endMs));
  const inFault = (t: number): boolean => faults.some((p) => t >= p.startMs && t < p.endMs);

  const bySource: Partial<Record<DecisionSource, number>> = {};
  const byReason: Partial<Record<DecisionReason, number>> = {};
  for (const c of calls) {
    if (c.source === 'none' || c.reason === 'none') continue;
    bySource[c.source] = (bySource[c.source] ?? 0) + 1;
    byReason[c.reason] = (byReason[c.reason] ?? 0) + 1;
  }

  const byKey = admissions(calls);
  let refusedWithRoom = 0;
  for (const c of calls) {
    if (c.allowed || c.threw) continue;
    const entry = byKey.get(c.key);
    if (entry !== undefined && inWindow(entry.times, c.issuedMs, windowMs) < entry.limit) refusedWithRoom += 1;
  }

  const opened = runs.flatMap((r) => r.states.filter((s) => s.state === 'open' && s.atMs >= faultStart).map((s) => s.atMs));
  let timeToCloseMs: number | undefined;
  const finals = runs.map((r) => r.states.at(-1));
  if (finals.every((s) => s === undefined || s.state === 'closed')) {
    timeToCloseMs = Math.max(0, ...finals.map((s) => (s === undefined ? 0 : s.atMs - faultEnd)));
  }
  // Each instance's first Redis decision after the fault (the earliest answer, whatever the calls' order); the slowest instance.
  const back = runs.map(() => Number.POSITIVE_INFINITY);
  for (const c of calls) {
    if (c.source === 'redis' && c.issuedMs >= faultEnd)
      back[c.instance] = Math.min(back[c.instance] ?? Infinity, c.issuedMs + c.latencyMs - faultEnd);
  }
  const slowest = Math.max(0, ...back);
  const redisBackMs = Number.isFinite(slowest) ? slowest : undefined;

  const sum = (pick: (s: LimiterStats) => number): number => runs.reduce((a, r) => a + (r.stats === undefined ? 0 : pick(r.stats)), 0);
  return {
    decisions: calls.filter((c) => !c.threw).length,
    admitted: calls.filter((c) => c.allowed).length,
    mostAdmitted: mostAdmitted(calls, windowMs),
    mostAdmittedByRedis: mostAdmitted(
      calls.map((c) => (c.source === 'redis' ? c : { ...c, admittedAtMs: undefined })),
      windowMs,
    ),
    faultLatency: percentiles(calls.filter((c) => inFault(c.issuedMs)).map((c) => c.latencyMs)),
    faultLatencyNetOfStalls: percentiles(
      calls.filter((c) => inFault(c.issuedMs)).map((c) => netOfStalls(c, runs[c.instance]?.stalls ?? [])),
    ),
    latencyNetOfStallsMax: Math.max(0, ...calls.map((c) => netOfStalls(c, runs[c.instance]?.stalls ?? []))),
    lost: {
      exceptions: calls.filter((c) => c.threw).length,
      unhandledRejections: runs.reduce((a, r) => a + r.unhandledRejections, 0),
      unanswered: runs.reduce((a, r) => a + r.unanswered, 0),
    },
    timeToOpenMs: opened.length === 0 ? undefined : Math.min(...opened) - faultStart,
    timeToCloseMs,
    redisBackMs,
    refusedWithRoom,
    writeBack: {
      answeredLocally: calls.filter((c) => c.allowed && c.source === 'local').length,
      written: sum((s) => s.reconcile.written),
      present: sum((s) => s.reconcile.present),
      expired: sum((s) => s.reconcile.expired),
      dropped: sum((s) => s.reconcile.dropped),
      pending: sum((s) => s.reconcile.pending),
    },
    bySource,
    byReason,
  };
}

/** A call's latency less its overlap with its process's event-loop stalls: a stall delays every pending answer, whoever makes it. */
export function netOfStalls(call: Pick<Call, 'issuedMs' | 'latencyMs'>, stalls: InstanceRun['stalls']): number {
  const end = call.issuedMs + call.latencyMs;
  let stalled = 0;
  for (const s of stalls) stalled += Math.max(0, Math.min(end, s.atMs + s.gapMs) - Math.max(call.issuedMs, s.atMs));
  return call.latencyMs - stalled;
}

/** The charts' series: per step, the busiest key's admitted in its window, latency, and decisions by source. */
export function series(input: {
  calls: readonly Call[];
  runs: readonly InstanceRun[];
  durationMs: number;
  windowMs: number;
  busiest: string;
  stepMs: number;
}): ScenarioSeries {
  const { calls, runs, durationMs, windowMs, busiest, stepMs } = input;
  const steps = Math.ceil(durationMs / stepMs);
  const key = admissions(calls).get(busiest) ?? { times: [], limit: 0 };
  const latencies: number[][] = Array.from({ length: steps }, () => []);
  const bySource: Partial<Record<DecisionSource, number[]>> = {};
  const zeros = (): number[] => new Array<number>(steps).fill(0);
  const byInstance = runs.map(() => ({ decisions: zeros(), admitted: zeros() }));
  for (const c of calls) {
    const i = Math.min(steps - 1, Math.max(0, Math.floor(c.issuedMs / stepMs)));
    latencies[i]?.push(c.latencyMs);
    const own = byInstance[c.instance];
    if (own !== undefined && !c.threw) own.decisions[i] = (own.decisions[i] as number) + 1;
    if (own !== undefined && c.allowed) own.admitted[i] = (own.admitted[i] as number) + 1;
    if (c.source === 'none') continue;
    const counts = bySource[c.source] ?? zeros();
    counts[i] = (counts[i] as number) + 1;
    bySource[c.source] = counts;
  }
  const round = (v: number): number => Math.round(v * 1000) / 1000;
  const perStep = latencies.map((l) => percentiles(l));
  return {
    stepMs,
    limit: key.limit,
    admittedInWindow: Array.from({ length: steps }, (_, i) => inWindow(key.times, (i + 1) * stepMs, windowMs)),
    latencyP99: perStep.map((p) => round(p.p99)),
    latencyMax: perStep.map((p) => round(p.max)),
    bySource,
    byInstance,
    breaker: runs.flatMap((r, instance) => r.states.map((s) => ({ atMs: Math.round(s.atMs), instance, state: s.state }))),
  };
}
