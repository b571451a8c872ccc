/** What the report's renderings say of a concurrency limit (`ConcurrencyLimiter`): its facts and its figures as labelled rows. */
import type { LimiterProfile, MostHeld, SlotFigures, SlotProfile } from '../types.js';

const ms = (v: number | undefined): string =>
  v === undefined ? 'never' : v < 1000 ? `${Math.round(v)} ms` : `${Number((v / 1000).toFixed(2))} s`;

/** The limiter and the load of a concurrency limit's run, as the run's facts list them. */
export function slotFacts(l: LimiterProfile, s: SlotProfile, lease: string): readonly (readonly [string, string])[] {
  const counted = s.instances === 'auto' ? `instances 'auto'${lease}` : `set for ${s.instances} instances`;
  return [
    [
      'limiter',
      `ConcurrencyLimiter: max ${s.max} slots per key, lease (ttlMs) ${ms(s.ttlMs)}, mode ${l.mode}, deadline ${ms(l.timeoutMs)}, ${counted}, share ${s.share}`,
    ],
    [
      'load',
      `${s.parallel} tasks at once per instance, each holding a slot ${s.holdMs[0]}–${s.holdMs[1]} ms, waiting up to ${ms(s.maxWaitMs)} for one`,
    ],
  ];
}

function most(m: MostHeld | undefined, max: number): string {
  return m === undefined ? 'not reached by the end' : `${m.count} of max ${max} on ${m.key} at ${ms(m.atMs)}`;
}

/** A concurrency limit's figures as labelled values, in the order the reports list them. */
export function slotFigureRows(f: SlotFigures): readonly (readonly [string, string])[] {
  const sources = Object.entries(f.bySource).map(([name, n]) => `${name} ${n}`);
  const keys = Object.entries(f.mostHeldByKey).map(([key, [h, d, r]]) => `${key} ${h} / ${d} / ${r}`);
  const bounds = Object.entries(f.faultBound).map(([key, b]) => `${key} ${b}`);
  const held = Object.entries(f.atFaultStart.held).map(([key, h]) => `${key} [${h.join(', ')}]`);
  return [
    [
      'slots held',
      `${f.held} (${sources.length === 0 ? 'none' : sources.join(', ')}; ${f.localWhileHealthy} not by Redis while healthy), ${f.refused} acquires refused`,
    ],
    ['most held at once, healthy', most(f.mostHeld.healthy, f.max)],
    ['most held at once, fault', most(f.mostHeld.fault, f.max)],
    ['most held at once, recovery', most(f.mostHeld.recovery, f.max)],
    [
      'most held at once, settled',
      `${most(f.mostHeld.settled, f.max)}${f.settledAtMs === undefined ? '' : ` (from ${ms(f.settledAtMs)}: every slot of the fault given back)`}`,
    ],
    ['most held per key (healthy / fault / recovery)', keys.join(', ')],
    ['held when Redis was lost, per instance (h_i)', held.join(', ')],
    ['share per instance (s_i)', `[${f.atFaultStart.share.join(', ')}]`],
    ['fault bound max(max, Σ max(h_i, s_i))', bounds.join(', ')],
    ['errors', `${f.errors.thrown} thrown, ${f.errors.unhandled} unhandled, ${f.errors.unfinished} tasks unfinished`],
    ['slots lost', `${f.lost} (longest event-loop stall ${ms(f.longestStallMs)})`],
    ['Redis back', `${ms(f.redisBackMs)} (per instance: ${f.redisBackMsByInstance.map((b) => ms(b ?? undefined)).join(', ')})`],
  ];
}
