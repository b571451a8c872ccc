/** The figures of a scenario, computed from its calls as the load generator saw them. */
import type { DecisionReason, DecisionSource } from '../src/index.ts';
import { netOfStalls, percentiles as harnessPercentiles } from '../src/chaos/figures.ts';
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

/** The harness's percentiles (`src/chaos/figures.ts`), with how many values they are of. */
export function percentiles(values: readonly number[]): Percentiles {
  return { ...harnessPercentiles(values), count: values.length };
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

/** The longest call once the event-loop stalls overlapping it are taken out (see `latencyNetOfStallsMax`). */
export function netOfStallsMax(calls: readonly Call[], stalls: readonly Stall[]): number {
  let max = 0;
  for (const call of calls) max = Math.max(max, netOfStalls(call, stalls));
  return max;
}
