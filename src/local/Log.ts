import { isLocalOnly, type CallId } from '../base/call.js';

/**
 * Calls admitted in (`from`, `to`] leave the window while the other instances may not know yet that
 * this one answers locally: their permits stay counted as used (ghosts) until `until`.
 */
export type Held = { readonly from: number; readonly to: number; readonly until: number };

/** Adds a call admitted elsewhere at `at`, never before the log's newest (times stay in order). */
export function addAt(log: Log, at: number, cost: number, id: CallId): void {
  const newest = log.newest();
  log.add(newest !== undefined && newest > at ? newest : at, cost, id);
}

/**
 * The admitted calls of one key, oldest first: a queue over parallel arrays with a moving head.
 * Invariant: `times` is non-decreasing from `head`, and `used` is the sum of `costs` from `head`.
 */
export class Log {
  times: number[] = [];
  /** Absent while every cost is 1. */
  costs: number[] | undefined;
  /**
   * Absent until a call brings an id (see `CallId`). `idSet` holds the caller's ids still in the log
   * (a re-sent call must count once); generated ids are unique and are only kept for re-seeding.
   */
  ids: (CallId | undefined)[] | undefined;
  idSet: Set<string> | undefined;
  head = 0;
  used = 0;
  /** The permits of calls never to reach Redis (a `LocalOnlyId`), counted in `used` too. */
  unsent = 0;
  /** This instance's part of the key's window as last learnt from Redis, until `partUntil` (see `LocalWindow.observe`). */
  part = Number.POSITIVE_INFINITY;
  partUntil = 0;
  /** The other instances' permits of the key's window as last learnt from Redis, until `partUntil` too. */
  others = 0;
  /** Every call is refused before this time (a block: `block()`, a penalty, or one Redis reported). */
  blockedUntil = 0;
  /** The block is a penalty (`blockMs`) for a refusal of reduced capacity (see `Decision.reducedCapacity`): its refusals are too. */
  blockedForShare = false;
  /**
   * Permits of calls that left the window while other instances could not yet know that this one
   * answers locally (see `LocalWindow.lost`): counted as used until `ghostUntil`, as those instances
   * may have taken them in Redis.
   */
  ghost = 0;
  ghostUntil = 0;

  costAt(i: number): number {
    return this.costs === undefined ? 1 : (this.costs[i] ?? 1);
  }

  /** Drops the calls admitted at or before `cutoff`; those admitted within `held` become ghosts (see {@link ghost}). */
  expire(cutoff: number, held?: Held): void {
    const { times } = this;
    let { head } = this;
    while (head < times.length && (times[head] as number) <= cutoff) {
      const cost = this.costAt(head);
      this.used -= cost;
      if (held !== undefined && (times[head] as number) > held.from && (times[head] as number) <= held.to) {
        this.ghost += cost;
        if (held.until > this.ghostUntil) this.ghostUntil = held.until;
      }
      const id = this.ids?.[head];
      if (typeof id === 'string') this.idSet?.delete(id);
      else if (isLocalOnly(id)) this.unsent -= cost;
      head += 1;
    }
    if (head > 32 && head * 2 > times.length) {
      times.splice(0, head);
      this.costs?.splice(0, head);
      this.ids?.splice(0, head);
      head = 0;
    }
    this.head = head;
  }

  add(at: number, cost: number, id: CallId | undefined): void {
    const index = this.times.length;
    this.times.push(at);
    if (cost !== 1 || this.costs !== undefined) {
      this.costs ??= new Array<number>(index).fill(1);
      this.costs.push(cost);
    }
    if (id !== undefined || this.ids !== undefined) {
      this.ids ??= new Array<CallId | undefined>(index).fill(undefined);
      this.ids.push(id);
      if (typeof id === 'string') (this.idSet ??= new Set()).add(id);
      else if (isLocalOnly(id)) this.unsent += cost;
    }
    this.used += cost;
  }

  /** Removes the first call whose id `matches`; returns its cost and id, undefined when none does. */
  remove(matches: (id: CallId) => boolean): { cost: number; id: CallId } | undefined {
    const { ids } = this;
    if (ids === undefined) return undefined;
    for (let i = this.head; i < this.times.length; i += 1) {
      const id = ids[i];
      if (id === undefined || !matches(id)) continue;
      const cost = this.costAt(i);
      this.times.splice(i, 1);
      this.costs?.splice(i, 1);
      ids.splice(i, 1);
      this.used -= cost;
      if (isLocalOnly(id)) this.unsent -= cost;
      // Redis may have admitted one id twice, under two costs (two members): the set keeps it while one is left.
      if (typeof id === 'string' && !ids.includes(id, this.head)) this.idSet?.delete(id);
      return { cost, id };
    }
    return undefined;
  }

  /** Time at which the permits in use drop by `need` or more (the log holds at least `need`). */
  freedAt(need: number): number {
    if (this.costs === undefined) return this.times[this.head + need - 1] as number;
    let freed = 0;
    for (let i = this.head; i < this.times.length; i += 1) {
      freed += this.costAt(i);
      if (freed >= need) return this.times[i] as number;
    }
    return this.times[this.times.length - 1] as number;
  }

  /**
   * Whether the calls that reached Redis (every one but a `LocalOnlyId`) admitted after
   * `after` hold more than `count` permits. Walks only the calls at or before `after` (the oldest:
   * those about to leave), usually none.
   */
  sentAbove(count: number, after: number): boolean {
    const { times, ids } = this;
    let held = this.used - this.unsent;
    for (let i = this.head; i < times.length && held > count && (times[i] as number) <= after; i += 1) {
      const id = ids?.[i];
      if (!isLocalOnly(id)) held -= this.costAt(i);
    }
    return held > count;
  }

  /** The ghost permits in force at `now` (forgotten once `ghostUntil` has passed). */
  ghosts(now: number): number {
    if (this.ghost > 0 && now >= this.ghostUntil) this.ghost = 0;
    return this.ghost;
  }

  newest(): number | undefined {
    return this.head < this.times.length ? this.times[this.times.length - 1] : undefined;
  }
}
