import type { Parts } from '../path/parts.js';
import { sameCall } from '../base/call.js';
import { ErrorCode, isResilimitError } from '../base/errors.js';
import { groupOf } from '../redis/allWindows.js';
import { writeBatch } from '../recovery/writeBack.js';

/** What a forced charge did: `pending` when Redis could not take it and the journal holds it until Redis answers again. */
export type ChargeResult = { readonly pending: boolean };

/** What a give-back in one of `limitAll()`'s windows did: the permits that came back, and `pending` as for `refund()`. */
export type GiveBackResult = { readonly permits: number; readonly pending: boolean };

/**
 * What `Budget` asks of its limiter, behind the `charge` symbol (`base/internal.ts`): never exported
 * from the package root.
 */
export type Charger = {
  /** The limiter's local clock (the `clock` option, or its steady clock). */
  readonly now: () => number;
  /** `limit()`'s window length in force. */
  readonly windowMs: () => number;
  /** The limit of `key` in force (`Settings.limitOf`). */
  readonly limitOf: (key: string) => number;
  /** Throws `ERR_RESILIMIT_CLOSED` for `name` once the limiter is closed. */
  readonly open: (name: string) => void;
  /**
   * Forces a charge of `cost` permits on `key` in `limit()`'s window, never refused: see {@link charge}.
   * `of`: the id of the call it belongs to (its decision's); the charge gets an id of its own, derived from it.
   */
  readonly charge: (key: string, cost: number, of: string) => Promise<ChargeResult>;
  /** The counting model names calls (the exact log): `limitAll()`'s windows can give a call back. */
  readonly namesCalls: boolean;
  /** As `charge`, in the `limitAll()` window of `key` and `windowMs`; `of`: the item's id (`itemId`). */
  readonly chargeIn: (key: string, windowMs: number, cost: number, of: string) => Promise<ChargeResult>;
  /** Gives back the call `id` (an item's id) of the `limitAll()` window of `key` and `windowMs`: see {@link giveBackIn}. */
  readonly giveBackIn: (key: string, windowMs: number, id: string, cost: number) => Promise<GiveBackResult>;
};

/** The {@link Charger} of a limiter's parts. */
export function charger(parts: Parts, prefix: string, open: (name: string) => void): Charger {
  return {
    now: parts.now,
    windowMs: () => parts.settings.windowMs,
    limitOf: (key) => parts.settings.limitOf(key),
    open,
    charge: (key, cost, of) => charge(parts, prefix, key, cost, `${parts.tier.window.model.ownId(of)}#settle`),
    namesCalls: parts.tier.window.model.namesCalls,
    chargeIn: (key, windowMs, cost, of) => charge(parts, prefix, key, cost, `${of}#settle`, windowMs),
    giveBackIn: (key, windowMs, id, cost) => giveBackIn(parts, key, windowMs, id, cost),
  };
}

/**
 * A charge of `cost` permits on `key` at now, without a limit check: spend that already happened (a
 * settle above its estimate). It is written into Redis's window with the write-back script, which
 * adds calls past the limit (the exact log under its `id`: a charge written twice counts once; slices by
 * time). When Redis cannot answer (breaker open, timeout, client not ready) the journal holds it, and
 * the next write-back pass writes it once Redis answers again: nothing is lost (unless the journal
 * overflows its bounds: the `dropped` event, as for any journalled call). The warm local window records
 * it either way (it counts during an outage, and a re-seed writes it), once Redis has it when it does.
 * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` when Redis refused the script (the local window counts it all the same).
 */
export async function charge(
  parts: Parts,
  prefix: string,
  key: string,
  cost: number,
  id: string,
  windowMs?: number,
): Promise<ChargeResult> {
  const { tier, recovery } = parts;
  const at = parts.now();
  const local = windowMs === undefined ? parts.local.main : parts.local.forWindow(windowMs);
  if (tier.state !== 'open') {
    try {
      await writeBatch(
        tier,
        prefix,
        parts.settings.windowMs,
      )(key, [windowMs === undefined ? { key, at, cost, id } : { key, at, cost, id, windowMs }]);
      // Recorded once Redis has it, and after the replies read with its own have been settled: recorded
      // sooner, a decision of the key that Redis made before it would find Redis holding less than
      // the warm window, and take it for lost data (replies come in order; their settling is
      // microtasks, over before the next turn of the event loop).
      await new Promise((resolve) => setImmediate(resolve));
      local.record(key, parts.now(), cost, id);
      return { pending: false };
    } catch (error) {
      local.record(key, at, cost, id);
      if (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY) throw error;
    }
  } else {
    local.record(key, at, cost, id);
  }
  recovery.add(key, at, cost, id, windowMs);
  if (tier.state === 'closed') recovery.schedule();
  return { pending: true };
}

/**
 * Gives back the call `id` of `limitAll()`'s window of `key` and `windowMs`, as `refund()` does in
 * `limit()`'s: the local side first (the window's local copy, the journal: a call journalled and not
 * yet sent needs no Redis call), then Redis's window by the call's member; when Redis cannot answer,
 * the removal is kept with the pending refunds and written by the next pass. `cost`: the call's cost
 * when the local side no longer knows it.
 * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` when Redis refused the script.
 */
export async function giveBackIn(parts: Parts, key: string, windowMs: number, id: string, cost: number): Promise<GiveBackResult> {
  const { recovery } = parts;
  const matches = sameCall(id);
  const held = recovery.forgetCall(groupOf({ key, windowMs }), matches);
  const warm = parts.local.forWindow(windowMs).forgetCall(key, matches);
  const known = held?.cost ?? warm?.cost ?? 0;
  if (held !== undefined && !held.sent) return { permits: known, pending: false };
  const pending = recovery.refunds;
  let permits: number;
  try {
    permits = await pending.send(key, id, known > 0 ? known : cost, windowMs);
  } catch (error) {
    if (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY) throw error;
    pending.add(key, id, known > 0 ? known : cost, windowMs);
    return { permits: known, pending: true };
  }
  // A write-back pass running now may write the call again: the removal is made again after it.
  if (recovery.writing) pending.add(key, id, known > 0 ? known : cost, windowMs);
  return { permits, pending: false };
}
