/** The figures of a scenario, computed from its calls as the load generator saw them. */
import type { DecisionReason, DecisionSource } from '../src/index.ts';
import type { OverWindow, Percentiles } from './types.ts';

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
