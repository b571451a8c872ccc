import { LRUCache } from 'lru-cache';

type Denial = { until: number; cost: number; remaining: number; resetAtMs: number };

/**
 * Keys that Redis rejected, kept until their `retryAfterMs` passes: a repeat call of at least the
 * rejected cost is rejected with no Redis call, which saves Redis under abuse and keeps known
 * offenders blocked during an outage. Bounded by `maxKeys` (least recently used forgotten first).
 * Times are on a monotonic clock (`perf`): a wall clock stepping back must not keep a key denied.
 */
export class DenyCache {
  readonly #entries: LRUCache<string, Denial>;

  constructor(
    maxKeys: number,
    /** The monotonic clock (ms) that `until` and `now` are read on. */
    readonly perf: { now(): number } = performance,
  ) {
    this.#entries = new LRUCache<string, Denial>({ max: maxKeys });
  }

  get size(): number {
    return this.#entries.size;
  }

  /** Remembers a rejection of `cost` for `key` until `until` (ms on the `perf` clock). */
  deny(key: string, until: number, cost: number, remaining: number, resetAtMs: number): void {
    this.#entries.set(key, { until, cost, remaining, resetAtMs });
  }

  /** The denial that still applies to a call of `cost` at `now` (`perf` clock; read only when a key is denied), if any. */
  check(key: string, cost: number, now?: number): Denial | undefined {
    if (this.#entries.size === 0) return undefined;
    const denial = this.#entries.get(key);
    if (denial === undefined) return undefined;
    if ((now ?? this.perf.now()) >= denial.until) {
      this.#entries.delete(key);
      return undefined;
    }
    // A smaller call may fit before the larger one that was rejected.
    return cost >= denial.cost ? denial : undefined;
  }

  /** Forgets the denial of `key`. */
  delete(key: string): void {
    this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
  }
}
