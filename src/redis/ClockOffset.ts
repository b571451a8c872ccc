import type { LocalMs, RedisMs } from '../base/time.js';

/**
 * How far Redis's clock is ahead of the local one (ms), as bounds that hold rather than an estimate,
 * so that a time moved from one clock to the other can err on the safe side:
 * - a call written into Redis (write-back, re-seed) is put at `at + high()`: it leaves Redis's
 *   window no earlier than it leaves the local one;
 * - a call Redis admitted is kept by the local window at `nowMs - low()`, for the same reason;
 * - the staleness deadline sent to Redis is computed with `low()`: a call that Redis runs after its
 *   caller gave up on it is a no-op, never a second count.
 *
 * Each round trip bounds the offset (Redis read its clock between the send and the reply, both
 * clocks in whole ms; a reply that says the call was stale counts too); the bounds kept are the
 * tightest seen, widened by `DRIFT` per ms since then, so that they hold while the clocks drift apart. A sample outside the bounds means a clock stepped
 * (or another Redis answers, after a failover): the bounds start again from that sample.
 */
export class ClockOffset {
  #low = Number.NEGATIVE_INFINITY;
  #high = Number.POSITIVE_INFINITY;
  /** When the bounds were last narrowed (`elapsed()` clock). */
  #at = 0;

  /** The widest the bounds were after a round trip since `#spreadSince`, and in the period before it (see `uncertainty`). */
  #spread = 0;
  #spreadBefore = 0;
  #spreadSince = Number.NEGATIVE_INFINITY;

  /**
   * `elapsed`: a monotonic clock in ms (performance.now), which times how far the bounds widen.
   * `keepMs`: how long a time moved with these bounds is kept (the window, or a function that reads
   * the window in force): `uncertainty()`
   * remembers the bounds' width that long.
   */
  constructor(
    readonly elapsed: () => number = () => performance.now(),
    keepMs: number | (() => number) = 0,
  ) {
    this.#keepMs = typeof keepMs === 'number' ? () => keepMs : keepMs;
  }

  /** How long a time moved with these bounds is kept, read at each use (a window lengthened by `update()`). */
  readonly #keepMs: () => number;

  /** True once a round trip was seen. */
  get known(): boolean {
    return this.#low !== Number.NEGATIVE_INFINITY;
  }

  /**
   * Learns from one round trip: sent at `sentMs`, answered at `receivedMs` (local clock, whole ms),
   * with Redis's clock reading `redisMs` (whole ms) in between.
   */
  sample(sentMs: LocalMs, redisMs: RedisMs, receivedMs: LocalMs): void {
    const now = this.elapsed();
    const widen = (now - this.#at) * DRIFT;
    // Redis read [redisMs, redisMs + 1) while the local clock read [sentMs, receivedMs + 1).
    const low = redisMs - receivedMs - 1;
    const high = redisMs + 1 - sentMs;
    const was = { low: this.#low - widen, high: this.#high + widen };
    this.#low = Math.max(was.low, low);
    this.#high = Math.min(was.high, high);
    // Times moved with the old bounds may be off by as much as both bounds together span.
    let spread = this.#high - this.#low;
    if (this.#low > this.#high) {
      spread = Math.max(was.high, high) - Math.min(was.low, low);
      this.#low = low;
      this.#high = high;
    }
    this.#at = now;
    this.#remember(spread + 1, now);
  }

  /** Keeps `spread` as the widest of the current period (`keepMs` long) if it is. */
  #remember(spread: number, now: number): void {
    const keepMs = this.#keepMs();
    if (now - this.#spreadSince >= keepMs) {
      this.#spreadBefore = now - this.#spreadSince >= 2 * keepMs ? 0 : this.#spread;
      this.#spread = 0;
      this.#spreadSince = now;
    }
    this.#spread = Math.max(this.#spread, spread);
  }

  /**
   * The least Redis's clock can be ahead of the local one, allowing for the drift since the last round
   * trip (see DRIFT); 0 before any round trip.
   */
  low(): number {
    return this.known ? this.#low - (this.elapsed() - this.#at) * DRIFT : 0;
  }

  /**
   * {@link low} as of the last round trip, without the drift since (for a time learnt in the round
   * trip just sampled); 0 before any round trip.
   */
  lowAtSample(): number {
    return this.known ? this.#low : 0;
  }

  /**
   * The latest local time a time Redis read can be: a call Redis admitted at `redisMs` leaves the
   * local window no earlier than Redis's. Without drift: for a time learnt in the round trip just sampled.
   */
  localOf(redisMs: RedisMs): LocalMs {
    return (redisMs - this.lowAtSample()) as LocalMs;
  }

  /** The latest time on Redis's clock that the local time `localMs` can be: a call written there leaves Redis's window no earlier than the local one. */
  redisOf(localMs: LocalMs): RedisMs {
    return (localMs + this.high()) as RedisMs;
  }

  /** The most Redis's clock can be ahead of the local one; 0 before any round trip. */
  high(): number {
    return this.known ? this.#high + (this.elapsed() - this.#at) * DRIFT : 0;
  }

  /**
   * How much earlier than this process Redis may see a time pass that was moved from Redis's clock
   * within the last `keepMs` (ms): how far apart the bounds are now plus 1, or were when it was moved
   * (a call Redis admitted is kept at `nowMs - low()`; bounds that were wide then and narrowed since
   * leave it up to that width later than Redis holds it).
   */
  uncertainty(): number {
    const now = this.elapsed();
    if (now - this.#spreadSince >= this.#keepMs()) this.#remember(0, now);
    return Math.max(this.high() - this.lowAtSample() + 1, this.#spread, this.#spreadBefore);
  }
}

/**
 * How fast the bounds widen without new round trips: 0.2 ms per s, two clocks each off by the
 * ±100 ppm of the cheapest quartz (a clock kept by NTP drifts far less).
 */
const DRIFT = 2e-4;
