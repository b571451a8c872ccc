import type { PendingCall } from '../../base/wire.js';
import { memberOf } from '../../base/call.js';
import { loadScript } from './script.js';

/** `lua/reconcile.lua`: writes journalled calls into one window (KEYS, ARGV and the reply in its header). */
export const reconcileScript = loadScript('reconcile');

export type { WriteBackReply } from '../../base/wire.js';

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
