import type { RedisMs } from '../../base/time.js';
import { loadScript, replyIntegers, type Script } from './script.js';

/** `lua/limit-all.lua`: takes, gives back or checks the windows of one `limitAll()` group (KEYS, ARGV and the reply in its header). */
export const limitAllScript = loadScript('limit-all');

/** The script's arguments for `op` over a group. */
export function limitAllArgs(ask: {
  readonly op: 'take' | 'give' | 'check';
  readonly items: readonly { readonly limit: number; readonly windowMs: number; readonly cost: number }[];
  readonly id: string;
  readonly nowArg: string | number;
  readonly notAfterArg: string | number;
  /** Permits of a limit to leave free (see `Settings.reserveOf`); the cost always fits. */
  readonly reserve: (limit: number) => number;
}): (string | number)[] {
  const { op, items: group, id, nowArg, notAfterArg: notAfter, reserve } = ask;
  const args: (string | number)[] = [op, nowArg, notAfter, id];
  for (const item of group) args.push(Math.max(item.limit - reserve(item.limit), item.cost, 1), item.windowMs, item.cost);
  return args;
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
