/**
 * Closed-loop load: `concurrency` workers, each issuing its next call as soon as the previous one
 * settles, on a uniformly random key. Only calls that settle inside the measured interval (after
 * the warm-up) are counted, with their latency, grouped by outcome.
 *
 * A call answered without I/O (a local decision) settles in a microtask, so a worker could loop
 * forever without letting timers or sockets run: each worker yields to the event loop every
 * `YIELD_EVERY` calls, and the phases are decided by the clock, not by timers alone.
 */
import { performance } from 'node:perf_hooks';
import { setImmediate as yieldToLoop, setTimeout as sleep } from 'node:timers/promises';
import { Samples } from './samples.ts';

export type ClosedLoopOptions = {
  concurrency: number;
  warmupMs: number;
  durationMs: number;
  keys: readonly string[];
  call: (key: string) => Promise<string>;
  /** Called when measuring starts (e.g. to snapshot counters). */
  onMeasure?: () => void;
};

export type ClosedLoopResult = {
  elapsedMs: number;
  byOutcome: Map<string, Samples>;
  /** Calls settled in the measured interval. */
  total: number;
};

const YIELD_EVERY = 32;

export async function closedLoop(options: ClosedLoopOptions): Promise<ClosedLoopResult> {
  const { keys, call } = options;
  const byOutcome = new Map<string, Samples>();
  let measuring = false;
  let stopped = false;
  let end = Number.POSITIVE_INFINITY;

  const worker = async (): Promise<void> => {
    let calls = 0;
    while (!stopped) {
      if (++calls % YIELD_EVERY === 0) await yieldToLoop();
      const key = keys[(Math.random() * keys.length) | 0] as string;
      const started = performance.now();
      let outcome: string;
      try {
        outcome = await call(key);
      } catch {
        outcome = 'error';
      }
      const settled = performance.now();
      if (measuring && settled <= end) {
        let samples = byOutcome.get(outcome);
        if (samples === undefined) byOutcome.set(outcome, (samples = new Samples()));
        samples.add(settled - started);
      }
    }
  };

  const workers = Array.from({ length: options.concurrency }, worker);
  await sleep(options.warmupMs);
  options.onMeasure?.();
  const start = performance.now();
  measuring = true;
  await sleep(options.durationMs);
  end = performance.now();
  stopped = true;
  await Promise.all(workers);
  let total = 0;
  for (const samples of byOutcome.values()) total += samples.count;
  return { elapsedMs: end - start, byOutcome, total };
}

/** The samples of the given outcomes, merged. */
export function samplesOf(result: ClosedLoopResult, outcomes: readonly string[]): Samples {
  const merged = new Samples();
  for (const outcome of outcomes) {
    const samples = result.byOutcome.get(outcome);
    if (samples !== undefined) merged.merge(samples);
  }
  return merged;
}
