/** The demo's summary figures, computed from the recorded calls and breaker transitions only. */
import type { BreakerState, DecisionSource } from '../../src/index.ts';
import { overLimit, percentiles } from '../../chaos/metrics.ts';
import type { Percentiles, StateChange } from '../../chaos/types.ts';
import { rounded, SOURCES, type Call } from './record.ts';
import type { DemoPhase, PhaseName } from './script.ts';

export type PhaseSummary = {
  readonly name: PhaseName;
  readonly startMs: number;
  readonly endMs: number;
  readonly decisions: number;
  readonly admitted: number;
  /** Admitted calls per second of the phase (by admission time), on average. */
  readonly admittedPerSecond: number;
  readonly bySource: Readonly<Record<DecisionSource, number>>;
  /** Decisions Redis made, the fallback of the mode made, and the deny cache repeated. */
  readonly redis: number;
  readonly fallback: number;
  readonly denyCache: number;
  /** Decision latency of the calls issued in the phase, ms. */
  readonly latencyMs: Percentiles;
};

export type BreakerSummary = {
  readonly instance: number;
  /** Times the breaker went from closed (or half-open) to open. */
  readonly opened: number;
  /** First opening, ms from the start (undefined: never opened). */
  readonly firstOpenedAtMs: number | undefined;
  /** Last time it closed, ms from the start (undefined: never closed after opening). */
  readonly lastClosedAtMs: number | undefined;
  readonly finalState: BreakerState;
};

export type DemoSummary = {
  readonly decisions: number;
  readonly admitted: number;
  /** `limit()` calls that threw: must be 0. */
  readonly exceptions: number;
  readonly unhandledRejections: number;
  /**
   * The most calls admitted in any sliding 1 s window (t - 1 s, t], at every admitted call's time,
   * across every instance, against the limit.
   */
  readonly maxAdmittedIn1s: number;
  readonly limit: number;
  /** Admitted calls whose 1 s window held more than the limit, and the largest excess. */
  readonly callsOverLimit: number;
  readonly maxExcess: number;
  readonly perPhase: readonly PhaseSummary[];
  readonly breakers: readonly BreakerSummary[];
  /** From the start of the first fault until the first breaker opened, ms. */
  readonly timeToOpenMs: number | undefined;
  /** From the start of "Redis back" until every breaker was closed for good, ms (undefined: not all closed). */
  readonly timeToCloseMs: number | undefined;
};

/** Summarises a run of `ranMs` (phases cut there when it was interrupted). */
export function summarize(input: {
  readonly calls: readonly Call[];
  readonly stateChanges: readonly StateChange[];
  readonly phases: readonly DemoPhase[];
  readonly instances: number;
  readonly limit: number;
  readonly windowMs: number;
  readonly ranMs: number;
  readonly unhandledRejections: number;
}): DemoSummary {
  const { calls, stateChanges, phases, instances, limit, windowMs, ranMs } = input;
  const admittedCalls = calls.filter((c) => c.admittedAtMs !== undefined);
  const over = overLimit(admittedCalls, windowMs, limit);
  // With a limit of 0, the "excess" of a window is its whole count: the most admitted in any window.
  const maxAdmittedIn1s = overLimit(admittedCalls, windowMs, 0).maxExcess;

  const perPhase = phases
    .filter((p) => p.startMs < ranMs)
    .map((phase): PhaseSummary => {
      const endMs = Math.min(phase.endMs, ranMs);
      const inPhase = (ms: number): boolean => ms >= phase.startMs && ms < endMs;
      const issued = calls.filter((c) => !c.threw && inPhase(c.issuedMs));
      const admitted = admittedCalls.filter((c) => inPhase(c.admittedAtMs as number)).length;
      const bySource = Object.fromEntries(SOURCES.map((s) => [s, issued.filter((c) => c.source === s).length])) as Record<
        DecisionSource,
        number
      >;
      const denyCache = issued.filter((c) => c.reason === 'deny-cache').length;
      return {
        name: phase.name,
        startMs: phase.startMs,
        endMs,
        decisions: issued.length,
        admitted,
        admittedPerSecond: round(admitted / Math.max((endMs - phase.startMs) / 1000, 1e-9), 1),
        bySource,
        redis: bySource.redis,
        fallback: issued.length - bySource.redis - denyCache,
        denyCache,
        latencyMs: rounded(percentiles(issued.map((c) => c.latencyMs))),
      };
    });

  const breakers = Array.from({ length: instances }, (_, instance): BreakerSummary => {
    const changes = stateChanges.filter((c) => c.instance === instance);
    const opens = changes.filter((c) => c.state === 'open');
    return {
      instance,
      opened: opens.length,
      firstOpenedAtMs: opens[0] === undefined ? undefined : round(opens[0].atMs, 1),
      lastClosedAtMs: roundOrUndefined(changes.filter((c) => c.state === 'closed').at(-1)?.atMs),
      finalState: changes.at(-1)?.state ?? 'closed',
    };
  });

  const firstFault = phases.find((p) => p.fault);
  const back = phases.find((p) => p.name === 'back');
  const firstOpen = stateChanges.find((c) => c.state === 'open' && firstFault !== undefined && c.atMs >= firstFault.startMs);
  const allClosed = breakers.every((b) => b.finalState === 'closed');
  const lastClose = Math.max(...breakers.map((b) => b.lastClosedAtMs ?? 0));
  return {
    decisions: calls.filter((c) => !c.threw).length,
    admitted: admittedCalls.length,
    exceptions: calls.filter((c) => c.threw).length,
    unhandledRejections: input.unhandledRejections,
    maxAdmittedIn1s,
    limit,
    callsOverLimit: over.callsOver,
    maxExcess: over.maxExcess,
    perPhase,
    breakers,
    timeToOpenMs: firstOpen === undefined || firstFault === undefined ? undefined : round(firstOpen.atMs - firstFault.startMs, 1),
    timeToCloseMs: back === undefined || !allClosed || back.startMs >= ranMs ? undefined : round(Math.max(0, lastClose - back.startMs), 1),
  };
}

function round(value: number, decimals: number): number {
  const factor = 10 ** decimals;
  return Math.round(value * factor) / factor;
}

function roundOrUndefined(value: number | undefined): number | undefined {
  return value === undefined ? undefined : round(value, 1);
}
