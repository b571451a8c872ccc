/**
 * A concurrency limit's figures and verdicts, from every slot its instances' tasks held (measured from
 * `acquire()` resolving to `release()` being called): the most held at once per phase and per key,
 * against the bound docs/concurrency.md states ("What holds"). Nothing is modelled.
 */
import type { Mode } from '../options/options.js';
import type { SlotsDone } from './protocol.js';
import type { ChaosPhase, MostHeld, SlotFigures, Verdict, VerdictName } from './types.js';

/** One slot held; times are ms from the scenario's start. */
export type Interval = {
  readonly instance: number;
  readonly key: string;
  readonly start: number;
  readonly end: number;
  readonly source: string;
};

/** The most slots of one key held at once within [from, to), and when; a slot given back and taken in the same ms is not two. */
export function mostHeldOf(intervals: readonly Interval[], from: number, to: number): { count: number; atMs: number } {
  const events: [number, number][] = [];
  for (const i of intervals) {
    const start = Math.max(i.start, from);
    const end = Math.min(i.end, to);
    if (start < end) events.push([start, 1], [end, -1]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let count = 0;
  let most = { count: 0, atMs: from };
  for (const [at, delta] of events) {
    count += delta;
    if (count > most.count) most = { count, atMs: at };
  }
  return most;
}

/** Per key, the most held within [from, to); and the key where it was most. */
function perKey(byKey: ReadonlyMap<string, Interval[]>, from: number, to: number): { most: MostHeld; counts: Map<string, number> } {
  const counts = new Map<string, number>();
  let most: MostHeld = { count: 0, key: '', atMs: from };
  for (const [key, list] of byKey) {
    const m = mostHeldOf(list, from, to);
    counts.set(key, m.count);
    if (m.count > most.count || most.key === '') most = { count: m.count, key, atMs: Math.round(m.atMs) };
  }
  return { most, counts };
}

export type SlotInput = {
  readonly results: readonly (SlotsDone | undefined)[];
  readonly t0: number;
  readonly keys: readonly string[];
  readonly phases: readonly ChaosPhase[];
  readonly max: number;
  readonly mode: Mode;
  readonly ttlMs: number;
  readonly require: readonly VerdictName[];
};

/** The figures of one scenario, and the slot bound's span to check: per key, the most held from the fault's start until settled. */
export function slotFigures(input: SlotInput): { figures: SlotFigures; unsettled: Map<string, number> } {
  const { results, t0, keys, phases, max, mode } = input;
  const faults = phases.filter((p) => p.fault);
  const faultStart = Math.min(...faults.map((p) => p.startMs));
  const faultEnd = Math.max(...faults.map((p) => p.endMs));
  const intervals: Interval[] = [];
  const bySource: Record<string, number> = {};
  for (const [instance, r] of results.entries()) {
    for (const [start, end, source, k] of r?.held ?? []) {
      intervals.push({ instance, key: keys[k] as string, start: start - t0, end: end - t0, source });
      bySource[source] = (bySource[source] ?? 0) + 1;
    }
  }
  const byKey = new Map<string, Interval[]>(keys.map((k) => [k, []]));
  for (const i of intervals) byKey.get(i.key)?.push(i);
  // Settled: every slot held or taken before the fault ended, and every slot Redis did not give, given back.
  let settle = faultEnd;
  for (const i of intervals) if (i.start < faultEnd || i.source !== 'redis') settle = Math.max(settle, i.end);
  const end = Math.max(settle, ...intervals.map((i) => i.end));
  const settledAtMs = settle < end ? Math.round(settle) : undefined;
  // h_i: what instance i held when it lost Redis. That moment is not seen from outside (a kill takes
  // a while, a deadline is missed after it): the most it held from the fault's start until its first
  // slot not given by Redis (or at the fault's start, if it took none). An estimate from above.
  const lostAt = results.map((_, n) => {
    const starts = intervals.filter((i) => i.instance === n && i.source !== 'redis' && i.start >= faultStart).map((i) => i.start);
    return starts.length === 0 ? faultStart : Math.min(...starts);
  });
  const held: Record<string, number[]> = {};
  for (const key of keys) {
    held[key] = lostAt.map((at, n) => {
      const own = intervals.filter((i) => i.instance === n && i.key === key);
      return at === faultStart
        ? own.filter((i) => i.start <= faultStart && i.end > faultStart).length
        : mostHeldOf(own, faultStart, at).count;
    });
  }
  const share = results.map((r) => {
    const samples = r?.shares ?? [];
    const before = samples.filter(([at]) => at - t0 <= faultStart).at(-1);
    const during = samples.filter(([at]) => at - t0 > faultStart && at - t0 < settle).map(([, s]) => s);
    return Math.max(0, before?.[1] ?? 0, ...during);
  });
  const faultBound: Record<string, number> = {};
  for (const key of keys) {
    faultBound[key] = Math.max(
      max,
      (held[key] as number[]).reduce((sum, h, n) => sum + Math.max(h, share[n] as number), 0),
    );
  }
  const healthy = perKey(byKey, 0, faultStart);

  const fault = perKey(byKey, faultStart, faultEnd);
  const recovery = perKey(byKey, faultEnd, Number.POSITIVE_INFINITY);
  const unsettled = perKey(byKey, faultStart, settle).counts;
  const mostHeldByKey: Record<string, [number, number, number]> = {};
  for (const key of keys) {
    mostHeldByKey[key] = [healthy.counts.get(key) ?? 0, fault.counts.get(key) ?? 0, recovery.counts.get(key) ?? 0];
  }
  const back = results.map((_, n) => {
    const first = intervals.filter((i) => i.instance === n && i.source === 'redis' && i.start >= faultEnd).map((i) => i.start);
    return first.length === 0 ? Number.POSITIVE_INFINITY : Math.min(...first) - faultEnd;
  });
  const slowest = Math.max(0, ...back);
  const sum = (pick: (r: SlotsDone) => number): number => results.reduce((a, r) => a + (r === undefined ? 0 : pick(r)), 0);
  const figures: SlotFigures = {
    max,
    mode,
    held: intervals.length,
    bySource,
    refused: sum((r) => r.refused),
    localWhileHealthy: intervals.filter((i) => i.start < faultStart && i.source !== 'redis').length,
    mostHeld: {
      healthy: healthy.most,
      fault: fault.most,
      recovery: recovery.most,
      settled: settledAtMs === undefined ? undefined : perKey(byKey, settle, Number.POSITIVE_INFINITY).most,
    },
    mostHeldByKey,
    atFaultStart: { held, share },
    faultBound,
    settledAtMs,
    errors: { thrown: sum((r) => r.thrown), unhandled: sum((r) => r.unhandledRejections), unfinished: sum((r) => r.unfinished) },
    lost: Math.max(
      sum((r) => r.lost),
      sum((r) => r.held.filter((h) => h[4] === 1).length),
    ),
    longestStallMs: Math.round(Math.max(0, ...results.flatMap((r) => (r?.stalls ?? []).map(([, gap]) => gap)))),
    redisBackMs: Number.isFinite(slowest) ? Math.round(slowest) : undefined,
    redisBackMsByInstance: back.map((b) => (Number.isFinite(b) ? Math.round(b) : null)),
  };
  return { figures, unsettled };
}

/** Why each of the rate limit's verdicts is not one of a concurrency limit's. */
const NOT_APPLICABLE: readonly [VerdictName, string][] = [
  ['bound', 'a concurrency limit has no window: slot-bound counts the slots held at once'],
  ['redis-bound', "not measured: the harness does not read Redis's sorted sets; slot-bound counts every slot held, whoever gave it"],
  ['deadline', "not measured: acquire() waits up to maxWaitMs for room by design, so its latency is not the breaker's deadline"],
  ['latency', 'not measured: acquire() waits up to maxWaitMs for room by design'],
  ['lost', 'a concurrency limit answers no decisions: see errors and slot-lost'],
  [
    'write-back',
    'not measured: slots taken locally are written into Redis before the next acquire there; their effect is in slot-bound once settled',
  ],
];

/** The verdicts of a concurrency limit's scenario; those of the rate limit are marked not applicable, never passed. */
export function slotVerdicts(f: SlotFigures, unsettled: ReadonlyMap<string, number>, input: SlotInput): Verdict[] {
  const { mode, max, ttlMs, require } = input;
  const promised = mode !== 'fail-open' || require.includes('slot-bound');
  const boundOf = (key: string): number => (mode === 'fail-closed' ? max : (f.faultBound[key] ?? max));
  let worst = { key: '', count: 0, bound: max };
  for (const [key, count] of unsettled) {
    const bound = boundOf(key);
    if (worst.key === '' || count - bound > worst.count - worst.bound) worst = { key, count, bound };
  }
  const { healthy, fault, recovery, settled } = f.mostHeld;
  // Redis missed a deadline while healthy: an instance answered on its share, as in a fault.
  const healthyBound = f.localWhileHealthy === 0 ? max : max + f.atFaultStart.share.reduce((a, s) => a + s, 0);
  const quiet = healthy.count <= healthyBound && (settled === undefined || settled.count <= max);
  const overFault = worst.count > worst.bound;
  const faultText =
    mode === 'fail-closed'
      ? `≤ max ${max} throughout in 'fail-closed'`
      : `≤ max(max, Σ max(h_i, s_i)) from the fault's start until settled (${worst.bound} on ${worst.key})${promised ? '' : `, not promised in 'fail-open' (reported)`}`;
  const failures = [
    ...(healthy.count > healthyBound ? [`${healthy.count - healthyBound} over ${healthyBound} while healthy (${healthy.key})`] : []),
    ...(settled !== undefined && settled.count > max ? [`${settled.count - max} over max once settled (${settled.key})`] : []),
    ...(promised && overFault ? [`${worst.count - worst.bound} over the fault bound (${worst.key})`] : []),
  ];
  const stalled = f.longestStallMs >= ttlMs;
  const errors = f.errors.thrown + f.errors.unhandled + f.errors.unfinished;
  return [
    // 'fail-open' promises nothing during a fault: reported, unless held past max while healthy or settled.
    check('slot-bound', !quiet ? false : promised ? !overFault : undefined, {
      figure: `healthy ${healthy.count}, fault ${fault.count}, recovery ${recovery.count}, settled ${settled?.count ?? '—'} (max ${max}; ${worst.count} of ${worst.bound} until settled)`,
      bound: `≤ max ${max} while healthy${f.localWhileHealthy === 0 ? '' : ` (${healthyBound}, max + Σ s_i: ${f.localWhileHealthy} slots taken locally then)`} and once settled; ${faultText}`,
      miss: failures.join('; '),
    }),
    check('errors', errors === 0, {
      figure: `${f.errors.thrown} thrown, ${f.errors.unhandled} unhandled, ${f.errors.unfinished} tasks unfinished`,
      bound: 'none',
      miss: `${errors} errors`,
    }),
    check('slot-lost', stalled ? undefined : f.lost === 0, {
      figure: `${f.lost} lost (longest event-loop stall ${f.longestStallMs} ms)`,
      bound: stalled
        ? `none promised: an instance stalled for the lease (${ttlMs} ms) or longer`
        : 'none: no instance stalled for its lease',
      miss: `${f.lost} slots lost`,
    }),
    check('recovery', f.redisBackMs !== undefined, {
      figure:
        f.redisBackMs === undefined ? 'Redis granted no slot to some instance' : `Redis granted slots ${f.redisBackMs} ms after the fault`,
      bound: 'Redis grants every instance a slot again before the end',
      miss: 'every instance must reach Redis again',
    }),
    ...NOT_APPLICABLE.map(([name, why]): Verdict => ({ name, pass: undefined, figure: 'not applicable', bound: why, applicable: false })),
  ];
}

function check(name: VerdictName, pass: boolean | undefined, text: { figure: string; bound: string; miss: string }): Verdict {
  return pass === false
    ? { name, pass, figure: text.figure, bound: text.bound, detail: text.miss }
    : { name, pass, figure: text.figure, bound: text.bound };
}
