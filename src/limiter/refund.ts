import type { Parts } from '../path/parts.js';
import { knownOptions } from '../base/checks.js';
import { ErrorCode, isResilimitError } from '../base/errors.js';
import { checkCost, checkGivenId, checkKey, isLocalOnly, sameCall, seqOf } from '../base/call.js';
import { MAX_INT } from '../options/options.js';

/**
 * Options of `refund()`. `cost`: the call's cost, when this instance may not know it (a call another
 * instance admitted, or one its local window no longer holds): Redis finds a call by its id and cost,
 * never by scanning the key, so a call of cost > 1 whose cost neither this instance nor the caller
 * gives is not found (`refunded: false`). Integer 1 … 2^31 − 1.
 */
export type RefundOptions = { readonly cost?: number };

/**
 * What `refund()` did. Refunding a call twice, or an id that is not in the window, gives nothing
 * back: `refunded: false`, `permits: 0`.
 */
export type RefundResult = {
  /**
   * True when the call's permits came back: Redis removed it from its window, or, when Redis could
   * not answer (`pending`), this instance's local window or journal held it and gave it back.
   */
  refunded: boolean;
  /** The permits given back: the call's cost, 0 when `refunded` is false. */
  permits: number;
  /**
   * True when Redis could not answer (breaker open, timeout, client not connected): Redis's window may
   * still hold the call, and its removal is kept to be written once Redis answers again (before it
   * decides again), as the journal is. False when Redis answered, and for a call admitted locally that
   * never reached Redis.
   */
  pending: boolean;
};

/**
 * `ResilientLimiter.refund()`: gives back the permits of the call of `key` admitted under `id` (its
 * decision's `id`), in `limit()`'s window. The local side first, at once whatever Redis does: the call
 * leaves the journal (it will not be written back) and the warm window, and the key's denial leaves the
 * deny cache. Then Redis's window, one script call through the breaker, the call's cost as the local
 * window knew it (or the caller's `cost`) sent as a hint: Redis's answer is the result. When Redis cannot answer, the removal
 * is kept (`PendingRefunds`) and the result says what the local side gave back. A call never sent
 * to Redis (journalled and not yet written back, or admitted locally and never to be) needs no Redis
 * call. (One whose Redis call missed its deadline, then ran there, and was admitted locally under the
 * same id counts in Redis until it leaves the window: the safe side.)
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_ID`, `…_INVALID_COST`, `…_INVALID_OPTION`, and
 *   `ERR_RESILIMIT_REDIS_REPLY` when Redis refused the script (the local side gave the call back all the same).
 */
export async function refund(
  parts: Pick<Parts, 'local' | 'deny' | 'recovery' | 'tier' | 'hotKeys'>,
  key: string,
  id: string,
  options?: RefundOptions,
): Promise<RefundResult> {
  checkKey(key);
  checkGivenId(id);
  const given = options === undefined ? undefined : checkCost(knownOptions('refund()', options, ['cost'])['cost'], MAX_INT);
  const { local, deny, recovery, hotKeys } = parts;
  // A call admitted on a hot key's lease counts in Redis inside the lease: given back to it while it
  // lasts, kept (nothing given back anywhere) once it has ended.
  const seq = hotKeys === undefined ? undefined : seqOf(id);
  const lease = seq === undefined ? undefined : hotKeys?.leaseOf(key, seq);
  if (lease === 'ended') return { refunded: false, permits: 0, pending: false };
  // The id Redis knows a call by may carry more than its own (slices: its slice); the local side knows its own.
  const matches = sameCall(parts.tier.window.model.ownId(id));
  const held = recovery.forgetCall(key, matches);
  const warm = local.main.forgetCall(key, matches);
  const known = held?.cost ?? warm?.cost ?? 0;
  if (known > 0) deny.delete(key);
  if (lease === 'live' && known > 0) {
    hotKeys?.refund(key, known);
    return { refunded: true, permits: known, pending: false };
  }
  // Never sent to Redis: journalled and not yet written back, or never to be (a `LocalOnlyId`);
  // unless its own Redis call went unanswered (Redis may have run it: the refund goes there too).
  const unanswered = recovery.takeUnanswered(key, id);
  if (!unanswered && ((held !== undefined && !held.sent) || (held === undefined && isLocalOnly(warm?.id)))) {
    return { refunded: true, permits: known, pending: false };
  }
  const pending = recovery.refunds;
  const cost = known > 0 ? known : given;
  let permits: number;
  try {
    permits = await pending.send(key, id, cost);
  } catch (error) {
    if (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY) throw error;
    pending.add(key, id, cost);
    return { refunded: known > 0, permits: known, pending: true };
  }
  if (permits > 0) deny.delete(key);
  if (unanswered) {
    if (recovery.writing) pending.add(key, id, cost); // a pass may write the journalled copy back after it
    // Redis had it or not: this instance's copy was given back either way.
    return { refunded: permits > 0 || known > 0, permits: Math.max(permits, known), pending: false };
  }
  // A write-back pass running now may write the call again (a re-seed reads the windows before it
  // writes): the removal is made again after it.
  if (recovery.writing) pending.add(key, id, cost);
  return { refunded: permits > 0, permits, pending: false };
}
