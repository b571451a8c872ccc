import { LRUCache } from 'lru-cache';

/** A refusal to remember (see {@link DenyCache.deny}). */
export type Refusal = { until: number; cost: number; remaining: number; resetAtMs: number; limit: number };

/**
 * `limit`: the limit the call was refused under (0: any, a block). `probeAt`: when a call may go to
 * Redis to see whether the denial still holds there. `held`: a block Redis does not hold (made while
 * it could not answer): never probed, kept to its end.
 */
type Denial = Refusal & { probeAt: number; held: boolean };

/**
 * A denial longer than this (ms) lets one call through to Redis this often, while Redis answers:
 * another instance may have lifted it (`block(key, 0)`, `reset(key)`, a refund), and this instance
 * would otherwise refuse the key for the rest of it. One Redis call a second per denied key.
 */
const PROBE_MS = 1000;

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
    /** Whether Redis answers now (a probe goes there, not to the fallback). */
    readonly probing: () => boolean = () => false,
  ) {
    this.#entries = new LRUCache<string, Denial>({ max: maxKeys });
  }

  get size(): number {
    return this.#entries.size;
  }

  /**
   * Remembers a rejection of `key` until `until` (on this cache's clock, see {@link untilFor}): a call
   * of at least `cost` under `limit` is refused till then, with `remaining` and `resetAtMs` as Redis
   * said. A blocked key: cost 1 and limit 0 (every call, under any limit).
   */
  deny(key: string, refusal: Refusal): void {
    const { until, cost, remaining, resetAtMs, limit } = refusal;
    this.#entries.set(key, { until, cost, remaining, resetAtMs, limit, probeAt: this.perf.now() + PROBE_MS, held: false });
  }

  /** The end of a wait of `retryAfterMs` counted from a call asked `askedMsAgo` ms ago, on this cache's clock. */
  untilFor(askedMsAgo: number, retryAfterMs: number): number {
    return this.perf.now() - askedMsAgo + retryAfterMs;
  }

  /** The block of `key` was not taken by Redis: keep it to its end, unprobed (see {@link Denial}). */
  hold(key: string): void {
    const denial = this.#entries.get(key);
    if (denial !== undefined && denial.limit === 0) denial.held = true;
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
    if (cost < denial.cost) return undefined;
    if (!denial.held && this.perf.now() >= denial.probeAt && this.probing()) {
      denial.probeAt = this.perf.now() + PROBE_MS;
      return undefined; // this call goes to Redis: its answer renews or lifts the denial
    }
    return denial;
  }

  /** Forgets the denial of `key`, unless it is a block (a refund of another call does not lift it). */
  delete(key: string): void {
    if (this.#entries.size !== 0 && this.#entries.peek(key)?.limit !== 0) this.#entries.delete(key);
  }

  /** Redis admitted a call of `key`: no denial of it holds there any more, unless a block Redis never took. */
  admitted(key: string): void {
    if (this.#entries.size !== 0 && this.#entries.peek(key)?.held !== true) this.#entries.delete(key);
  }

  /** Forgets the denial of `key`, a block too (`block(key, 0)`, `reset(key)`). */
  lift(key: string): void {
    this.#entries.delete(key);
  }

  /** Forgets every denial but the blocks (made by `block()` or a penalty, they outlast a change of limit or of the instance count). */
  clear(): void {
    if (this.#entries.size === 0) return;
    const denials: string[] = [];
    for (const [key, denial] of this.#entries.entries()) if (denial.limit !== 0) denials.push(key);
    for (const key of denials) this.#entries.delete(key);
  }
}
