import type { BeatOp, BeatReply } from '../redis/scripts/heartbeat.js';

export type { BeatOp, BeatReply, BeatTimes } from '../redis/scripts/heartbeat.js';

/** How many beats a count is held for: an instance is gone after 3 beats without one (its member's TTL). */
const HOLD_BEATS = 3;

/** While other instances are unrecovered, beats come this many times as often (to see them return soon). */
const FAST_BEATS = 5;

/** What the counter asks of the limiter. */
export type Beats = {
  /**
   * Sends one beat; `since` (local clock, or undefined for no bound) is when this instance last lost
   * Redis: only instances that beat clean after it are fresh; `usedClaim` the claim this instance
   * answers on now (0 before the first). Rejects when Redis cannot answer, or when the beat reached
   * Redis after its deadline (a frozen Redis ran it late).
   */
  send(op: BeatOp, since: number | undefined, usedClaim: number): Promise<BeatReply>;
  /** True when nothing of this instance's is missing from Redis (no journalled call, no re-seed to write). */
  clean(): boolean;
  /** The local clock. */
  now(): number;
  /** How long a beat that Redis answered lets this instance answer locally, from when it was sent (ms). */
  readonly leaseMs: number;
  /** The held count changed. */
  changed(count: number): void;
  /** This instance's claim changed (see {@link InstanceCounter.claim}). */
  claimed?(): void;
  /** Fewer instances are unrecovered than before: denials made while their shares were left free may end early. */
  recovered(): void;
  /** A beat found the heartbeat set gone since this instance's previous beat: Redis lost data (see `lua/heartbeat.lua`). */
  vanished?(): void;
};

/**
 * Counts the live instances of a limiter (same Redis, same prefix) through heartbeats, so that the
 * local tier's share of the global limit is derived rather than guessed, and tells how many of them
 * may be answering locally with calls Redis has not seen: the **unrecovered** ones.
 *
 * - The count is the largest of the last HOLD_BEATS regular beats' answers: it falls at once when an
 *   instance leaves (`close()`), or once a silent one's hold has ended (see Leases below), not when one
 *   answer is low (after a Redis restart the members are gone and come back one beat at a time). It
 *   is kept while Redis cannot answer.
 * - Unrecovered = count − 1 − the other instances that beat clean (nothing missing from Redis) since
 *   this instance last lost Redis ({@link outage}). From an outage until a beat says otherwise, every
 *   other instance is unrecovered. While some are, Redis's decisions for this instance leave their
 *   shares free (`Settings.reserve`): instances back first do not take the room of the calls that
 *   those still answering locally will write back (staggered recovery). Beats come FAST_BEATS times
 *   as often meanwhile, and one is sent at once when this instance is back ({@link beatNow}).
 * - The first FAST_BEATS beats after start come as fast too: instances started together (a deploy)
 *   count each other within a fraction of a period, not after one (an instance that counted 2 of 4
 *   for a second took half the limit as its share meanwhile).
 * - **Leases.** Silence is not departure: an instance that stops beating (its breaker open, its client
 *   not ready, its network cut) may be answering locally at its share. Each beat Redis answers grants
 *   this instance a lease of `leaseMs` from when the beat was sent ({@link leased}); the others see
 *   the beat in Redis and keep this instance counted, and its share reserved (it is not fresh), until
 *   the beat plus the lease plus its longest window: by then what it admitted on the lease has left
 *   its windows. Only a `leave` (a clean `close()`) frees it sooner. What an instance answers once its
 *   lease has ended is `local.afterLease` (see `Settings.fallbackMode`).
 * - **Claims.** Each beat Redis answers grants this instance a claim, the fraction of the limit it
 *   answers on locally ({@link claim}: at most an even share of the held count, so that a Redis that
 *   lost the set grows none); the claims of all instances sum to at most 1, a silent one's
 *   kept with its hold, so that the others reserve what it answers on, whoever joins meanwhile (see
 *   `lua/heartbeat.lua`). {@link reservedClaim} is what Redis's decisions leave free for the
 *   unrecovered ones.
 */
export class InstanceCounter {
  #count = 1;
  #unrecovered = 0;
  /** When this instance last lost Redis (local clock), or undefined. */
  #since: number | undefined;
  /** Raised by each {@link outage}: a beat sent before it says nothing of who is back since. */
  #epoch = 0;
  /** The answers of the last HOLD_BEATS regular beats, oldest first. */
  readonly #recent: number[] = [];
  /** The last leave seen (`BeatReply.leftAt`). */
  #leftAt = 0;
  #timer: NodeJS.Timeout | undefined;
  #fast: NodeJS.Timeout | undefined;
  #beating = false;
  #again = false;
  /** Fast beats left after start: instances started together count each other within a fraction of a period. */
  #startBeats = FAST_BEATS;
  #stopped = false;
  /** This instance may answer locally until then (local clock): the last beat Redis answered, when sent, plus `leaseMs`. */
  #leaseUntil = Number.NEGATIVE_INFINITY;
  /** The newest `BeatReply.lostAt` seen (Redis's clock); undefined before the first answer. */
  #lostAt: number | undefined;
  /** This instance's claim: granted by the last beat Redis answered, at most 1 / the held count; undefined before the first. */
  #claim: number | undefined;
  /** The claims of the unrecovered instances: what Redis's decisions leave free. */
  #reserved = 0;
  /** The claims of every other instance, as the last beat said. */
  #othersClaim = 0;

  constructor(
    readonly intervalMs: number,
    readonly beats: Beats,
  ) {}

  /** The live instances, held as the class says; 1 until a beat answers. */
  get count(): number {
    return this.#count;
  }

  /** The other instances that may be answering locally with calls Redis has not seen. */
  get unrecovered(): number {
    return this.#unrecovered;
  }

