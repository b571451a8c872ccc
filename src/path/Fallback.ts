import type { Breaker } from '../redis/Breaker.js';
import { combine, fixedDecision, localDecision, type LimitAllDecision, type LimitDecision, type LimiterDecision } from './decisions.js';
import { memberOf, type CallId } from '../options/input.js';
import { decide, inspect } from '../internal.js';
import { itemId, type CheckedItem } from './limitAll.js';
import type { LocalTier } from '../local/LocalTier.js';
import type { Recovery } from '../recovery/Recovery.js';
import type { Reservations } from './Reservations.js';
import type { Settings } from '../limiter/Settings.js';
import type { DecisionReason } from '../types.js';

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

  constructor(parts: Pick<Fallback, 'settings' | 'local' | 'reserved' | 'recovery' | 'breaker' | 'now' | 'reconcile' | 'blockMs'>) {
    ({
      settings: this.settings,
      local: this.local,
      reserved: this.reserved,
      recovery: this.recovery,
      breaker: this.breaker,
      now: this.now,
      reconcile: this.reconcile,
      blockMs: this.blockMs,
    } = parts);
  }

  /** `limit()`'s answer, for a call of `limit` (`Settings.limitOf`), at `now` (the caller's reading of the clock, if it has one). */
  one(key: string, cost: number, id: CallId, reason: DecisionReason, limit: number, now = this.now()): LimiterDecision {
    const mode = this.settings.fallbackMode(now);
    if (mode !== 'local') return fixedDecision(mode === 'fail-open', mode, reason, now, limit, this.breaker.resetTimeoutMs, id);
    const share = this.settings.localShareOf(limit, now);
    // A lease ended, and a tenth of the share is none.
    if (share === 0) return fixedDecision(false, 'fail-closed', reason, now, limit, this.breaker.resetTimeoutMs, id);
    if (mayBeLost(reason)) this.settings.lost(this.local);
    const journalled = this.#journals(reason);
    // A journalled call keeps its id in the local window even if it was never sent to Redis: once
    // written back it is in Redis, so a re-seed after Redis lost its data writes it again (counted
    // once). A generated id of a call not journalled was never in Redis: kept negated, for refund()
    // alone, never re-seeded (see `CallId`).
    const kept = journalled || typeof id === 'string' ? id : -id;
    const d = this.local.main[decide](key, cost, kept, now, this.reserved.of(key), share, this.blockMs, limit);
    if (d.allowed && journalled) {
      this.recovery.add(key, now, cost, id);
      // Its Redis call was sent and not answered: Redis may have run it.
      if (reason === 'timeout' || reason === 'redis-error') this.recovery.markUnanswered(key, memberOf(id));
    }
    return localDecision(d, reason, id);
  }

  /** `limitAll()`'s answer: in `'local'`, all or nothing on local windows of each limit's share. */
  all(items: readonly CheckedItem[], id: CallId, reason: DecisionReason): LimitAllDecision {
    const now = this.now();
    const mode = this.settings.fallbackMode(now);
    if (mode !== 'local')
      return combine(
        items.map((item) => this.#fixed(mode, reason, now, item.limit)),
        mode,
        reason,
      );
    const share = (item: CheckedItem): number => this.settings.fallbackShareOf(item.limit, now, true);
    if (items.some((item) => share(item) === 0))
      return combine(
        items.map((item) => this.#fixed('fail-closed', reason, now, item.limit)),
        'fail-closed',
        reason,
      );
    if (mayBeLost(reason)) this.settings.lost(this.local);
    const journalled = this.#journals(reason);
    const kept = journalled || typeof id === 'string' ? id : undefined;
    const idFor = (item: CheckedItem): CallId | undefined => (kept === undefined ? undefined : itemId(kept, item));
    // First every window is asked (the same key twice counts its earlier costs), then all consume, or none.
    const before = new Map<string, number>();
    const views = items.map((item) => {
      const earlier = before.get(item.group) ?? 0;
      before.set(item.group, earlier + item.cost);
      const reserved = this.reserved.of(item.group) + earlier;
      return this.local.forWindow(item.windowMs)[inspect](item.key, item.cost, idFor(item), now, reserved, share(item), item.limit);
    });
    let decisions = views;
    if (views.every((d) => d.allowed)) {
      decisions = items.map((item) => {
        const itemCallId = idFor(item);
        const d = this.local
          .forWindow(item.windowMs)
          [decide](item.key, item.cost, itemCallId, now, this.reserved.of(item.group), share(item), 0, item.limit);
        if (d.allowed && journalled && itemCallId !== undefined) {
          this.recovery.add(item.key, now, item.cost, itemCallId, item.windowMs);
        }
        return d;
      });
    }
    return combine(
      decisions.map((d) => localDecision(d, reason)),
      'local',
      reason,
    );
  }

  /** `peek()`'s answer: what a call of cost 1 and `limit` would get, consuming nothing. */
  peek(key: string, reason: DecisionReason, limit: number): LimitDecision {
    const now = this.now();
    const mode = this.settings.fallbackMode(now);
    if (mode !== 'local') return this.#fixed(mode, reason, now, limit);
    const share = this.settings.fallbackShareOf(limit, now);
    if (share === 0) return this.#fixed('fail-closed', reason, now, limit);
    if (mayBeLost(reason)) this.settings.lost(this.local);
    return localDecision(this.local.main[inspect](key, 1, undefined, now, this.reserved.of(key), share, limit), reason);
  }

  /** The fixed answer of mode `'fail-open'` (admit) or `'fail-closed'` (refuse until the breaker's open period has passed). */
  #fixed(mode: 'fail-open' | 'fail-closed', reason: DecisionReason, now: number, limit: number): LimitDecision {
    return fixedDecision(mode === 'fail-open', mode, reason, now, limit, this.breaker.resetTimeoutMs);
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
