import { combine, decided, type LimitAllDecision, type LimitDecision } from './decisions.js';
import type { Parts, PathCall } from './parts.js';
import { memberOf, type SentId } from '../base/call.js';
import { itemId, type CheckedItem } from '../redis/allWindows.js';
import { bySlot } from '../redis/redisKey.js';
import type { RedisMs } from '../base/time.js';
import type { DecisionReason } from '../types.js';
import { readLimitAll, type GroupReply } from '../redis/scripts/limitAll.js';
import { redisCallError } from '../redis/failures.js';
import type { RedisTier } from '../redis/RedisTier.js';

type ItemReply = GroupReply['items'][number];

/** What Redis said of a `limitAll()` call: one reply per item, and whether a window refused. */
type AllReply = { replies: Map<CheckedItem, ItemReply>; refused: boolean; nowMs: RedisMs | undefined; givenBack: Set<CheckedItem> };

/**
 * A call of `limitAll()` on the decision path. On a single Redis, or when the keys share a hash
 * slot, one script call decides every window atomically. On a Cluster with keys on several slots,
 * the slots are decided one after another (in slot order); after a refusal the others are only
 * checked, and the permits taken on the earlier slots are given back (best effort: a give that
 * fails leaves those permits used, over-counting, never under).
 */
export class AllCall implements PathCall<AllReply, LimitAllDecision> {
  /** The groups taken so far, with their take's nowMs (a give of slices needs it). */
  readonly #taken: { group: readonly CheckedItem[]; nowMs: RedisMs }[] = [];

  constructor(
    readonly parts: Parts,
    readonly items: readonly CheckedItem[],
    readonly id: SentId,
    readonly now: number,
  ) {}

  reserve(sign: 1 | -1): void {
    for (const item of this.items) this.parts.reserved.add(item.group, sign * item.cost);
  }

  async ask(): Promise<AllReply> {
    const { tier } = this.parts;
    const id = memberOf(this.id);
    const groups = tier.isCluster ? bySlot(this.items, (item) => item.redisKey) : [this.items];
    try {
      const replies = new Map<CheckedItem, ItemReply>();
      let refused = false;
      let nowMs: RedisMs | undefined;
      for (const group of groups) {
        // After a refusal nothing more is taken: the other slots are only asked how they stand.
        const reply = await sendGroup(tier, { op: refused ? 'check' : 'take', group, id });
        nowMs = reply.nowMs;
        for (const [i, item] of group.entries()) replies.set(item, reply.items[i] as ItemReply);
        if (!refused) {
          if (reply.admitted) this.#taken.push({ group, nowMs: reply.nowMs });
          else refused = true;
        }
      }
      const givenBack = new Set(refused ? this.#taken.flatMap((t) => t.group) : []);
      if (refused) await this.#giveBack(id);
      return { replies, refused, nowMs, givenBack };
    } catch (error) {
      await this.#giveBack(id);
      throw error;
    }
  }

  settle({ replies, refused, nowMs, givenBack }: AllReply): LimitAllDecision {
    const { parts } = this;
    const { settings, offset } = parts;
    const decisions = this.items.map((item): LimitDecision => {
      const r = replies.get(item) as ItemReply;
      const back = givenBack.has(item) && !r.duplicate;
      const remaining = back ? Math.min(r.remaining + item.cost, item.limit) : r.remaining;
      // As for limit(): each local window learns this instance's part of its window, and, warm
      // standby, holds the calls Redis admitted, for as long as Redis counts them (the offset was
      // learnt from this very round trip: no drift to allow for). Redis counted at least
      // `limit - remaining` permits (more while Settings.reserveOf leaves some free: its reply is of
      // the limit it was sent).
      const admitted =
        refused || nowMs === undefined || r.duplicate
          ? undefined
          : { at: offset.localOf(item.model.countedFrom(nowMs)), cost: item.cost, id: itemId(this.id, item) };
      const share = settings.itemShareOf(item.limit);
      parts.local.forWindow(item.windowMs).observe(item.key, item.limit - remaining, item.limit, settings.instances, share, admitted);
      return decided(r, item.limit, remaining);
    });
    parts.recovery.schedule();
    return combine(decisions, 'redis', 'decided');
  }

  fallback(reason: DecisionReason): LimitAllDecision {
    return this.parts.fallback.all(this.items, this.id, reason);
  }

  async #giveBack(id: string): Promise<void> {
    for (const { group, nowMs } of this.#taken.splice(0))
      await sendGroup(this.parts.tier, { op: 'give', group, id, takenMs: nowMs }).catch(() => undefined);
  }
}

/** One script call of `limitAll()` (see `sendGroup`): a group of windows sharing a slot; a give names its take's nowMs. */
type GroupSend =
  | { readonly op: 'take' | 'check'; readonly group: readonly CheckedItem[]; readonly id: string }
  | { readonly op: 'give'; readonly group: readonly CheckedItem[]; readonly id: string; readonly takenMs: RedisMs };

/** One script call for a group of `limitAll()`'s windows sharing a slot, by the limiter's model. */
function sendGroup(tier: RedisTier, send: GroupSend & { readonly op: 'take' | 'check' }): Promise<GroupReply>;
function sendGroup(tier: RedisTier, send: GroupSend & { readonly op: 'give' }): Promise<unknown>;
function sendGroup(tier: RedisTier, send: GroupSend): Promise<unknown> {
  const { op, group, id } = send;
  const takenMs = send.op === 'give' ? send.takenMs : undefined;
  return tier.call(group.length, (sentNow) => {
    // A late give-back only removes what its take added: no staleness guard.
    const notAfter = op === 'give' ? undefined : tier.notAfter(sentNow);
    const notAfterArg = notAfter === undefined ? '' : Math.ceil(notAfter);
    const { script, args } = tier.window.model.group({
      op,
      items: group,
      id,
      nowArg: tier.nowArg(),
      notAfterArg,
      reserve: tier.reserve,
      takenMs,
    });
    const keys = group.map((item) => item.redisKey);
    return tier.port.run(script, keys, args).then(
      (reply) => {
        if (op === 'give') return reply;
        const read = readLimitAll(reply, group.length, script);
        tier.learnOffset(sentNow, read.nowMs);
        return read;
      },
      (error: unknown) => Promise.reject(redisCallError(error)),
    );
  });
}
