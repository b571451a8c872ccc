import type { PendingCall } from '../../base/wire.js';
import { memberOf } from '../../base/call.js';
import { loadScript } from './script.js';

/** `lua/reconcile.lua`: writes journalled calls into one window (KEYS, ARGV and the reply in its header). */
export const reconcileScript = loadScript('reconcile');

export type { WriteBackReply } from '../../base/wire.js';

/** A write-back of journalled calls into one window (see `WindowModel.writeBack`). */
export type WriteBackAsk = {
  readonly windowMs: number;
  /** The script's `nowMs`: the window's clock, or '' for Redis's `TIME`. */
  readonly nowArg: number | '';
  readonly calls: readonly PendingCall[];
  /** A call's time on Redis's clock, from its local one. */
  readonly redisAt: (at: number) => number;
};

/**
 * The arguments of a write-back of `calls` into a window of `windowMs`: `nowArg` Redis's clock
 * injected, or '' (the script reads it); each call at `redisAt(call.at)` (whole ms on Redis's clock),
 * with its cost and its own id (a batch Redis ran before its reply was lost is a no-op when sent again).
 */
export function reconcileArgs(ask: WriteBackAsk): (string | number)[] {
  const { windowMs, nowArg, calls, redisAt } = ask;
  const args: (string | number)[] = [windowMs, nowArg];
  for (const call of calls) args.push(redisAt(call.at), call.cost, memberOf(call.id));
  return args;
}
