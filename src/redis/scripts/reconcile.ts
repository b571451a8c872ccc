import type { PendingCall } from '../../recovery/PendingCalls.js';
import { memberOf } from '../../options/input.js';
import { loadScript } from './script.js';

/** `lua/reconcile.lua`: writes journalled calls into one window (KEYS, ARGV and the reply in its header). */
export const reconcileScript = loadScript('reconcile');

/** What a write-back of a batch did: calls written, expired (left the window already) and present (Redis had them). */
export type WriteBackReply = [written: number, expired: number, present: number];

/**
 * The arguments of a write-back of `calls` into a window of `windowMs`: `nowArg` Redis's clock
 * injected, or '' (the script reads it); each call at `redisAt(call.at)` (whole ms on Redis's clock),
 * with its cost and its own id (a batch Redis ran before its reply was lost is a no-op when sent again).
 */
export function reconcileArgs(
  windowMs: number,
  nowArg: number | '',
  calls: readonly PendingCall[],
  redisAt: (at: number) => number,
): (string | number)[] {
  const args: (string | number)[] = [windowMs, nowArg];
  for (const call of calls) args.push(redisAt(call.at), call.cost, memberOf(call.id));
  return args;
}
