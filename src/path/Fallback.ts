import type { Breaker } from '../redis/Breaker.js';
import {
  combine,
  failClosedDecision,
  failOpenDecision,
  localDecision,
  noShareDecision,
  type LimitAllDecision,
  type LimitDecision,
  type LimiterDecision,
} from './decisions.js';
import { localOnly, memberOf, type CallId, type SentId } from '../base/call.js';
import { decide, inspect } from '../base/internal.js';
import { itemId, type CheckedItem } from '../redis/allWindows.js';
import type { LocalTier } from '../local/LocalTier.js';
import type { CallTerms } from '../local/terms.js';
import type { Recovery } from '../recovery/Recovery.js';
import type { Reservations } from './Reservations.js';
import type { Settings } from './Settings.js';
import type { DecisionReason } from '../types.js';
import type { CapacityReason, CapacityWatch } from './capacity.js';

/**
 * Whether a local answer for `reason` may mean that this instance lost Redis (its beats may stop): then
 * its windows keep the calls that leave while the others cannot know it (`LocalWindow.lost`). Not for
 * `'reconciling'` nor `'redis-reply-error'`, given while Redis answers: re-armed at every beat, the
 * ghosts would hold back most of what leaves the window.
 */
function mayBeLost(reason: DecisionReason): boolean {
  return reason !== 'reconciling' && reason !== 'redis-reply-error';
}

/**
 * The answer when Redis does not decide, by mode: the one place for `'fail-open'` (admit),
 * `'fail-closed'` (refuse, retry after the breaker's open period) and `'local'` (the local tier, at
 * this instance's share of the limit), for `limit()`, `limitAll()` and `peek()`. A refusal of
 * `'fail-closed'`, and one of the local tier that the whole limit had room for, are
 * `reducedCapacity` (the windows are given the whole limit to tell).
 *
 * In `'local'`, permits reserved by calls still waiting on Redis count as used, and an admitted call
 * is journalled to be written into Redis later, unless {@link journals} says otherwise. It owns no
 * state: the windows, the reservations and the journal belong to their parts.
 */
export class Fallback {
  readonly settings: Settings;
  readonly local: LocalTier;
  readonly reserved: Reservations;
  readonly recovery: Recovery;
  readonly breaker: Breaker;
  readonly now: () => number;
  /** `reconcile` option: journal what the local tier admits. */
  readonly reconcile: boolean;
  /** `blockMs` option: a call the local tier refuses for want of permits blocks its key for that long. */
  readonly blockMs: number;
  /** Announces, once, that this instance answers on less than its share (see `CapacityWatch`). */
  readonly capacity: CapacityWatch;
  /** The terms of the call being answered, filled for each (`#termsOf`, `#itemTerms`): nothing allocated per call. */
  readonly #terms: CallTerms = { now: 0, reserved: 0, limit: 0, whole: 0, blockMs: 0 };

  constructor(
    parts: Pick<Fallback, 'settings' | 'local' | 'reserved' | 'recovery' | 'breaker' | 'now' | 'reconcile' | 'blockMs' | 'capacity'>,
  ) {
    ({
      settings: this.settings,
      local: this.local,
      reserved: this.reserved,
      recovery: this.recovery,
      breaker: this.breaker,
      now: this.now,
      reconcile: this.reconcile,
      blockMs: this.blockMs,
      capacity: this.capacity,
    } = parts);
  }

  /** `limit()`'s answer, for a call of `limit` (`Settings.limitOf`), at `now` (the caller's reading of the clock, if it has one). */
  one(key: string, cost: number, id: SentId, reason: DecisionReason, limit: number, now = this.now()): LimiterDecision {
    const { settings } = this;
    const lease = settings.leaseReason(now); // read once: the mode and the share follow from it
    const why = lease ?? reason;
    const mode = settings.fallbackMode(now, lease);
    if (mode !== 'local') {
      if (lease !== undefined) this.#note(lease, limit, 0);
      return mode === 'fail-open'
        ? failOpenDecision(why, now, limit, id)
        : failClosedDecision(why, now, limit, this.breaker.resetTimeoutMs);
    }
    const share = settings.localShareOf(limit, now, lease);
    // A lease ended and a tenth of the share is none, or a share rounds to 0: refused, in mode 'local'.
    if (share === 0) {
      this.#note(lease ?? 'no-share', limit, 0);
      return noShareDecision(lease ?? 'no-share', now, limit, this.breaker.resetTimeoutMs);
    }
    this.#note(lease, limit, share);
    if (mayBeLost(reason)) settings.lost(this.local);
    const journalled = this.#journals(reason);
    // A journalled call keeps its id in the local window even if it was never sent to Redis: once
    // written back it is in Redis, so a re-seed after Redis lost its data writes it again (counted
    // once). A generated id of a call not journalled was never in Redis: kept as a `LocalOnlyId`, for
    // refund() alone, never re-seeded.
    const kept: CallId = journalled || typeof id === 'string' ? id : localOnly(id);
    const d = this.local.main[decide](key, cost, kept, this.#termsOf(now, key, share, limit));
    if (d.allowed && journalled) {
      this.recovery.add(key, now, cost, id);
      // Its Redis call was sent and not answered: Redis may have run it.
      if (reason === 'timeout' || reason === 'redis-error') this.recovery.markUnanswered(key, memberOf(id));
    }
    return localDecision(d, why, id);
  }

  /**
   * Tells the capacity watch why this instance answers on less than its share (undefined: it does
   * not), with the figures for a call of `limit` answered on `share` (undefined: the window's own).
   * Nothing is made unless the reason changed: it is told with every local answer.
   */
  #note(reason: CapacityReason | undefined, limit: number, share: number | undefined): void {
    if (this.capacity.told(reason)) return;
    this.capacity.note(reason, () => ({
      from: reason === 'no-lease' || reason === 'no-share' ? limit : this.settings.shareOf(limit),
      to: share ?? this.settings.shareOf(limit),
      windowMs: this.settings.windowMs,
    }));
  }

