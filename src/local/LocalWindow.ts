import { LRUCache } from 'lru-cache';
import { addAt, Log, type Held } from './Log.js';
import type { CallTerms, RefusedFor } from './terms.js';
import { checkCallOptions, checkCost, checkId, checkKey, isLocalOnly, type CallId, type SentId } from '../base/call.js';
import { block, configure, decide, inspect } from '../base/internal.js';
import {
  resolveLocalWindowOptions,
  resolveWindowOptions,
  type LocalWindowOptions,
  type ResolvedLocalWindowOptions,
} from '../options/options.js';
import type { Decision, LimitOptions, RateWindow } from '../types.js';

/** Ghosts cover at most this fraction (1 / GHOST_SPAN) of a window after this instance was last seen (see `LocalWindow.lost`). */
const GHOST_SPAN = 4;

/**
 * An exact sliding window inside one process, with the same semantics as {@link RedisWindow}:
 * at every instant, the permits admitted in the last `windowMs` never exceed `limit`; a call is
 * admitted whole or not at all; rejected calls consume nothing; a re-sent id counts once.
 *
 * Memory is bounded by `maxKeys` (least recently used keys are forgotten, and a forgotten key starts
 * from an empty window) and, per key, by the calls admitted within one window (at most `limit`).
 *
 * @example
 * const local = new LocalWindow({ limit: 100, windowMs: 60_000, maxKeys: 10_000 });
 * const decision = local.limit('user:42');
 * if (!decision.allowed) reply429(decision.retryAfterMs);
 */
export class LocalWindow implements RateWindow {
  #options: ResolvedLocalWindowOptions;
  readonly #logs: LRUCache<string, Log>;
  readonly #now: () => number;
  /** Set by {@link lost}: the calls whose permits the other instances may take in Redis meanwhile. */
  #held: Held | undefined;
  /** The `from` of the last {@link lost} (kept once its ghosts have ended, so that the same outage is not made anew per call). */
  #lostFrom = Number.NaN;
  /** Passed to every `get`: lru-cache otherwise makes an options object per call. */
  readonly #getOptions: { status: LRUCache.Status<string, Log, unknown> | undefined } = { status: undefined };
  /** The terms of the call being decided, as adjusted (the key's part, its ghosts): one object, filled per call. */
  readonly #terms: CallTerms = { now: 0, reserved: 0, limit: 0, whole: 0, blockMs: 0 };

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a missing or out-of-range option. */
  constructor(options: LocalWindowOptions) {
    this.#options = resolveLocalWindowOptions(options);
    this.#now = this.#options.now;
    this.#logs = new LRUCache<string, Log>({ max: this.#options.maxKeys });
  }

  /** The resolved options (frozen). */
  get options(): ResolvedLocalWindowOptions {
    return this.#options;
  }

  /** Keys currently held (at most `maxKeys`). */
  get size(): number {
    return this.#logs.size;
  }

