import type { RedisPort } from '../../client/port.js';
import type { RedisKey, RedisMs } from '../../base/time.js';
import type { PendingCall } from '../../base/wire.js';
import { allKey } from '../allWindows.js';
import { redisCallError } from '../failures.js';
import { redisKey } from '../redisKey.js';
import { blockArgs, blockScript } from '../scripts/block.js';
import { limitAllArgs, limitAllScript } from '../scripts/limitAll.js';
import { reconcileArgs, reconcileScript } from '../scripts/reconcile.js';
import { readRefund, refundArgs, refundScript } from '../scripts/refund.js';
import { slidingWindow, slidingWindowArgs } from '../scripts/slidingWindow.js';
import type { DecideAsk, GroupAsk, NowArg, RefundAsk, ScriptArgs, WindowModel } from './WindowModel.js';

/**
 * The exact log: one sorted set per key, a member per admitted call (`<cost>*<id>`, scored at its
 * time), the sum member `*` and the block member `*!` (lua/sliding-window.lua). Exact at every instant;
 * it names every call, so a caller's `id` is kept and a call re-sent under it counts once.
 */
class ExactLog implements WindowModel {
  readonly name = 'exact log';
  readonly namesCalls = true;

  keyOf(prefix: string, key: string): RedisKey {
    return redisKey(prefix, key);
  }

  allWindow(prefix: string, key: string, windowMs: number): { readonly redisKey: RedisKey; readonly model: WindowModel } {
    return { redisKey: allKey(prefix, key, windowMs), model: this };
  }

  decide(ask: DecideAsk): ScriptArgs {
    return {
      script: slidingWindow,
      args: slidingWindowArgs(ask),
    };
  }

  group(ask: GroupAsk): ScriptArgs {
    return { script: limitAllScript, args: limitAllArgs(ask) };
  }

  writeBack(ask: { windowMs: number; nowArg: NowArg; calls: readonly PendingCall[]; redisAt: (at: number) => number }): ScriptArgs {
    return { script: reconcileScript, args: reconcileArgs(ask) };
  }

  block(redis: RedisPort, ask: { redisKey: RedisKey; nowArg: NowArg; ms: number }): Promise<unknown> {
    return redis.run(blockScript, [ask.redisKey], blockArgs(ask.nowArg, ask.ms));
  }

  async reset(redis: RedisPort, ask: { redisKey: RedisKey }): Promise<void> {
    await redis.del(ask.redisKey);
  }

  async refund(
    redis: RedisPort,
    ask: { redisKey: RedisKey; windowMs: number; nowArg: NowArg; calls: readonly RefundAsk[] },
  ): Promise<number[]> {
    let reply: unknown;
    try {
      reply = await redis.run(refundScript, [ask.redisKey], refundArgs(ask.windowMs, ask.nowArg, ask.calls));
    } catch (error) {
      throw redisCallError(error);
    }
    return readRefund(reply, ask.calls.length);
  }

  redisId(id: string): string {
    return id;
  }

  ownId(redisId: string): string {
    return redisId;
  }

  checkCallerId(): void {}

  countedFrom(nowMs: RedisMs): RedisMs {
    return nowMs;
  }

  checkWindow(): void {}
}

/** The exact log (one for every window: it holds no state). */
export const exactLog: WindowModel = new ExactLog();
