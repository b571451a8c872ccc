import { loadScript, replyIntegers } from './script.js';
import type { ResilimitError } from '../../base/errors.js';
import { decisionsOf, type BatchCall, type BatchDecision } from './slidingWindow.js';

/** The decision of the call that asked for a lease, with the permits granted (its cost included; 0 when refused). */
export type LeaseDecision = BatchDecision & { readonly granted: number };

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
  /** The limit Redis decides it against: the call's, less the permits left free for silent instances (as a batch's). */
  readonly effective: number;
};

/** Op t's arguments (see the script's header). */
export function takeArgs(windowMs: number, nowArg: number | '', notAfterArg: number | '', blockMs: number, ask: LeaseAsk) {
  const { call, want, validityMs, divisor, leaseId, effective } = ask;
  return ['t', windowMs, nowArg, leaseId, notAfterArg, blockMs, effective, call.cost, Math.max(want, call.cost), validityMs, divisor];
}

/** Op g's arguments. */
export function giveArgs(windowMs: number, nowArg: number | '', leaseId: string, granted: number, unused: number) {
  return ['g', windowMs, nowArg, leaseId, granted, unused];
}

/** Op t's reply: the decision of the call that asked (as sliding-window.lua's) with the permits granted, or the error of a key of another type. */
export function readTake(reply: unknown, ask: LeaseAsk): [LeaseDecision | ResilimitError] {
  const values = replyIntegers(leaseScript, reply, 8);
  const [outcome] = decisionsOf(values, [ask.call], [ask.effective]);
  return [outcome instanceof Error ? outcome : Object.assign(outcome as BatchDecision, { granted: values[7] as number })];
}
