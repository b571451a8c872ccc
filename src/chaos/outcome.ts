/**
 * A scenario's outcome: figures and verdicts from what its instances answered, a rate limit's calls
 * (`figures.ts`, `verdicts.ts`) or a concurrency limit's slots (`slotFigures.ts`).
 */
import type { BreakerState } from '../redis/Breaker.js';
import type { DecisionReason, DecisionSource } from '../types.js';
import type { Backend } from './backend.js';
import { figures, series, type Call, type InstanceRun } from './figures.js';
import type { FromWorker } from './protocol.js';
import type { Scenario, Timing } from './scenarios.js';
import { slotFigures, slotVerdicts } from './slotFigures.js';
import type { ChaosPhase, LimiterProfile, ScenarioFigures, ScenarioOutcome, VerdictName } from './types.js';
import { verdicts } from './verdicts.js';

/** One scenario to run, as `run.ts` asks for it. */
export type ScenarioRun = {
  scenario: Scenario;
  timing: Timing;
  backend: Backend;
  config: string;
  instances: number;
  keys: readonly string[];
  profile: LimiterProfile;
  rate: number | undefined;
  latencyBudgetMs: number;
  require: readonly VerdictName[];
  signal: AbortSignal | undefined;
  onFleet: (profile: LimiterProfile) => void;
};

function slotOutcome(run: ScenarioRun, m: Measured, phases: ChaosPhase[], max: number, incomplete: boolean): ScenarioOutcome {
  const input = {
    results: m.results.map((r) => (r?.kind === 'slots-done' ? r : undefined)),
    t0: m.t0,
    keys: run.keys,
    phases,
    max,
    mode: run.profile.mode,
    ttlMs: run.profile.windowMs,
    require: run.require,
  };
  const { figures: slots, unsettled } = slotFigures(input);
  const checked = slotVerdicts(slots, unsettled, input);
  return {
    name: run.scenario.name,
    title: run.scenario.title,
    instances: run.instances,
    durationMs: m.durationMs,
    rate: 0,
    phases,
    slots,
    verdicts: checked,
    passed: !incomplete && checked.every((v) => v.pass !== false),
    errors: m.errors.slice(0, 100),
  };
}

type Done = Extract<FromWorker, { kind: 'done' | 'slots-done' }>;
type Measured = { results: (Done | undefined)[]; t0: number; durationMs: number; rate: number; errors: string[] };

/** A scenario's outcome from what its instances answered: a rate limit's calls, or a concurrency limit's slots. */
export function outcome(run: ScenarioRun, measured: Measured): ScenarioOutcome {
  const { scenario, timing } = run;
  const phases: ChaosPhase[] = [
    { name: 'healthy', startMs: 0, endMs: timing.healthyMs, fault: false },
    { name: scenario.name, startMs: timing.healthyMs, endMs: timing.healthyMs + timing.faultMs, fault: true },
    { name: 'recovery', startMs: timing.healthyMs + timing.faultMs, endMs: measured.durationMs, fault: false },
  ];
  const incomplete = measured.results.some((r) => r === undefined) || run.signal?.aborted === true;
  for (const [instance, r] of measured.results.entries()) {
    if (r === undefined) measured.errors.push(`instance ${instance} did not report (killed)`);
    else measured.errors.push(...r.errors.map((e) => `instance ${instance}: ${e}`));
  }
  const slots = run.profile.slots;
  if (slots !== undefined) return slotOutcome(run, measured, phases, slots.max, incomplete);
  const m = { ...measured, results: measured.results.map((r) => (r?.kind === 'done' ? r : undefined)) };
  const { profile, keys } = run;
  const calls: Call[] = [];
  const runs: InstanceRun[] = m.results.map((r, instance) => {
    if (r === undefined) {
      return { stalls: [], states: [], unanswered: 0, unhandledRejections: 0, stats: undefined };
    }
    for (const [issued, latency, k, allowed, source, reason, admitted, limit, threw] of r.calls) {
      calls.push({
        instance,
        key: keys[k] as string,
        issuedMs: issued - m.t0,
        latencyMs: latency,
        allowed: allowed === 1,
        source: source as DecisionSource | 'none',
        reason: reason as DecisionReason | 'none',
        admittedAtMs: admitted < 0 ? undefined : admitted - m.t0,
        limit,
        threw: threw === 1,
      });
    }
    return {
      stalls: r.stalls.map(([at, gap]) => ({ atMs: at - m.t0, gapMs: gap })),
      states: r.states.map(([at, state]: [number, BreakerState]) => ({ atMs: at - m.t0, state })),
      unanswered: r.unanswered,
      unhandledRejections: r.unhandledRejections,
      stats: r.stats,
    };
  });
  const computed = figures({ calls, runs, phases, windowMs: profile.windowMs });
  const f =
    scenario.name === 'long-outage' && profile.leaseMs !== undefined
      ? { ...computed, afterLease: afterLease(calls, timing, profile.leaseMs) }
      : computed;
  const checked = verdicts({
    figures: f,
    mode: profile.mode,
    timeoutMs: profile.timeoutMs,
    latencyBudgetMs: run.latencyBudgetMs,
    require: run.require,
    recovers: true,
  });
  return {
    name: scenario.name,
    title: scenario.title,
    instances: run.instances,
    durationMs: m.durationMs,
    rate: Math.round(m.rate),
    phases,
    figures: f,
    series: series({ calls, runs, durationMs: m.durationMs, windowMs: profile.windowMs, busiest: f.mostAdmitted.key, stepMs: 100 }),
    verdicts: checked,
    passed: !incomplete && checked.every((v) => v.pass !== false),
    errors: m.errors.slice(0, 100),
  };
}

/** Admitted a second after the lease ended (from lease end + 1 s, for 1 s), against the last healthy second. */
function afterLease(calls: readonly Call[], timing: Timing, leaseMs: number): NonNullable<ScenarioFigures['afterLease']> {
  const admitted = (from: number): number => calls.filter((c) => c.allowed && c.issuedMs >= from && c.issuedMs < from + 1000).length;
  const healthyPerSecond = admitted(timing.healthyMs - 1000);
  const admittedPerSecond = admitted(timing.healthyMs + leaseMs + 1000);
  return { admittedPerSecond, healthyPerSecond, ratio: healthyPerSecond === 0 ? 0 : admittedPerSecond / healthyPerSecond };
}