  /**
   * Decides one call of `key` and consumes its cost when admitted.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_COST` or `ERR_RESILIMIT_INVALID_ID`.
   */
  limit(key: string, options?: LimitOptions): Decision {
    checkKey(key);
    checkCallOptions('LocalWindow.limit()', options);
    const cost = checkCost(options?.cost, this.#options.limit);
    return this[decide](key, cost, options?.id === undefined ? undefined : checkId(options.id));
  }

  /**
   * Records a call admitted elsewhere (by Redis) at time `at`, without a limit check, so that this
   * window holds the recent traffic when it has to take over. Arguments are not checked.
   * @internal
   */
  record(key: string, at: number, cost: number, id: CallId): void {
    addAt(this.#logOf(key, this.#now()), at, cost, id);
  }

  /**
   * This instance may be answering for Redis while the other instances, still deciding in Redis, do
   * not know it yet: they see it silent only `detectMs` after `lastSeenAt` (its last heartbeat Redis
   * answered), and until then Redis gives them the permits its calls free. So the calls of this window
   * that leave in that time stay counted as used (ghosts) for one window more: an instance that took
   * their permits in Redis meanwhile holds them that long. Never for more than a quarter of the
   * window: when every instance lost Redis (nobody can take those permits), the ghosts cost this
   * instance permits it could have used, at most a quarter of its share for one window. Called with
   * every local answer: one comparison while the outage is the same (its ghosts may have ended); a
   * later `lastSeenAt` (a new outage) starts anew. @internal
   */
  lost(lastSeenAt: number, detectMs: number): void {
    const { windowMs } = this.#options;
    const from = lastSeenAt - windowMs;
    if (from === this.#lostFrom) return;
    this.#lostFrom = from;
    const span = Math.min(detectMs, windowMs / GHOST_SPAN);
    this.#held = { from, to: from + span, until: lastSeenAt + span + windowMs };
  }

  /**
   * Learns from a Redis decision of `key` how the global window is shared, so that this window, when
   * it answers for Redis, admits no more than this instance's part of it: `used` permits of the
   * global `limit` were in use (every instance's calls), `instances` share it, and this window holds
   * this instance's own calls. The part is min(share, own + ⌈free / instances⌉), share being this
   * instance's share of that limit and own at most the share: an instance that had less than its share keeps what it
   * had plus an even part of what was free. The parts of all instances then never add up to more than
   * the limit, however unevenly Redis had admitted their calls (with the share alone, those under it
   * would admit up to it while those over it still hold their calls in the window). The part holds
   * for one window from now: by then every call Redis admitted before is out of the window, and the
   * shares alone add up to the limit. Never more than the share in force. When Redis admitted the
   * call, `admitted` is it, recorded first as {@link record} would (one lookup of the key).
   *
   * With `offset` (the check is asked for), returns false, learning and recording nothing, when Redis admitted the call while holding fewer
   * permits of the key (`used` less the call's cost) than this window holds of this instance's calls
   * that Redis has (every call but those never sent, see `CallId`) and that stay in the window for
   * `offset.uncertainty()` more (read only then; a call Redis admitted is kept here at the latest local time it can have:
   * it may leave Redis's window up to the clock offset's uncertainty earlier than this one): Redis
   * lost them (a `FLUSHALL`, an eviction, a `reset()` by another instance), and
   * its admission is not to be trusted. The common case costs one comparison (`used` covers this
   * window's calls). @internal
   */
  observe(
    key: string,
    used: number,
    limit: number,
    instances: number,
    share = this.#options.limit,
    admitted?: { at: number; cost: number; id: CallId },
    offset?: { uncertainty(): number },
  ): boolean {
    const now = this.#now();
    const log = this.#logOf(key, now);
    const before = admitted === undefined ? 0 : used - admitted.cost;
    if (
      offset !== undefined &&
      admitted !== undefined &&
      log.used - log.unsent > before &&
      log.sentAbove(before, now - this.#options.windowMs + offset.uncertainty())
    ) {
      return false;
    }
    if (admitted !== undefined) {
      addAt(log, admitted.at, admitted.cost, admitted.id);
      log.blockedUntil = 0; // Redis admitted a call of the key: it holds no block of it (another instance lifted it)
    }
    log.part = Math.min(share, Math.min(log.used, share) + Math.ceil(Math.max(0, limit - used) / instances));
    log.partUntil = now + this.#options.windowMs;
    // What the others held: Redis's count less this instance's calls it has (a call of the outage not
    // written back yet makes it lower; never below none).
    log.others = Math.max(0, used - log.used + log.unsent);
    return true;
  }

  /** Refuses every call of `key` until `until` (0 lifts a block), as long as the key is kept. @internal */
  [block](key: string, until: number): void {
    const log = this.#logOf(key, this.#now());
    log.blockedUntil = until;
    log.blockedForShare = false; // `block()`, or a block Redis holds: the key's own
  }

  /** True while the caller's `id` is in `key`'s window (a call admitted with it has not left yet). @internal */
  holds(key: string, id: string): boolean {
    const log = this.#logs.peek(key);
    return log?.idSet?.has(id) === true && log.times.length > log.head;
  }

  /**
   * Gives back the call of `key` whose id `matches` (a refund): removed from the window if it is
   * still in it. Returns its cost and its id as kept (see `CallId`), undefined when the window does not
   * hold it; recency is not touched. @internal
   */
  forgetCall(key: string, matches: (id: CallId) => boolean): { cost: number; id: CallId } | undefined {
    const log = this.#logs.peek(key);
    if (log?.ids === undefined) return undefined;
    this.#expire(log, this.#now());
    return log.remove(matches);
  }

  /**
   * Every call still in its window that carries an id, oldest first per key (keys in no particular
   * order), but for those never to reach Redis (a `LocalOnlyId`); recency is not touched. @internal
   */
  *calls(now = this.#now()): Generator<{ key: string; at: number; cost: number; id: SentId }> {
    const cutoff = now - this.#options.windowMs;
    for (const [key, log] of this.#logs.entries()) {
      if (log.ids === undefined) continue;
      for (let i = log.head; i < log.times.length; i += 1) {
        const at = log.times[i] as number;
        const id = log.ids[i];
        if (at > cutoff && id !== undefined && !isLocalOnly(id)) yield { key, at, cost: log.costAt(i), id };
      }
    }
  }

  /**
   * {@link limit} with checked arguments. The caller's id (a string) is checked for a re-sent call;
   * a generated one is only kept. Without `terms`, the window is used alone: now, on its own limit,
   * nothing reserved, no penalty. With them (see {@link CallTerms}), `reserved` permits count as
   * used, `limit` replaces the window's own for this call (less the part left to other instances,
   * see {@link observe}), a refusal `whole` has room for is `reducedCapacity`, and a refusal for
   * want of permits blocks the key for `blockMs`. @internal
   */
  [decide](key: string, cost: number, id: CallId | undefined, terms?: CallTerms): Decision {
    const t = this.#termsOf(terms);
    const { now } = t;
    const log = this.#logOf(key, now);
    if (now < log.partUntil && log.part < t.limit) t.limit = log.part;
    if (typeof id === 'string' && log.idSet?.has(id) === true) return this.#admitted(log, t, 0);
    t.reserved += log.ghosts(now);
    if (now < log.blockedUntil) return this.#refused(log, t, cost, log.blockedForShare ? 'share' : 'limit');
    if (log.used + t.reserved + cost > t.limit) {
      const reduced = this.#fitsWhole(log, now, t.reserved + cost, t.whole);
      if (t.blockMs > 0) {
        // A penalty: refused for want of permits, the key is blocked for blockMs (for the same reason).
        log.blockedUntil = now + t.blockMs;
        log.blockedForShare = reduced;
      }
      return this.#refused(log, t, cost, reduced ? 'share' : 'limit');
    }
    // Times never go backwards within a log: a clock stepping back keeps calls in the window longer, never shorter.
    const newest = log.newest();
    log.add(newest !== undefined && newest > now ? newest : now, cost, id);
    return this.#admitted(log, t, 0);
  }

  /**
   * What {@link decide} would answer on `terms`, consuming nothing and creating nothing (`allowed`
   * tells whether the call fits; a caller's id already in the window fits; `blockMs` is not read). @internal
   */
  [inspect](key: string, cost: number, id: CallId | undefined, terms: CallTerms): Decision {
    const t = this.#termsOf(terms);
    const { now, whole } = t;
    const log = this.#logs.peek(key);
    // The part left to this instance, as decide() applies it (an all-or-nothing call asks first).
    if (log !== undefined && now < log.partUntil && log.part < t.limit) t.limit = log.part;
    if (log === undefined) {
      const { limit, reserved } = t;
      const fits = reserved + cost <= limit;
      // Only permits reserved by calls waiting on Redis can be in the way: no time to give, a window at most.
      return {
        ...this.#empty(now),
        allowed: fits,
        limit,
        remaining: Math.max(limit - reserved, 0),
        retryAfterMs: fits ? 0 : this.#options.windowMs,
        reducedCapacity: !fits && reserved + cost <= whole,
      };
    }
    this.#expire(log, now);
    if (typeof id === 'string' && log.idSet?.has(id) === true) return this.#admitted(log, t, 0);
    t.reserved += log.ghosts(now);
    const blocked = now < log.blockedUntil;
    if (!blocked && log.used + t.reserved + cost <= t.limit) return this.#admitted(log, t, t.reserved);
    const reduced = blocked ? log.blockedForShare : this.#fitsWhole(log, now, t.reserved + cost, whole);
    return this.#refused(log, t, cost, reduced ? 'share' : 'limit');
  }

  /** The window's own terms of a call (`given` copied when given): the object {@link decide} and {@link inspect} adjust. */
  #termsOf(given: CallTerms | undefined): CallTerms {
    const t = this.#terms;
    if (given === undefined) {
      t.now = this.#now();
      t.reserved = 0;
      t.limit = t.whole = this.#options.limit;
      t.blockMs = 0;
    } else {
      t.now = given.now;
      t.reserved = given.reserved;
      t.limit = given.limit;
      t.whole = given.whole;
      t.blockMs = given.blockMs;
    }
    return t;
  }

  /**
   * Tells what a call of cost 1 would get now, without consuming anything or touching recency.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`.
   */
  peek(key: string): Decision {
    checkKey(key);
    const now = this.#now();
    const log = this.#logs.peek(key);
    if (log === undefined) return this.#empty(now);
    this.#expire(log, now);
    const t = this.#termsOf(undefined);
    t.now = now;
    return log.used + 1 <= t.limit && now >= log.blockedUntil ? this.#admitted(log, t, 0) : this.#refused(log, t, 1, 'limit');
  }

  /** Forgets every permit used by `key`. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`. */
  reset(key: string): void {
    checkKey(key);
    this.#logs.delete(key);
  }

  /** Forgets every key. */
  clear(): void {
    this.#logs.clear();
  }

  /** Changes the limit and window for the calls that follow; the recorded calls stay. @internal */
  [configure](changes: { limit?: number; windowMs?: number }): void {
    this.#options = Object.freeze({ ...this.#options, ...resolveWindowOptions({ ...this.#options, ...changes }) });
  }

  /** Drops the calls of `log` that left the window by `now` (ghosts of those {@link lost} says). */
  #expire(log: Log, now: number): void {
    let held = this.#held;
    if (held !== undefined && now >= held.until) held = this.#held = undefined; // every ghost has ended
    log.expire(now - this.#options.windowMs, held);
  }

  /** The log of `key`, made on first use (most recently used now), without the calls that left the window by `now`. */
  #logOf(key: string, now: number): Log {
    const options = this.#getOptions;
    let log = this.#logs.get(key, options as LRUCache.GetOptions<string, Log, unknown>);
    // lru-cache sets `status` on the options it is given (a new object per call without them).
    options.status = undefined;
    if (log === undefined) {
      log = new Log();
      this.#logs.set(key, log);
    } else {
      this.#expire(log, now);
    }
    return log;
  }

  /**
   * Whether `need` more permits (a refused call's cost and the permits reserved beside it) fit `whole`,
   * the limit this window's share is of, beside what this instance knows to be in use: its own calls
   * of the key, and the other instances' as Redis last told (for one window after, as the part): a
   * refusal of reduced capacity, not of the limit (`Decision.reducedCapacity`).
   */
  #fitsWhole(log: Log, now: number, need: number, whole: number): boolean {
    return log.used + need + (now < log.partUntil ? log.others : 0) <= whole;
  }

  // The two builders below make every decision of a key the window holds: the same fields in the same order.

  /** An admitted call's decision on terms `t` (its `now` and `limit`), `reserved` permits counting as used. */
  #admitted(log: Log, t: CallTerms, reserved: number): Decision {
    const { now, limit } = t;
    const newest = log.newest();
    return {
      allowed: true,
      limit,
      remaining: Math.max(limit - log.used - reserved, 0),
      retryAfterMs: 0,
      resetAtMs: Math.ceil(newest === undefined ? now : newest + this.#options.windowMs),
      source: 'local',
      reducedCapacity: false,
    };
  }

  /** A refused call's decision on terms `t` (its `now`, `limit` and `reserved`), for want of `cost` permits more. */
  #refused(log: Log, t: CallTerms, cost: number, why: RefusedFor): Decision {
    const { now, limit, reserved } = t;
    const newest = log.newest();
    return {
      allowed: false,
      limit,
      remaining: Math.max(limit - log.used - reserved, 0),
      // Whole milliseconds, rounded up (the steady clock reads fractions): a caller waiting that long is not early.
      retryAfterMs: Math.ceil(this.#retryAfter(log, now, cost + reserved, limit)),
      resetAtMs: Math.ceil(newest === undefined ? now : newest + this.#options.windowMs),
      source: 'local',
      reducedCapacity: why === 'share',
    };
  }

  /** The wait before a refused call could be admitted: until it fits (see below) and the key's block has ended. */
  #retryAfter(log: Log, now: number, cost: number, limit: number): number {
    const need = log.used + cost - limit;
    const ghost = log.ghosts(now);
    let fits = need > 0 ? this.#fitsAfter(log, now, need) : 0;
    if (need > 0 && ghost > 0) {
      // Ghosts (counted in `cost`, with the reserved permits) all end at ghostUntil: it fits earlier only
      // if enough of the window's own calls leave before then, else once they have ended and enough left.
      const ghostLeft = log.ghostUntil - now;
      if (need > log.used || fits >= ghostLeft) fits = Math.max(ghostLeft, need - ghost > 0 ? this.#fitsAfter(log, now, need - ghost) : 0);
    }
    return Math.max(log.blockedUntil - now, fits);
  }

  #fitsAfter(log: Log, now: number, need: number): number {
    // A cost above this window's limit (a limiter's local share can be below the global limit it
    // was checked against), or permits reserved by calls still waiting on Redis, cannot be timed from
    // the log: answer with the time until the window is empty, at least one window.
    if (need > log.used) return (log.newest() ?? now) + this.#options.windowMs - now;
    return log.freedAt(need) + this.#options.windowMs - now;
  }

  #empty(now: number): Decision {
    const { limit } = this.#options;
    return { allowed: true, limit, remaining: limit, retryAfterMs: 0, resetAtMs: Math.ceil(now), source: 'local', reducedCapacity: false };
  }
}
