import type { CheckedItem } from '../../path/limitAll.js';
import type { RedisMs } from '../../time.js';
import { loadScript, replyIntegers, type Script } from './script.js';
import { slicedWindow } from './slicedWindow.js';

/** `lua/limit-all.lua`: takes, gives back or checks the windows of one `limitAll()` group (KEYS, ARGV and the reply in its header). */
export const limitAllScript = loadScript('limit-all');

/** The script's arguments for `op` over a group. */
export function limitAllArgs(
  op: 'take' | 'give' | 'check',
  group: readonly CheckedItem[],
  id: string,
  nowArg: string | number,
  notAfter: string | number,
  /** Permits of a limit to leave free (see `Settings.reserveOf`); the cost always fits. */
  reserve: (limit: number) => number = () => 0,
): (string | number)[] {
  const args: (string | number)[] = [op, nowArg, notAfter, id];
  for (const item of group) args.push(Math.max(item.limit - reserve(item.limit), item.cost, 1), item.windowMs, item.cost);
  return args;
}

/**
 * The arguments of `lua/sliced-window.lua`'s op "a" (a take or a check) for a group of windows counted
 * by slices, as {@link limitAllArgs} (no id: the slices name no call).
 */
function slicedAllArgs(
  op: 'take' | 'check',
  group: readonly CheckedItem[],
  nowArg: string | number,
  notAfter: string | number,
  reserve: (limit: number) => number = () => 0,
): (string | number)[] {
  const args: (string | number)[] = ['a', '', '', nowArg, op, notAfter];
  for (const item of group)
    args.push(Math.max(item.limit - reserve(item.limit), item.cost, 1), item.windowMs, item.resolutionMs as number, item.cost);
  return args;
}

/** The arguments of `lua/sliced-window.lua`'s op "g": gives back what a take of the group at `takenMs` (its reply's nowMs) added. */
function slicedGiveArgs(group: readonly CheckedItem[], nowArg: string | number, takenMs: RedisMs): (string | number)[] {
  const args: (string | number)[] = ['g', '', '', nowArg];
  for (const item of group) {
    const res = item.resolutionMs as number;
    args.push(item.windowMs, res, Math.floor(takenMs / res), item.cost);
  }
  return args;
}

/**
 * The script and arguments of one call for a group of `limitAll()`'s windows (sharing a slot): exact
 * logs by `lua/limit-all.lua`, windows counted by slices by `lua/sliced-window.lua`'s ops "a" and "g"
 * (a give needs `takenMs`, the nowMs of the take's reply: the slice it took from).
 */
export function groupCall(
  op: 'take' | 'give' | 'check',
  group: readonly CheckedItem[],
  id: string,
  nowArg: string | number,
  notAfter: string | number,
  reserve: (limit: number) => number,
  takenMs?: RedisMs,
): { script: Script; args: (string | number)[] } {
  if (group[0]?.resolutionMs === undefined) return { script: limitAllScript, args: limitAllArgs(op, group, id, nowArg, notAfter, reserve) };
  if (op === 'give') return { script: slicedWindow, args: slicedGiveArgs(group, nowArg, takenMs as RedisMs) };
  return { script: slicedWindow, args: slicedAllArgs(op, group, nowArg, notAfter, reserve) };
}

/** Per-item results of a take or a check. */
export type GroupReply = {
  nowMs: RedisMs;
  admitted: boolean;
  items: { fits: boolean; remaining: number; retryAfterMs: number; resetAtMs: number; duplicate: boolean }[];
};

/** Reads the reply of `lua/limit-all.lua` (or of sliced-window.lua's op "a": `script`) for a take or a check of `count` items. */
export function readLimitAll(reply: unknown, count: number, script: Script = limitAllScript): GroupReply {
  const values = replyIntegers(script, reply, 3 + 5 * count);
  const items: GroupReply['items'] = [];
  for (let i = 3; i < values.length; i += 5) {
    items.push({
      fits: values[i] === 1,
      remaining: values[i + 1] as number,
      retryAfterMs: values[i + 2] as number,
      resetAtMs: values[i + 3] as number,
      duplicate: values[i + 4] === 1,
    });
  }
  return { nowMs: values[0] as RedisMs, admitted: values[2] === 1, items };
}