  /** `limitAll()`'s answer: in `'local'`, all or nothing on local windows of each limit's share. */
  all(items: readonly CheckedItem[], id: SentId, reason: DecisionReason): LimitAllDecision {
    const now = this.now();
    const lease = this.settings.leaseReason(now);
    const why = lease ?? reason;
    const mode = this.settings.fallbackMode(now, lease);
    if (mode !== 'local')
      return combine(
        items.map((item) => this.#fixed(mode, why, now, item.limit)),
        mode,
        why,
      );
    const share = (item: CheckedItem): number => this.settings.itemShareOf(item.limit, now);
    if (items.some((item) => share(item) === 0))
      return combine(
        items.map((item) => this.#fixed('local', lease ?? 'no-share', now, item.limit)),
        'local',
        lease ?? 'no-share',
      );
    if (mayBeLost(reason)) this.settings.lost(this.local);
    const journalled = this.#journals(reason);
    const kept = journalled || typeof id === 'string' ? id : undefined;
    const idFor = (item: CheckedItem): SentId | undefined => (kept === undefined ? undefined : itemId(kept, item));
    // First every window is asked (the same key twice counts its earlier costs), then all consume, or none.
    const before = new Map<string, number>();
    const views = items.map((item) => {
      const earlier = before.get(item.group) ?? 0;
      before.set(item.group, earlier + item.cost);
      const reserved = this.reserved.of(item.group) + earlier;
      return this.local.forWindow(item.windowMs)[inspect](item.key, item.cost, idFor(item), this.#itemTerms(now, item, reserved));
    });
    let decisions = views;
    if (views.every((d) => d.allowed)) {
      decisions = items.map((item) => {
        const itemCallId = idFor(item);
        const terms = this.#itemTerms(now, item, this.reserved.of(item.group));
        const d = this.local.forWindow(item.windowMs)[decide](item.key, item.cost, itemCallId, terms);
        if (d.allowed && journalled && itemCallId !== undefined) {
          this.recovery.add(item.key, now, item.cost, itemCallId, item.windowMs);
        }
        return d;
      });
    }
    return combine(
      decisions.map((d) => localDecision(d, why)),
      'local',
      why,
    );
  }

  /** `peek()`'s answer: what a call of cost 1 and `limit` would get, consuming nothing. */
  peek(key: string, reason: DecisionReason, limit: number): LimitDecision {
    const now = this.now();
    const lease = this.settings.leaseReason(now);
    const why = lease ?? reason;
    const mode = this.settings.fallbackMode(now, lease);
    if (mode !== 'local') return this.#fixed(mode, why, now, limit);
    const share = this.settings.fallbackShareOf(limit, now);
    if (share === 0) return this.#fixed('local', lease ?? 'no-share', now, limit);
    if (mayBeLost(reason)) this.settings.lost(this.local);
    return localDecision(this.local.main[inspect](key, 1, undefined, this.#termsOf(now, key, share, limit)), why);
  }

  /**
   * The fixed answer of mode `'fail-open'` (admit) or `'fail-closed'` (refuse until the breaker's open
   * period has passed); `'local'`: a refusal of mode `'local'` with no share to answer on, until then too.
   */
  #fixed(source: 'fail-open' | 'fail-closed' | 'local', reason: DecisionReason, now: number, limit: number): LimitDecision {
    if (source === 'fail-open') return failOpenDecision(reason, now, limit);
    const wait = this.breaker.resetTimeoutMs;
    return source === 'local' ? noShareDecision(reason, now, limit, wait) : failClosedDecision(reason, now, limit, wait);
  }

  /**
   * The terms of a call of `key` at `now` on the local window: `share` of `limit`, the permits its
   * calls still waiting on Redis hold counted as used, and the `blockMs` penalty (`limit()`'s and `peek()`'s). One object, filled anew.
   */
  #termsOf(now: number, key: string, share: number | undefined, limit: number): CallTerms {
    const t = this.#terms;
    t.now = now;
    t.reserved = this.reserved.of(key);
    t.limit = share ?? this.local.main.options.limit; // undefined: the window's own (`Settings.localShareOf`)
    t.whole = limit;
    t.blockMs = this.blockMs;
    return t;
  }

  /** The terms of one limit of `limitAll()` at `now`, `reserved` permits counting as used (no penalty: `blockMs` is `limit()`'s). */
  #itemTerms(now: number, item: CheckedItem, reserved: number): CallTerms {
    const t = this.#terms;
    t.now = now;
    t.reserved = reserved;
    t.limit = this.settings.itemShareOf(item.limit, now);
    t.whole = item.limit;
    t.blockMs = 0;
    return t;
  }

  /**
   * Whether a call the local window admits for `reason` is journalled, to be written into Redis
   * later: not with `reconcile: false`, nor after a reply error (Redis answered that it cannot take
   * this call: a key of another type, a script bug; writing it back would fail the same way).
   */
  #journals(reason: DecisionReason): boolean {
    return this.reconcile && reason !== 'redis-reply-error';
  }
}
