/**
 * One run of the demo: the instances under an open-loop load of twice the limit, the phases played
 * on the proxy on schedule, and a tick a little after each second that hands that second's figures
 * to the display. Stops early, cleanly, when `signal` aborts (Ctrl-C).
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BreakerState, LimiterDecision, ResilientLimiter } from '../../src/index.ts';
import type { ChaosBackend } from '../../chaos/types.ts';
import { DEMO_KEY, startFleet, WINDOW_MS } from './fleet.ts';
import type { Library } from '../../chaos/library.ts';
import type { DemoMode } from './options.ts';
import { Recorder, type SecondFigures } from './record.ts';
import { FaultScript, type DemoPhase } from './script.ts';

/** What the run tells the display as it goes. */
export interface RunView {
  /** A phase began (its fault is being put on the proxy). */
  phase(phase: DemoPhase, atMs: number): void;
  /** An instance's breaker changed state. */
  breaker(instance: number, state: BreakerState, previous: BreakerState, atMs: number): void;
  /** A second ended: its figures. */
  second(figures: SecondFigures): void;
}

export type RunSettings = {
  readonly instances: number;
  readonly limit: number;
  readonly mode: DemoMode;
  readonly phases: readonly DemoPhase[];
};

export type RunOutcome = {
  readonly recorder: Recorder;
  /** When the load started, ISO 8601. */
  readonly startedAt: string;
  /** How long the load ran, ms (shorter than planned when interrupted). */
  readonly ranMs: number;
  readonly interrupted: boolean;
  /** Offered calls per second, all instances together. */
  readonly rate: number;
  /** The instance count each limiter found by heartbeat before the load started. */
  readonly counted: readonly number[];
  readonly unhandledRejections: number;
};

/** The tick for second k comes this long after it ends, so that its last calls are answered. */
const TICK_LAG_MS = 150;

/**
 * Runs the demo on `backend`: a proxy of its own (removed afterwards), the fleet, the load, the
 * phases. Closes everything it created before it returns or throws.
 * @throws Error when a client does not connect or a fault cannot be put on the proxy.
 */
export async function runDemo(
  lib: Library,
  backend: ChaosBackend,
  settings: RunSettings,
  view: RunView,
  signal: AbortSignal,
): Promise<RunOutcome> {
  const runId = `${Date.now().toString(36)}-${process.pid}`;
  const proxied = await backend.createRedisProxy(`resilimit-demo-${runId}`);
  const script = new FaultScript(proxied);
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  signal.addEventListener('abort', onAbort, { once: true });
  let unhandled = 0;
  const onUnhandled = (): void => {
    unhandled += 1;
  };
  process.on('unhandledRejection', onUnhandled);
  try {
    const fleet = await startFleet(lib, proxied, { ...settings, prefix: `resilimit-demo:${runId}:` });
    try {
      const recorder = new Recorder(settings.phases, settings.instances);
      const durationMs = settings.phases.at(-1)?.endMs ?? 0;
      const rate = settings.limit * 2;
      const t0 = performance.now();
      const startedAt = new Date();
      const epoch0 = startedAt.getTime();
      for (const [instance, limiter] of fleet.limiters.entries()) {
        limiter.on('stateChange', ({ state, previous }) => {
          const atMs = performance.now() - t0;
          recorder.stateChange({ atMs, instance, state });
          view.breaker(instance, state, previous, atMs);
        });
      }
      const clock = { t0, epoch0, signal: stop.signal };
      const failOnError = <T>(task: Promise<T>): Promise<T> =>
        task.catch((error: unknown) => {
          stop.abort();
          throw error;
        });
      const results = await Promise.allSettled([
        failOnError(generateLoad(fleet.limiters, recorder, rate, durationMs, clock)),
        failOnError(playPhases(settings.phases, script, view, clock)),
        failOnError(tick(recorder, view, clock)),
      ]);
      const failed = results.find((r) => r.status === 'rejected');
      if (failed !== undefined) throw failed.reason;
      return {
        recorder,
        startedAt: startedAt.toISOString(),
        ranMs: Math.min(durationMs, performance.now() - t0),
        interrupted: signal.aborted,
        rate,
        counted: fleet.counted,
        unhandledRejections: unhandled,
      };
    } finally {
      await fleet.close();
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    process.off('unhandledRejection', onUnhandled);
    await script.clear();
    await proxied.proxy.remove().catch(() => undefined);
  }
}

type Clock = { readonly t0: number; readonly epoch0: number; readonly signal: AbortSignal };

/** Open loop: `rate` calls per second spread evenly, round robin over the instances, `rate × duration` at most. */
async function generateLoad(
  limiters: readonly ResilientLimiter[],
  recorder: Recorder,
  rate: number,
  durationMs: number,
  clock: Clock,
): Promise<void> {
  const total = Math.floor((rate * durationMs) / 1000);
  const pending = new Set<Promise<void>>();
  let issued = 0;
  while (!clock.signal.aborted && issued < total) {
    const due = Math.min(total, Math.floor(((performance.now() - clock.t0) * rate) / 1000));
    for (; issued < due; issued++) {
      const instance = issued % limiters.length;
      const call = issue(limiters[instance] as ResilientLimiter, instance, recorder, clock);
      pending.add(call);
      void call.finally(() => pending.delete(call));
    }
    await pause(2, clock.signal);
  }
  await Promise.all(pending);
}

async function issue(limiter: ResilientLimiter, instance: number, recorder: Recorder, { t0, epoch0 }: Clock): Promise<void> {
  const start = performance.now();
  recorder.issued(start - t0);
  let decision: LimiterDecision | undefined;
  try {
    decision = await limiter.limit(DEMO_KEY);
  } catch {
    decision = undefined;
  }
  const end = performance.now();
  recorder.record({
    issuedMs: start - t0,
    latencyMs: end - start,
    instance,
    key: DEMO_KEY,
    allowed: decision?.allowed ?? false,
    source: decision?.source,
    reason: decision?.reason,
    // When the deciding tier admitted it, on that tier's clock (Redis TIME, or this process's), from
    // the start of the load: an admitted call is the newest in its window, so resetAtMs - windowMs.
    admittedAtMs:
      decision?.allowed === true
        ? decision.source === 'redis' || decision.source === 'local'
          ? decision.resetAtMs - WINDOW_MS - epoch0
          : start - t0
        : undefined,
    threw: decision === undefined,
  });
}

async function playPhases(phases: readonly DemoPhase[], script: FaultScript, view: RunView, clock: Clock): Promise<void> {
  for (const phase of phases) {
    await until(clock.t0 + phase.startMs, clock.signal);
    if (clock.signal.aborted) return;
    view.phase(phase, performance.now() - clock.t0);
    await script.enter(phase.name);
  }
}

async function tick(recorder: Recorder, view: RunView, clock: Clock): Promise<void> {
  for (let second = 0; second < recorder.length; second++) {
    await until(clock.t0 + (second + 1) * 1000 + TICK_LAG_MS, clock.signal);
    if (clock.signal.aborted) return;
    view.second(recorder.second(second));
  }
}

function until(at: number, signal: AbortSignal): Promise<void> {
  return pause(at - performance.now(), signal);
}

/** Waits `ms` (or not at all), or until `signal` aborts; never rejects. */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || signal.aborted) return;
  await sleep(ms, undefined, { signal }).catch(() => undefined);
}
