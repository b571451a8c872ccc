/**
 * Every call of the demo as the load generator saw it, and the per-second figures built from them
 * as the run goes (the live display) and at the end (demo.json). Times are ms from the load's start.
 */
import type { BreakerState, DecisionReason, DecisionSource } from '../../src/index.ts';
import { percentiles, type Call } from '../../chaos/metrics.ts';
import type { Percentiles, StateChange } from '../../chaos/types.ts';
import type { DemoPhase, PhaseName } from './script.ts';

export type { Call };

export const SOURCES: readonly DecisionSource[] = ['redis', 'local', 'fail-open', 'fail-closed', 'disabled'];

/** One second of the run, `[second, second + 1)` s, as printed live and written to demo.json. */
export type SecondFigures = {
  readonly second: number;
  /** The phase this second belongs to (phases start on whole seconds). */
  readonly phase: PhaseName;
  /** Calls issued in this second (the offered load). */
  readonly offered: number;
  /** Decisions of the calls issued in this second (all of them, once each is answered). */
  readonly decisions: number;
  /** Calls admitted in this second, by the time the deciding tier admitted them (its own clock). */
  readonly admitted: number;
  readonly admittedBy: Readonly<Record<DecisionSource, number>>;
  readonly bySource: Readonly<Record<DecisionSource, number>>;
  readonly byReason: Readonly<Partial<Record<DecisionReason, number>>>;
  /** Decisions Redis made. */
  readonly redis: number;
  /** Decisions the fallback of the mode made (local window, fail-open, fail-closed), deny cache aside. */
  readonly fallback: number;
  /** Rejections the deny cache repeated (source `local`, reason `deny-cache`): Redis rejected the key moments before. */
  readonly denyCache: number;
  /** Each instance's breaker at the end of the second. */
  readonly breakers: readonly BreakerState[];
  /** Latency of the decisions of the calls issued in this second, ms. */
  readonly latencyMs: Percentiles;
};

type Accumulator = {
  offered: number;
  admitted: number;
  admittedBy: Record<DecisionSource, number>;
  bySource: Record<DecisionSource, number>;
  byReason: Partial<Record<DecisionReason, number>>;
  denyCache: number;
  latencies: number[];
};

const zeroBySource = (): Record<DecisionSource, number> => Object.fromEntries(SOURCES.map((s) => [s, 0])) as Record<DecisionSource, number>;

/** Latencies to 3 significant digits: enough for a report, without float noise. */
export function rounded(p: Percentiles): Percentiles {
  const r = (v: number): number => Number(v.toPrecision(3));
  return { p50: r(p.p50), p99: r(p.p99), max: r(p.max), count: p.count };
}

/** Collects calls and breaker transitions; builds the figures of any second. */
export class Recorder {
  readonly calls: Call[] = [];
  readonly stateChanges: StateChange[] = [];
  readonly #seconds: Accumulator[];
  readonly #instances: number;
  readonly #phases: readonly DemoPhase[];

  constructor(phases: readonly DemoPhase[], instances: number) {
    const durationMs = phases.at(-1)?.endMs ?? 0;
    this.#phases = phases;
    this.#instances = instances;
    this.#seconds = Array.from({ length: Math.ceil(durationMs / 1000) }, () => ({
      offered: 0,
      admitted: 0,
      admittedBy: zeroBySource(),
      bySource: zeroBySource(),
      byReason: {},
      denyCache: 0,
      latencies: [],
    }));
  }

  /** Seconds in the run. */
  get length(): number {
    return this.#seconds.length;
  }

  issued(atMs: number): void {
    this.#at(atMs).offered += 1;
  }

  record(call: Call): void {
    this.calls.push(call);
    if (call.source === undefined || call.reason === undefined) return; // threw: counted in the summary
    const issued = this.#at(call.issuedMs);
    issued.bySource[call.source] += 1;
    issued.byReason[call.reason] = (issued.byReason[call.reason] ?? 0) + 1;
    if (call.reason === 'deny-cache') issued.denyCache += 1;
    issued.latencies.push(call.latencyMs);
    if (call.admittedAtMs !== undefined) {
      const admitted = this.#at(call.admittedAtMs);
      admitted.admitted += 1;
      admitted.admittedBy[call.source] += 1;
    }
  }

  stateChange(change: StateChange): void {
    this.stateChanges.push(change);
  }

  /** The figures of second `second` (0-based), from what was recorded so far. */
  second(second: number): SecondFigures {
    const a = this.#seconds[second];
    if (a === undefined) throw new RangeError(`second ${second} is outside the run (0 to ${this.#seconds.length - 1})`);
    const startMs = second * 1000;
    const decisions = SOURCES.reduce((sum, s) => sum + a.bySource[s], 0);
    return {
      second,
      phase: (this.#phases.find((p) => startMs >= p.startMs && startMs < p.endMs) ?? this.#phases.at(-1))?.name ?? 'healthy',
      offered: a.offered,
      decisions,
      admitted: a.admitted,
      admittedBy: { ...a.admittedBy },
      bySource: { ...a.bySource },
      byReason: { ...a.byReason },
      redis: a.bySource.redis,
      fallback: decisions - a.bySource.redis - a.denyCache,
      denyCache: a.denyCache,
      breakers: this.breakersAt(startMs + 1000),
      latencyMs: rounded(percentiles(a.latencies)),
    };
  }

  /** Each instance's breaker state just before `atMs`. */
  breakersAt(atMs: number): BreakerState[] {
    const states: BreakerState[] = Array.from({ length: this.#instances }, () => 'closed');
    for (const change of this.stateChanges) if (change.atMs < atMs) states[change.instance] = change.state;
    return states;
  }

  /** The accumulator of the second holding `ms`, clamped to the run (a tier's clock may be a little off ours). */
  #at(ms: number): Accumulator {
    const index = Math.min(this.#seconds.length - 1, Math.max(0, Math.floor(ms / 1000)));
    return this.#seconds[index] as Accumulator;
  }
}