  /**
   * The fraction of the limit this instance answers on locally, as granted by the last beat Redis
   * answered; undefined before the first (an instance that never reached Redis: `Settings.shareOf`).
   */
  get claim(): number | undefined {
    return this.#claim;
  }

  /**
   * The claims of the unrecovered instances (a fraction of the limit): Redis's decisions leave them
   * free. At least an even share of the held count each: after Redis lost the set, an instance not
   * back in it yet has no claim recorded, yet answers on one. 0 when none is unrecovered.
   */
  get reservedClaim(): number {
    return this.#unrecovered === 0 ? 0 : Math.max(this.#reserved, this.#unrecovered / this.#count);
  }

  /**
   * Whether this instance's lease is in force: a beat Redis answered was sent less than `leaseMs`
   * ago. False before the first: an instance the others have never seen has no share reserved.
   */
  get leased(): boolean {
    return this.leasedAt(this.beats.now());
  }

  /** {@link leased} at `now` (the local clock, read by the caller). */
  leasedAt(now: number): boolean {
    return now < this.#leaseUntil;
  }

  /** When the last beat Redis answered was sent (local clock): the others saw this instance then. -Infinity before the first. */
  get lastSeenAt(): number {
    return this.#leaseUntil - this.beats.leaseMs;
  }

  /** Ms left on the lease (local clock), 0 once it has ended. */
  get leaseLeftMs(): number {
    return Math.max(0, this.#leaseUntil - this.beats.now());
  }

  start(): void {
    void this.#beat(true);
    this.#timer = setInterval(() => void this.#beat(true), this.intervalMs);
    this.#timer.unref();
  }

  /**
   * This instance lost Redis now: until they beat clean after now, every other instance counts as
   * unrecovered (they most likely lost it too, and answer locally).
   */
  outage(): void {
    this.#since = this.beats.now();
    this.#epoch += 1;
    this.#unrecovered = this.#count - 1;
    this.#reserved = this.#othersClaim;
  }

  /** Beats now (this instance is back: the others should know), or right after the beat in flight. */
  beatNow(): void {
    if (this.#stopped) return;
    if (this.#beating) this.#again = true;
    else void this.#beat(false);
  }

  /** Stops beating and removes this instance from the count (best effort). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    clearTimeout(this.#fast);
    await this.beats.send('leave', undefined, this.#claim ?? 0).catch(() => undefined);
  }

  async #beat(regular: boolean): Promise<void> {
    if (this.#beating) return; // one at a time: the next regular beat comes soon enough
    this.#beating = true;
    let reply: BeatReply | undefined;
    const epoch = this.#epoch;
    const sentAt = this.beats.now();
    try {
      reply = await this.beats.send(this.beats.clean() ? 'clean' : 'dirty', this.#since, this.#claim ?? 0);
    } catch {
      // Keep the last count and the unrecovered ones during an outage.
    }
    this.#beating = false;
    if (this.#stopped) return;
    let settling = false;
    if (reply !== undefined) {
      // A claim that changed (a lowered one is recorded by the next beat): beat soon, so that an
      // instance waiting for what this one gave up gets it within a fraction of a period.
      const before = this.#claim;
      // A loss newer than the last one seen; the first answer only tells which one that is.
      const lostAt = reply.lostAt ?? 0;
      if (this.#lostAt !== undefined && lostAt > this.#lostAt) this.beats.vanished?.();
      this.#lostAt = Math.max(this.#lostAt ?? 0, lostAt);
      this.#leaseUntil = Math.max(this.#leaseUntil, sentAt + this.beats.leaseMs);
      this.#learn(reply, regular, epoch === this.#epoch);
      settling = this.#claim !== before;
    }
    if (this.#again) {
      this.#again = false;
      void this.#beat(false);
    } else if ((this.#unrecovered > 0 || this.#startBeats > 0 || settling) && this.#fast === undefined) {
      if (this.#startBeats > 0) this.#startBeats -= 1;
      this.#fast = setTimeout(() => {
        this.#fast = undefined;
        void this.#beat(false);
      }, this.intervalMs / FAST_BEATS);
      this.#fast.unref();
    }
  }

  /** `current`: no outage began since the beat was sent (else its `fresh` counts from an older `since`). */
  #learn(reply: BeatReply, regular: boolean, current: boolean): void {
    const leftAt = reply.leftAt ?? 0;
    if (leftAt > this.#leftAt) {
      // An instance left: the count falls now, it is not held (a held count keeps its share away).
      this.#leftAt = leftAt;
      this.#recent.length = 0;
      if (!regular) this.#recent.push(reply.live);
    }
    if (regular) {
      this.#recent.push(reply.live);
      if (this.#recent.length > HOLD_BEATS) this.#recent.shift();
    }
    const live = Math.max(...this.#recent, reply.live, 1);
    this.#othersClaim = reply.othersClaim;
    if (current) {
      const unrecovered = Math.max(0, live - 1 - reply.fresh);
      const fewer = unrecovered < this.#unrecovered;
      this.#unrecovered = unrecovered;
      this.#reserved = reply.reserved;
      if (fewer) this.beats.recovered();
    } else {
      this.#unrecovered = Math.max(this.#unrecovered, live - 1); // since the outage, every other one
      this.#reserved = Math.max(this.#reserved, reply.othersClaim);
    }
    // At most an even share of the held count: after Redis lost the set, the first instance to beat
    // is granted what the others have not yet written back (they come back one beat at a time), but
    // the count is held (see above) and so is this bound.
    const claim = Math.min(reply.granted, 1 / live);
    if (claim !== this.#claim) {
      this.#claim = claim;
      this.beats.claimed?.();
    }
    if (live !== this.#count) {
      this.#count = live;
      this.beats.changed(live);
    }
  }
}
