import { loadScript, replyIntegers } from './script.js';
import { readDecisions, type BatchCall, type BatchOutcome } from './slidingWindow.js';

/** `lua/lease.lua`: permits of a hot key taken ahead (op t) and the unused part given back (op g). */
export const leaseScript = loadScript('lease');

/** What a lease asks: the call that asks it, the permits wanted, how long it may be used, and the room it leaves the others. */
export type LeaseAsk = {
  readonly call: BatchCall;
  readonly want: number;
  readonly validityMs: number;
  /** A lease takes at most the free permits divided by this beyond the call's cost. */
  readonly divisor: number;
  readonly leaseId: string;
};

/** Op t's arguments (see the script's header). */
export function takeArgs(windowMs: number, nowArg: number | '', notAfterArg: number | '', blockMs: number, ask: LeaseAsk, limit: number) {
  const { call, want, validityMs, divisor, leaseId } = ask;
  return ['t', windowMs, nowArg, leaseId, notAfterArg, blockMs, limit, call.cost, Math.max(want, call.cost), validityMs, divisor];
}

/** Op g's arguments. */
export function giveArgs(windowMs: number, nowArg: number | '', leaseId: string, granted: number, unused: number) {
  return ['g', windowMs, nowArg, leaseId, granted, unused];
}

/** Op t's reply: the decision of the call that asked (as sliding-window.lua's), and the permits granted (0 when refused). */
export function readTake(reply: unknown, ask: LeaseAsk, limit: number): { outcome: BatchOutcome; granted: number } {
  const values = replyIntegers(leaseScript, reply, 8);
  const granted = values[7] as number;
  const [outcome] = readDecisions(values.slice(0, 7).join(','), [ask.call], [limit], leaseScript) as [BatchOutcome];
  return { outcome, granted };
}
