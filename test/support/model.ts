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

/** The slice rule, as docs/resolution.md states it: a call at t counts while now < (floor(t / r) + 1) * r + W. */
export class SliceModel {
  readonly calls: { at: number; cost: number }[] = [];
  constructor(
    readonly limit: number,
    readonly windowMs: number,
    readonly r: number,
  ) {}
  #ends(at: number): number {
    return (Math.floor(at / this.r) + 1) * this.r + this.windowMs;
  }
  used(now: number): number {
    return this.calls.filter((c) => now < this.#ends(c.at)).reduce((n, c) => n + c.cost, 0);
  }
  decide(now: number, cost: number): { allowed: boolean; used: number; retryAfterMs: number; resetAtMs: number } {
    const used = this.used(now);
    if (used + cost <= this.limit) {
      this.calls.push({ at: now, cost });
      return { allowed: true, used: used + cost, retryAfterMs: 0, resetAtMs: this.#ends(now) };
    }
    const live = this.calls.filter((c) => now < this.#ends(c.at));
    let freed = 0;
    let retryAfterMs = 0;
    for (const c of live) {
      freed += c.cost;
      if (freed >= used + cost - this.limit) {
        retryAfterMs = this.#ends(c.at) - now;
        break;
      }
    }
    const resetAtMs = live.length === 0 ? now : Math.max(...live.map((c) => this.#ends(c.at)));
    return { allowed: false, used, retryAfterMs, resetAtMs };
  }
  /** Whether a call of `cost` fits now, and if not the wait {@link decide} would tell; admits nothing. */
  view(now: number, cost: number): { fits: boolean; retryAfterMs: number } {
    if (this.used(now) + cost <= this.limit) return { fits: true, retryAfterMs: 0 };
    return { fits: false, retryAfterMs: this.decide(now, cost).retryAfterMs };
  }
  /** The exact log's wait for the same admitted calls: when enough of them are a window old. */
  exactRetryAfter(now: number, cost: number): number {
    const live = this.calls.filter((c) => now < c.at + this.windowMs);
    const used = live.reduce((n, c) => n + c.cost, 0);
    if (used + cost <= this.limit) return 0;
    let freed = 0;
    for (const c of live) {
      freed += c.cost;
      if (freed >= used + cost - this.limit) return c.at + this.windowMs - now;
    }
    return 0;
  }
}

/**
 * The permits of one window counted by slices (lua/sliced-window.lua's rule: slice s counts while now
 * < (s + 1) × res + W), slice by slice, for the models of the script's ops.
 */
export class SliceCounts {
  readonly slices = new Map<number, number>();
  /** The newest slice written (the script's h while live). */
  h: number | undefined;
  constructor(
    public W: number,
    public res: number,
  ) {}
  first(now: number): number {
    return Math.floor((now - this.W) / this.res);
  }
  /** The live slices, oldest first, with their permits. */
  live(now: number): [number, number][] {
    const f = this.first(now);
    return [...this.slices.entries()].filter(([s]) => s >= f).sort((a, b) => a[0] - b[0]);
  }
  used(now: number): number {
    return this.live(now).reduce((n, [, c]) => n + c, 0);
  }
  /** h while it is live, else undefined. */
  liveH(now: number): number | undefined {
    return this.h !== undefined && this.h >= this.first(now) ? this.h : undefined;
  }
  /** When `need` permits will have left (0: none needed, or never). */
  retry(now: number, need: number): number {
    if (need <= 0) return 0;
    let freed = 0;
    for (const [s, c] of this.live(now)) {
      freed += c;
      if (c > 0 && freed >= need) return (s + 1) * this.res + this.W - now;
    }
    return 0;
  }
  add(s: number, cost: number): void {
    this.slices.set(s, (this.slices.get(s) ?? 0) + cost);
    if (this.h === undefined || s > this.h) this.h = s;
  }
  /** Op "w": calls admitted elsewhere added to their slices (a future one to the current). [written, expired, 0] */
  writeBack(now: number, calls: readonly [number, number][]): [number, number, number] {
    const cur = Math.floor(now / this.res);
    let written = 0;
    let expired = 0;
    for (const [at, cost] of calls) {
      const s = Math.min(Math.floor(at / this.res), cur);
      if (s < this.first(now)) expired++;
      else {
        written++;
        this.add(s, cost);
      }
    }
    return [written, expired, 0];
  }
}
