import { LRUCache } from 'lru-cache';

/** `limit`: the limit the call was refused under (0: any, a block). */
type Denial = { until: number; cost: number; remaining: number; resetAtMs: number; limit: number };

/**
 * Keys that Redis rejected, kept until their `retryAfterMs` passes: a repeat call of at least the
 * rejected cost, under the same limit (a limit function may have changed the key's), is rejected with no Redis call, which saves Redis under abuse and keeps known
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

  /**
   * Remembers a rejection of `cost` for `key` under `limit` until `until` (ms on the `perf` clock).
   * A blocked key: cost 1 and limit 0 (every call, under any limit).
   */
  deny(key: string, until: number, cost: number, remaining: number, resetAtMs: number, limit: number): void {
    this.#entries.set(key, { until, cost, remaining, resetAtMs, limit });
  }

  /** The denial that still applies to a call of `cost` under `limit` at `now` (`perf` clock; read only when a key is denied), if any. */
  check(key: string, cost: number, limit: number, now?: number): Denial | undefined {
    if (this.#entries.size === 0) return undefined;
    const denial = this.#entries.get(key);
    if (denial === undefined) return undefined;
    if ((now ?? this.perf.now()) >= denial.until || (denial.limit !== limit && denial.limit !== 0)) {
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
