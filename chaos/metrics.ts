/** The figures of a scenario, computed from its calls as the load generator saw them. */
import type { BreakerState, DecisionReason, DecisionSource } from '../src/index.ts';
import type { Bucket, OverWindow, Percentiles, Phase, ScenarioResult } from './types.ts';

/** One `limit()` call as the load generator saw it. Times are ms from the scenario's start. */
export type Call = {
  readonly issuedMs: number;
  readonly latencyMs: number;
  readonly instance: number;
  readonly key: string;
  readonly allowed: boolean;
  readonly source: DecisionSource | undefined;
  readonly reason: DecisionReason | undefined;
  /** When the deciding tier admitted it, on that tier's clock; undefined when not admitted. */
  readonly admittedAtMs: number | undefined;
  readonly threw: boolean;
};

const SOURCES: readonly DecisionSource[] = ['redis', 'local', 'fail-open', 'fail-closed', 'disabled'];

export function percentiles(values: readonly number[]): Percentiles {
  if (values.length === 0) return { p50: 0, p99: 0, max: 0, count: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
  return { p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] as number, count: sorted.length };
}

/**
 * The largest number of permits admitted over the limit in any window (t - windowMs, t], checked at
 * every admitted call's time, per key and across instances; how many admitted calls found their
 * window over the limit; and the first such window's calls.
 */
export function overLimit(
  calls: readonly Call[],
  windowMs: number,
  limit: number,
): { maxExcess: number; callsOver: number; firstOver?: OverWindow } {
  const byKey = new Map<string, Call[]>();
  for (const call of calls) {
    if (call.admittedAtMs === undefined) continue;
    const admitted = byKey.get(call.key) ?? [];
    admitted.push(call);
    byKey.set(call.key, admitted);
  }
  let maxExcess = 0;
  let callsOver = 0;
  let firstOver: OverWindow | undefined;
  for (const [key, admitted] of byKey) {
    admitted.sort((a, b) => (a.admittedAtMs as number) - (b.admittedAtMs as number));
    const at = (i: number): number => admitted[i]?.admittedAtMs as number;
    let start = 0;
    for (let end = 0; end < admitted.length; end++) {
      // Every call at the same instant as `end` is inside its window too.
      let last = end;
      while (last + 1 < admitted.length && at(last + 1) === at(end)) last++;
      while (at(start) <= at(end) - windowMs) start++;
      const excess = last - start + 1 - limit;
      if (excess > 0) {
        maxExcess = Math.max(maxExcess, excess);
        callsOver += 1;
        if (firstOver === undefined || at(end) < (firstOver.calls.at(-1)?.atMs ?? Infinity)) {
          firstOver = {
            key,
            calls: admitted.slice(start, last + 1).map((c) => ({
              atMs: Math.round((c.admittedAtMs as number) * 1000) / 1000,
              instance: c.instance,
              source: c.source ?? 'none',
              reason: c.reason ?? 'none',
            })),
          };
        }
      }
    }
  }
  return firstOver === undefined ? { maxExcess, callsOver } : { maxExcess, callsOver, firstOver };
}

type Stall = { atMs: number; gapMs: number };

/** A call's latency once the event-loop stalls of this process that overlap it are taken out. */
function netOfStalls(call: Call, stalls: readonly Stall[]): number {
  const end = call.issuedMs + call.latencyMs;
  let stalled = 0;
  for (const st of stalls) stalled += Math.max(0, Math.min(end, st.atMs + st.gapMs) - Math.max(call.issuedMs, st.atMs));
  return call.latencyMs - stalled;
}

/** The longest call once the event-loop stalls overlapping it are taken out (see `latencyNetOfStallsMax`). */
export function netOfStallsMax(calls: readonly Call[], stalls: readonly Stall[]): number {
  let max = 0;
  for (const call of calls) max = Math.max(max, netOfStalls(call, stalls));
  return max;
}

export function measure(input: {
  calls: readonly Call[];
  phases: readonly Phase[];
  windowMs: number;
  limit: number;
  durationMs: number;
  bucketMs: number;
  instances: number;
  stateChanges: readonly { atMs: number; instance: number; state: BreakerState }[];
  /** Gaps in the load driver's ~1 ms wake-ups (this process's event loop held up), ms from the start. */
  stalls?: readonly { atMs: number; gapMs: number }[];
}): { timeline: Bucket[]; metrics: Omit<ScenarioResult['metrics'], 'unhandledRejections'> } {
  const { calls, phases, windowMs, limit, durationMs, bucketMs, stateChanges, instances } = input;
  const faults = phases.filter((p) => p.fault);
  const inFault = (t: number): boolean => faults.some((p) => t >= p.startMs && t < p.endMs);

  const buckets = Array.from({ length: Math.ceil(durationMs / bucketMs) }, (_, i) => ({
    atMs: i * bucketMs,
    decisions: 0,
    admitted: 0,
    bySource: Object.fromEntries(SOURCES.map((s) => [s, 0])) as Record<DecisionSource, number>,
  }));
  const bySource = Object.fromEntries(SOURCES.map((s) => [s, 0])) as Record<DecisionSource, number>;
  const byReason: Partial<Record<DecisionReason, number>> = {};
  for (const call of calls) {
    const bucket = buckets[Math.min(buckets.length - 1, Math.floor(call.issuedMs / bucketMs))];
    if (bucket === undefined || call.source === undefined || call.reason === undefined) continue;
    bucket.decisions += 1;
    bucket.bySource[call.source] += 1;
    if (call.allowed) bucket.admitted += 1;
    bySource[call.source] += 1;
    byReason[call.reason] = (byReason[call.reason] ?? 0) + 1;
  }

  const firstFault = faults[0];
  const lastFault = faults[faults.length - 1];
  const opened = stateChanges.find((c) => c.state === 'open' && firstFault !== undefined && c.atMs >= firstFault.startMs);
  let timeToCloseMs: number | undefined;
  if (lastFault !== undefined) {
    const finalStates = new Map<number, { state: BreakerState; atMs: number }>();
    for (const c of stateChanges) finalStates.set(c.instance, c);
    const allClosed = Array.from({ length: instances }, (_, i) => finalStates.get(i)?.state ?? 'closed').every((s) => s === 'closed');
    if (allClosed) {
      const lastClose = Math.max(lastFault.endMs, ...[...finalStates.values()].map((c) => c.atMs));
      timeToCloseMs = lastClose - lastFault.endMs;
    }
  }

  return {
    timeline: buckets,
    metrics: {
      decisions: calls.filter((c) => !c.threw).length,
      admitted: calls.filter((c) => c.allowed).length,
      exceptions: calls.filter((c) => c.threw).length,
      faultLatency: percentiles(calls.filter((c) => inFault(c.issuedMs)).map((c) => c.latencyMs)),
      faultLoopStallMs: Math.max(0, ...(input.stalls ?? []).filter((st) => inFault(st.atMs)).map((st) => st.gapMs)),
      faultLatencyNetOfStalls: percentiles(calls.filter((c) => inFault(c.issuedMs)).map((c) => netOfStalls(c, input.stalls ?? []))),
      latency: percentiles(calls.map((c) => c.latencyMs)),
      latencyNetOfStallsMax: netOfStallsMax(calls, input.stalls ?? []),
      bySource,
      byReason: byReason as Record<DecisionReason, number>,
      timeToOpenMs: opened === undefined || firstFault === undefined ? undefined : opened.atMs - firstFault.startMs,
      timeToCloseMs,
      overLimit: overLimit(calls, windowMs, limit),
    },
  };
}
