/**
 * Open-loop load: calls are issued on a fixed schedule (call i at i / rate), whether or not earlier
 * calls have settled, so a stalled limiter cannot slow the offered load down. Each call's issue
 * time is kept next to its scheduled time: latency is measured from the issue (the timer that issues
 * calls ticks every ~1 ms, a floor that would otherwise hide sub-millisecond answers), and the issue
 * lag shows any limiter that blocks the event loop.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

export type OpenLoopOptions = {
  ratePerSecond: number;
  durationMs: number;
  keys: readonly string[];
  call: (key: string) => Promise<string>;
  /** Actions at given times (ms from the start), e.g. freezing Redis. */
  events?: readonly { atMs: number; run: () => void }[];
  /** Stop waiting for unsettled calls at this time (ms from the start). */
  settleDeadlineMs: number;
};

export type OpenLoopResult = {
  /** Scheduled time of each call, ms from the start. */
  scheduled: Float64Array;
  /** When each call was actually issued, ms from the start. */
  issued: Float64Array;
  /** Settle time of each call, ms from the start; NaN if it had not settled by the deadline. */
  settled: Float64Array;
  outcomes: string[];
  /** When each event actually ran, ms from the start. */
  eventTimes: number[];
};

export async function openLoop(options: OpenLoopOptions): Promise<OpenLoopResult> {
  const total = Math.round((options.ratePerSecond * options.durationMs) / 1000);
  const scheduled = new Float64Array(total);
  const issuedAt = new Float64Array(total);
  const settled = new Float64Array(total).fill(Number.NaN);
  const outcomes = new Array<string>(total).fill('unsettled');
  const eventTimes: number[] = [];
  const { keys, call } = options;
  const start = performance.now();
  let pending = 0;
  let allSettled: (() => void) | undefined;

  for (const event of options.events ?? []) {
    setTimeout(() => {
      eventTimes.push(performance.now() - start);
      event.run();
    }, event.atMs);
  }

  const issue = (i: number): void => {
    scheduled[i] = (i * 1000) / options.ratePerSecond;
    issuedAt[i] = performance.now() - start;
    pending += 1;
    const done = (outcome: string): void => {
      settled[i] = performance.now() - start;
      outcomes[i] = outcome;
      pending -= 1;
      if (pending === 0) allSettled?.();
    };
    call(keys[(Math.random() * keys.length) | 0] as string).then(done, () => done('error'));
  };

  let issued = 0;
  while (issued < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) * options.ratePerSecond) / 1000) + 1);
    while (issued < due) issue(issued++);
    await sleep(1);
  }
  const waitMs = options.settleDeadlineMs - (performance.now() - start);
  if (pending > 0 && waitMs > 0) {
    await Promise.race([new Promise<void>((resolve) => (allSettled = resolve)), sleep(waitMs)]);
  }
  allSettled = undefined;
  // Results are copied: calls that settle later must not change them.
  return { scheduled, issued: issuedAt, settled: settled.slice(), outcomes: outcomes.slice(), eventTimes };
}
