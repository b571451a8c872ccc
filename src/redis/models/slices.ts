import type { RedisPort } from '../../client/port.js';
import { invalidOption } from '../../base/errors.js';
import type { RedisKey, RedisMs } from '../../base/time.js';
import type { PendingCall } from '../../base/wire.js';
import { MAX_SLICES } from '../../options/windowOptions.js';
import { allKey } from '../allWindows.js';
import { redisCallError } from '../failures.js';
import { redisKey } from '../redisKey.js';
import { readRefund } from '../scripts/refund.js';
import {
  slicedAllArgs,
  slicedArgs,
  slicedBlockArgs,
  slicedGiveArgs,
  slicedId,
  slicedRefundArgs,
  slicedResetArgs,
  slicedWindow,
  slicedWriteBackArgs,
  type SlicedItem,
  splitSlicedId,
} from '../scripts/slicedWindow.js';
import type { DecideAsk, GroupAsk, NowArg, RefundAsk, ScriptArgs, WindowModel } from './WindowModel.js';

/**
 * A window counted by time slices of `resolutionMs`: one hash per key, a count per slice
 * (lua/sliced-window.lua). Its size does not grow with the limit; a call counts until the end of its
 * slice plus the window (docs/resolution.md). A slice counts calls and cannot name them: a caller's
 * `id` is refused, and the id Redis gives an admitted call carries its slice (`refund()` needs it).
 */
class Slices implements WindowModel {
  readonly name: string;
  readonly namesCalls = false;

  /** `slices`: how many a window is cut in, kept for `limitAll()`'s windows of other lengths. */
  constructor(
    readonly resolutionMs: number,
    readonly slices: number,
  ) {
    this.name = `slices of ${resolutionMs} ms`;
  }

  /** `<prefix>{<escaped key>}:s<resolutionMs>`, in the key's slot. */
  keyOf(prefix: string, key: string): RedisKey {
    return `${redisKey(prefix, key)}:s${this.resolutionMs}` as RedisKey;
  }

  /** As many slices as `limit()`'s window, of at least 1 ms: `…:w<windowMs>:s<resolutionMs>`. */
  allWindow(prefix: string, key: string, windowMs: number): { readonly redisKey: RedisKey; readonly model: WindowModel } {
    const resolutionMs = Math.max(1, Math.ceil(windowMs / this.slices));
    const model = resolutionMs === this.resolutionMs ? this : new Slices(resolutionMs, this.slices);
    return { redisKey: `${allKey(prefix, key, windowMs)}:s${resolutionMs}` as RedisKey, model };
  }

  decide(ask: DecideAsk): ScriptArgs {
    return { script: slicedWindow, args: slicedArgs(this.resolutionMs, ask) };
  }

  group(ask: GroupAsk): ScriptArgs {
    // Every item of a group is one of this limiter's limitAll() windows: its model is slices, of its own length.
    const items = ask.items as unknown as readonly SlicedItem[];
    if (ask.op === 'give') return { script: slicedWindow, args: slicedGiveArgs(items, ask.nowArg, ask.takenMs as RedisMs) };
    return { script: slicedWindow, args: slicedAllArgs({ ...ask, op: ask.op, items }) };
  }

  writeBack(ask: { windowMs: number; nowArg: NowArg; calls: readonly PendingCall[]; redisAt: (at: number) => number }): ScriptArgs {
    return { script: slicedWindow, args: slicedWriteBackArgs(this.resolutionMs, ask) };
  }

  block(redis: RedisPort, ask: { redisKey: RedisKey; windowMs: number; nowArg: NowArg; ms: number }): Promise<unknown> {
    return redis.run(slicedWindow, [ask.redisKey], slicedBlockArgs(ask.windowMs, this.resolutionMs, ask.nowArg, ask.ms));
  }

  /** Slices remember the reset: a refund of a call from before it gives nothing (lua/sliced-window.lua, op r). */
  async reset(redis: RedisPort, ask: { redisKey: RedisKey; windowMs: number; nowArg: NowArg }): Promise<void> {
    await redis.run(slicedWindow, [ask.redisKey], slicedResetArgs(ask.windowMs, this.resolutionMs, ask.nowArg));
  }

  /** A call without a slice in its id gives nothing back. */
  async refund(
    redis: RedisPort,
    ask: { redisKey: RedisKey; windowMs: number; nowArg: NowArg; calls: readonly RefundAsk[] },
  ): Promise<number[]> {
    const slices = ask.calls.map((call) => splitSlicedId(call.id).slice);
    const sent = ask.calls.flatMap((call, i) => {
      const slice = slices[i];
      return slice === undefined ? [] : [{ slice, cost: call.cost, id: call.id }];
    });
    if (sent.length === 0) return ask.calls.map(() => 0);
    const hash = ask.redisKey;
    let reply: unknown;
    try {
      reply = await redis.run(slicedWindow, [hash, `${hash}:f`], slicedRefundArgs(ask.windowMs, this.resolutionMs, ask.nowArg, sent));
    } catch (error) {
      throw redisCallError(error);
    }
    const permits = readRefund(reply, sent.length);
    let next = 0;
    return slices.map((slice) => (slice === undefined ? 0 : (permits[next++] as number)));
  }

  redisId(id: string, nowMs: number): string {
    return slicedId(id, nowMs, this.resolutionMs);
  }

  ownId(redisId: string): string {
    return splitSlicedId(redisId).id;
  }

  checkCallerId(id: unknown): void {
    throw invalidOption(
      'id',
      `absent with resolutionMs (${this.resolutionMs} ms): a window counted by slices does not name calls, so a call re-sent under its id would count twice`,
      id,
    );
  }

  /** The end of the call's slice: Redis counts it until then plus the window. */
  countedFrom(nowMs: RedisMs): RedisMs {
    const res = this.resolutionMs;
    return ((Math.floor(nowMs / res) + 1) * res) as RedisMs;
  }

  /** The window keeps its slices: it must still be cut into at most MAX_SLICES. */
  checkWindow(windowMs: number): void {
    const res = this.resolutionMs;
    if (windowMs < res || windowMs / res > MAX_SLICES) {
      throw invalidOption(
        'windowMs',
        `from ${res} to ${res * MAX_SLICES} ms with resolutionMs ${res} (at most ${MAX_SLICES} slices a window)`,
        windowMs,
      );
    }
  }
}

/** Slices of `resolutionMs` for a window of `windowMs` (checked by the options). */
export function slices(resolutionMs: number, windowMs: number): WindowModel {
  return new Slices(resolutionMs, Math.ceil(windowMs / resolutionMs));
}
