import type { Parts } from '../path/parts.js';
import { ErrorCode, isResilimitError } from '../base/errors.js';
import { writeBatch } from '../recovery/writeBack.js';

/** What a forced charge did: `pending` when Redis could not take it and the journal holds it until Redis answers again. */
export type ChargeResult = { readonly pending: boolean };

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
};

/** The {@link Charger} of a limiter's parts. */
export function charger(parts: Parts, prefix: string, open: (name: string) => void): Charger {
  return {
    now: parts.now,
    windowMs: () => parts.settings.windowMs,
    limitOf: (key) => parts.settings.limitOf(key),
    open,
    charge: (key, cost, of) => charge(parts, prefix, key, cost, `${parts.tier.window.model.ownId(of)}#settle`),
  };
}

/**
 * A charge of `cost` permits on `key` at now, without a limit check: spend that already happened (a
 * settle above its estimate). The warm local window records it at once (it counts during an outage,
 * and a re-seed writes it), then it is written into Redis's window with the write-back script, which
 * adds calls past the limit (the exact log under its `id`: a charge written twice counts once; slices by
 * time). When Redis cannot answer (breaker open, timeout, client not ready) the journal holds it, and
 * the next write-back pass writes it once Redis answers again: nothing is lost (unless the journal
 * overflows its bounds: the `dropped` event, as for any journalled call).
 * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` when Redis refused the script (the local window counts it all the same).
 */
export async function charge(parts: Parts, prefix: string, key: string, cost: number, id: string): Promise<ChargeResult> {
  const { tier, recovery } = parts;
  const at = parts.now();
  parts.local.main.record(key, at, cost, id);
  if (tier.state !== 'open') {
    try {
      await writeBatch(tier, prefix, parts.settings.windowMs)(key, [{ key, at, cost, id }]);
      return { pending: false };
    } catch (error) {
      if (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY) throw error;
    }
  }
  recovery.add(key, at, cost, id);
  if (tier.state === 'closed') recovery.schedule();
  return { pending: true };
}
