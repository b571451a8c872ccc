/**
 * A brute-force reference of the exact sliding log, written for clarity, not speed: the tests compare
 * both tiers against it call by call.
 */
export class ReferenceWindow {
  readonly admitted: { at: number; cost: number; id: string | undefined }[] = [];

  constructor(
    readonly limit: number,
    readonly windowMs: number,
  ) {}

  /** Permits admitted at times in (now - windowMs, +inf). */
  used(now: number): number {
    return this.inWindow(now).reduce((sum, e) => sum + e.cost, 0);
  }

  limitAt(now: number, cost = 1, id?: string) {
    const live = this.inWindow(now);
    if (id !== undefined && live.some((e) => e.id === id)) {
      return this.answer(now, true, cost);
    }
    const allowed = this.used(now) + cost <= this.limit;
    if (allowed) this.admitted.push({ at: now, cost, id });
    return this.answer(now, allowed, cost);
  }

  /**
   * Forgets the calls that have left the window at `now`, as the script does on every call with a
   * cost: with several callers' clocks, `now` can go back, and a forgotten call does not return.
   */
  forget(now: number): void {
    for (let i = this.admitted.length - 1; i >= 0; i--) {
      if ((this.admitted[i] as { at: number }).at <= now - this.windowMs) this.admitted.splice(i, 1);
    }
  }

  /** What a call of `cost` would get at `now`, consuming nothing. */
  check(now: number, cost = 1) {
    return this.answer(now, this.used(now) + cost <= this.limit, cost);
  }

  /** The largest number of permits admitted in any window (t - windowMs, t]. */
  maxInAnyWindow(): number {
    let max = 0;
    for (const end of this.admitted) {
      const sum = this.admitted.filter((e) => e.at > end.at - this.windowMs && e.at <= end.at).reduce((s, e) => s + e.cost, 0);
      max = Math.max(max, sum);
    }
    return max;
  }

  private inWindow(now: number) {
    return this.admitted.filter((e) => e.at > now - this.windowMs);
  }

  private answer(now: number, allowed: boolean, cost: number) {
    const live = this.inWindow(now).sort((a, b) => a.at - b.at);
    const used = live.reduce((s, e) => s + e.cost, 0);
    let retryAfterMs = 0;
    if (!allowed) {
      const need = used + cost - this.limit;
      let freed = 0;
      for (const e of live) {
        freed += e.cost;
        if (freed >= need) {
          retryAfterMs = e.at + this.windowMs - now;
          break;
        }
      }
    }
    const newest = live.at(-1);
    return {
      allowed,
      remaining: Math.max(this.limit - used, 0),
      retryAfterMs,
      resetAtMs: newest === undefined ? now : newest.at + this.windowMs,
    };
  }
}

/** A small seedable PRNG (mulberry32), so that a failing random run can be replayed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The largest sum of costs admitted within any window (t - windowMs, t], from admission times. */
export function maxInAnyWindow(admitted: readonly { at: number; cost: number }[], windowMs: number): number {
  const sorted = [...admitted].sort((a, b) => a.at - b.at);
  let max = 0;
  let sum = 0;
  let start = 0;
  for (const entry of sorted) {
    sum += entry.cost;
    while ((sorted[start] as { at: number }).at <= entry.at - windowMs) sum -= (sorted[start++] as { cost: number }).cost;
    max = Math.max(max, sum);
  }
  return max;
}
