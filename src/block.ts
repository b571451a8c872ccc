import type { Parts } from './DecisionPath.js';
import { checkKey } from './input.js';
import { block } from './internal.js';
import { integer, MAX_INT } from './options.js';

/**
 * The local half of `ResilientLimiter.block(key, ms)`: this instance refuses every call of `key` for
 * `ms` at once (0 lifts the block), through the deny cache (it answers before Redis is asked, in
 * every mode, also while Redis cannot answer) and the local window (in mode `'local'`, for as long as
 * it keeps the key). The Redis half is the block script (`RedisWindow.block`).
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_OPTION` for a bad `ms`.
 */
export function blockHere(parts: Pick<Parts, 'now' | 'deny' | 'local'>, key: string, ms: number): void {
  checkKey(key);
  integer('ms', ms, 0, MAX_INT);
  const now = parts.now();
  parts.local.main[block](key, ms === 0 ? 0 : now + ms);
  if (ms === 0) parts.deny.delete(key);
  else parts.deny.deny(key, parts.deny.perf.now() + ms, 1, 0, now + ms, 0);
}
