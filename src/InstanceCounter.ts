/**
 * Counts the live instances of a limiter (same Redis, same prefix) through heartbeats, so that the
 * local tier's share of the global limit is derived rather than guessed. The last count is kept
 * while Redis cannot answer.
 */
export class InstanceCounter {
  #count = 1;
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
    const live = Math.max(count, 1);
    if (live !== this.#count) {
      this.#count = live;
      this.onChange(live);
    }
  }
}
