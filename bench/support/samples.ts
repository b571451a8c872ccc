/** Latencies in milliseconds, kept whole so percentiles are exact. */
export class Samples {
  #data = new Float64Array(4096);
  #count = 0;
  #sorted: Float64Array | undefined;

  get count(): number {
    return this.#count;
  }

  add(ms: number): void {
    if (this.#count === this.#data.length) {
      const bigger = new Float64Array(this.#data.length * 2);
      bigger.set(this.#data);
      this.#data = bigger;
    }
    this.#data[this.#count++] = ms;
    this.#sorted = undefined;
  }

  /** The p-th percentile (0 … 100), nearest rank; NaN when empty. */
  percentile(p: number): number {
    if (this.#count === 0) return Number.NaN;
    this.#sorted ??= this.#data.slice(0, this.#count).sort();
    const rank = Math.min(this.#count - 1, Math.max(0, Math.ceil((p / 100) * this.#count) - 1));
    return this.#sorted[rank] as number;
  }

  summary(): LatencySummary {
    return { count: this.#count, p50: this.percentile(50), p99: this.percentile(99), max: this.percentile(100) };
  }

  /** Another set's samples, appended. */
  merge(other: Samples): void {
    for (let i = 0; i < other.#count; i += 1) this.add(other.#data[i] as number);
  }
}

export type LatencySummary = { count: number; p50: number; p99: number; max: number };
