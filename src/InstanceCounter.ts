/** How many beats a count is held for: an instance is gone after 3 beats without one (its member's TTL). */
const HOLD_BEATS = 3;

/**
 * Counts the live instances of a limiter (same Redis, same prefix) through heartbeats, so that the
 * local tier's share of the global limit is derived rather than guessed. The count is the largest of
 * the last HOLD_BEATS beats' answers: it falls only once an instance left or stayed silent for a full
 * period of beats, not when one answer is low (after a Redis restart the members are gone and come
 * back one beat at a time). The count is kept while Redis cannot answer.
 */
export class InstanceCounter {
  #count = 1;
  /** The answers of the last HOLD_BEATS beats, oldest first. */
  readonly #recent: number[] = [];
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(
    readonly intervalMs: number,
    /** Sends one beat (or a leave) and returns the live count; rejects when Redis cannot answer. */
    readonly beat: (leave: boolean) => Promise<number>,
    readonly onChange: (count: number) => void,
  ) {}

  get count(): number {
    return this.#count;
  }

  start(): void {
    void this.#beat();
    this.#timer = setInterval(() => void this.#beat(), this.intervalMs);
    this.#timer.unref();
  }

  /** Stops beating and removes this instance from the count (best effort). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    await this.beat(true).catch(() => undefined);
  }

  async #beat(): Promise<void> {
    let count: number;
    try {
      count = await this.beat(false);
    } catch {
      return; // keep the last count during an outage
    }
    if (this.#stopped) return;
    this.#recent.push(count);
    if (this.#recent.length > HOLD_BEATS) this.#recent.shift();
    const live = Math.max(...this.#recent, 1);
    if (live !== this.#count) {
      this.#count = live;
      this.onChange(live);
    }
  }
}
