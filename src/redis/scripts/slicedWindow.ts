import { loadScript } from './script.js';
import type { RedisMs } from '../../base/time.js';
import type { WriteBackAsk } from './reconcile.js';
import { sharedLimit, type BatchAsk } from './slidingWindow.js';

/**
 * `lua/sliced-window.lua`: the window counted by time slices (`resolutionMs`), one hash per key:
 * decides a batch of calls (op `d`), writes journalled calls back (`w`), blocks a key (`b`), gives
 * permits back (`f`), resets a key (`r`). KEYS, ARGV and the replies are in its header; the
 * decisions' reply is sliding-window.lua's.
 */
export const slicedWindow = loadScript('sliced-window');

/** The arguments every op starts with. */
function head(op: 'd' | 'w' | 'b' | 'f' | 'r', windowMs: number, resolutionMs: number, nowArg: number | ''): (string | number)[] {
  return [op, windowMs, resolutionMs, nowArg];
}

/**
 * The arguments of a decision of `calls` (op `d`): the usual batch, of cost 1 under one limit,
 * sends that limit once; else a limit and a cost per call. No id: a slice counts calls.
 */
export function slicedArgs(resolutionMs: number, ask: BatchAsk): (string | number)[] {
  const { windowMs, nowArg, notAfterArg, blockMs, calls, effective } = ask;
  const args = head('d', windowMs, resolutionMs, nowArg);
  args.push(notAfterArg, blockMs);
  const shared = sharedLimit(calls, effective);
  if (shared !== undefined) {
    args.push(shared);
  } else {
    args.push('');
    for (const [i, call] of calls.entries()) args.push(effective[i] as number, call.cost);
  }
  return args;
}

/** The arguments of a write-back of journalled `calls` (op `w`), each at `redisAt(call.at)` with its cost. */
export function slicedWriteBackArgs(resolutionMs: number, ask: WriteBackAsk): (string | number)[] {
  const { windowMs, nowArg, calls, redisAt } = ask;
  const args = head('w', windowMs, resolutionMs, nowArg);
  for (const call of calls) args.push(redisAt(call.at), call.cost);
  return args;
}

/** The arguments of a block of `ms` (op `b`; 0 lifts it). */
export function slicedBlockArgs(windowMs: number, resolutionMs: number, nowArg: number | '', ms: number): (string | number)[] {
  const args = head('b', windowMs, resolutionMs, nowArg);
  args.push(ms);
  return args;
}

/**
 * The id a decision of a window counted by slices gives an admitted call: its own, then `@` and its
 * slice (floor(nowMs / resolutionMs)), which `refund()` needs to find the call's permits. A generated
 * id holds no `@` (a caller's own id is refused with slices).
 */
export function slicedId(id: string, nowMs: number, resolutionMs: number): string {
  return `${id}@${Math.floor(nowMs / resolutionMs)}`;
}

/** The id and the slice of an id {@link slicedId} made; slice undefined for any other id. */
export function splitSlicedId(id: string): { readonly id: string; readonly slice: number | undefined } {
  const at = id.lastIndexOf('@');
  const slice = at < 1 ? Number.NaN : Number(id.slice(at + 1));
  return Number.isSafeInteger(slice) && slice >= 0 && String(slice) === id.slice(at + 1)
    ? { id: id.slice(0, at), slice }
    : { id, slice: undefined };
}

/** The arguments of a refund (op `f`): a slice, a cost (1 when unknown) and an id per call (`calls`: those with a slice). */
export function slicedRefundArgs(
  windowMs: number,
  resolutionMs: number,
  nowArg: number | '',
  calls: readonly { readonly slice: number; readonly cost: number | undefined; readonly id: string }[],
): (string | number)[] {
  const args = head('f', windowMs, resolutionMs, nowArg);
  for (const call of calls) args.push(call.slice, call.cost ?? 1, call.id);
  return args;
}

/** The arguments of a reset (op `r`). */
export function slicedResetArgs(windowMs: number, resolutionMs: number, nowArg: number | ''): (string | number)[] {
  return head('r', windowMs, resolutionMs, nowArg);
}

/** One of `limitAll()`'s windows counted by slices. */
export type SlicedItem = {
  readonly limit: number;
  readonly windowMs: number;
  readonly cost: number;
  /** Its window's model: slices of `resolutionMs`. */
  readonly model: { readonly resolutionMs: number };
};

/**
 * The arguments of `lua/sliced-window.lua`'s op "a" (a take or a check) for a group of windows counted
 * by slices, as `limitAllArgs` (no id: the slices name no call).
 */
export function slicedAllArgs(ask: {
  readonly op: 'take' | 'check';
  readonly items: readonly SlicedItem[];
  readonly nowArg: string | number;
  readonly notAfterArg: string | number;
  readonly reserve: (limit: number) => number;
}): (string | number)[] {
  const { op, items: group, nowArg, notAfterArg: notAfter, reserve } = ask;
  const args: (string | number)[] = ['a', '', '', nowArg, op, notAfter];
  for (const item of group)
    args.push(Math.max(item.limit - reserve(item.limit), item.cost, 1), item.windowMs, item.model.resolutionMs, item.cost);
  return args;
}

/** The arguments of `lua/sliced-window.lua`'s op "g": gives back what a take of the group at `takenMs` (its reply's nowMs) added. */
export function slicedGiveArgs(group: readonly SlicedItem[], nowArg: string | number, takenMs: RedisMs): (string | number)[] {
  const args: (string | number)[] = ['g', '', '', nowArg];
  for (const item of group) {
    const res = item.model.resolutionMs;
    args.push(item.windowMs, res, Math.floor(takenMs / res), item.cost);
  }
  return args;
}
