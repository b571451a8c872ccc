import type { Parts } from '../path/parts.js';
import { checkKey } from '../base/call.js';
import { block } from '../base/internal.js';
import { integer, MAX_INT } from '../options/options.js';
import { command } from './command.js';

/**
 * The local half of `ResilientLimiter.block(key, ms)`: this instance refuses every call of `key` for
 * `ms` at once (0 lifts the block), through the deny cache (it answers before Redis is asked, in
 * every mode, also while Redis cannot answer) and the local window (in mode `'local'`, for as long as
 * it keeps the key). The Redis half is the block script (`RedisWindow.block`).
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_OPTION` for a bad `ms`.
 */
function blockHere(parts: Pick<Parts, 'now' | 'deny' | 'local' | 'hotKeys'>, key: string, ms: number): void {
  checkKey(key);
  integer('ms', ms, 0, MAX_INT);
  const now = parts.now();
  parts.hotKeys?.giveBack(key); // its lease admits no more here (other instances' leases last until they end)
  parts.local.main[block](key, ms === 0 ? 0 : now + ms);
  if (ms === 0) parts.deny.lift(key);
  else parts.deny.deny(key, { until: parts.deny.untilFor(0, ms), cost: 1, remaining: 0, resetAtMs: now + ms, limit: 0 });
}

/**
 * `ResilientLimiter.block(key, ms)`: this instance at once ({@link blockHere}), then Redis (one call
 * through the breaker).
 * @throws {ResilimitError} as {@link blockHere}; `ERR_RESILIMIT_REDIS_UNAVAILABLE` or `ERR_RESILIMIT_REDIS_REPLY`
 *   when Redis did not take it (this instance blocks the key all the same).
 */
export async function blockKey(parts: Pick<Parts, 'now' | 'deny' | 'local' | 'tier' | 'hotKeys'>, key: string, ms: number): Promise<void> {
  blockHere(parts, key, ms);
  const otherwise = ms === 0 ? 'only this instance lifted the block' : 'only this instance blocks the key';
  try {
    await command(parts.tier, 'block()', otherwise, () => parts.tier.window.block(key, ms));
  } catch (error) {
    if (ms > 0) parts.deny.hold(key); // Redis does not hold it: no probe of Redis may lift it here
    throw error;
  }
}
