import { performance } from 'node:perf_hooks';

/**
 * A clock in whole ms since the epoch that never steps: `Date.now()` read once, when it is made,
 * plus the time elapsed since on the monotonic clock (`performance.now()`). A step of the wall clock
 * (NTP, an operator) does not move it; NTP's slewing moves both alike. It is the local tier's clock
 * when no `clock` is given, so that a step cannot make the local window forget calls, or keep them
 * longer; against Redis's clock, a step of either shows only as a change of the offset between them,
 * which every round trip bounds again (`ClockOffset`).
 */
export function steadyClock(): () => number {
  const origin = Date.now() - performance.now();
  return () => Math.floor(origin + performance.now());
}
