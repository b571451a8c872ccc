import { performance } from 'node:perf_hooks';

type Timing = { uvMetricsInfo?: { loopCount: number }; idleTime?: number };
const timing = performance.nodeTiming as Timing;

/**
 * The event loop's iteration count (libuv's, raised just before each I/O poll), or, where the runtime
 * does not expose it, a count raised at each check-phase observation: an observation made in a poll
 * phase is then vouched for at that poll's check, a little early (the rule before this watch).
 */
function loopCounter(): (phase: Phase) => number {
  if (timing.uvMetricsInfo !== undefined) return () => (timing.uvMetricsInfo as { loopCount: number }).loopCount;
  let count = 0;
  return (phase) => (phase === 'check' ? (count += 1) : count);
}

/**
 * The phase of the event loop an observation is made in: `'check'` in the check phase (a setImmediate
 * callback: the poll of this iteration is complete), `'any'` where it is not known.
 */
export type Phase = 'check' | 'any';

/** The time the event loop has spent waiting for I/O since it started, ms (0 where not measured). */
const idleMs = (): number => timing.idleTime ?? 0;

/**
 * How long this process can vouch that Redis has been silent. Time that its own event loop spent busy
 * (the application's handlers burning CPU, a GC) is not Redis's silence: a reply may lie unread in
 * the socket meanwhile. Two kinds of evidence; the larger counts:
 *
 * - polls: the latest time (on the `perf` clock) known to come before the start of an I/O poll that
 *   has since completed. A poll reads every socket that has data, so a call still unanswered then
 *   was unanswered by Redis until that time. Each observation notes the loop's iteration count n and
 *   the time; poll n + 1 follows it, complete once the count is n + 2, or at n + 1 in that
 *   iteration's check phase (setImmediate callbacks run right after the poll). An observation made
 *   inside a poll phase vouches for nothing until a later poll has read every socket.
 * - idle time: while the loop waits for I/O, a reply would wake it at once; so the time it spent
 *   waiting since the wait for Redis began (see {@link mark}) is time Redis did not answer (the loop's
 *   own measure, in real milliseconds, whatever `perf` is). This covers a quiet process, which has
 *   made no observation since the call it waits on was sent.
 *
 * Cheap: three counter or clock reads per observation, one per mark, and no timer of its own.
 */
export class PollWatch {
  readonly #count = loopCounter();
  /** The iteration of the latest observation, its time and the loop's idle time then. */
  #level = -1;
  #levelSeenAt = Number.NEGATIVE_INFINITY;
  #idleSeen = 0;
  /** The loop's idle time at the latest {@link mark} (none yet: no idle time counts). */
  #idleMarked = Number.POSITIVE_INFINITY;
  /** The latest observation at an iteration before `#level`, and that iteration. */
  #previousLevel = -2;
  #previousSeenAt = Number.NEGATIVE_INFINITY;
  /** The latest time known to precede the start of a completed poll. */
  #polledAfter = Number.NEGATIVE_INFINITY;

  constructor(readonly perf: { now(): number }) {}

  /**
   * How long Redis has been silent, as far as this process can tell at its latest observation, for
   * calls waiting since `from` (perf clock), the time of the latest {@link mark}.
   */
  silentMs(from: number): number {
    return Math.max(this.#polledAfter - from, this.#idleSeen - this.#idleMarked);
  }

  /**
   * The wait for Redis starts again now: a reply was read while calls are still outstanding, or a
   * call was sent while none was. (So the latest mark is when the later of the oldest outstanding
   * call and the last reply happened, whenever a call is outstanding: the `from` of {@link silentMs}.)
   */
  mark(): void {
    this.#idleMarked = idleMs();
  }

  /**
   * Notes the loop's iteration and idle time now, in `phase` (see {@link Phase}).
   */
  observe(phase: Phase): void {
    const level = this.#count(phase);
    if (level !== this.#level) {
      // The level left behind is at most level - 2 from here on: the poll after it is complete.
      this.#vouch(this.#previousSeenAt);
      this.#previousLevel = this.#level;
      this.#previousSeenAt = this.#levelSeenAt;
      this.#level = level;
    }
    if (phase === 'check' || level >= this.#previousLevel + 2) this.#vouch(this.#previousSeenAt);
    this.#idleSeen = idleMs();
    this.#levelSeenAt = this.perf.now();
  }

  #vouch(at: number): void {
    if (at > this.#polledAfter) this.#polledAfter = at;
  }
}
