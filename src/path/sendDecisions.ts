import { ResilimitError } from '../base/errors.js';
import { decideBatch } from '../base/internal.js';
import type { LocalMs } from '../base/time.js';
import type { BatchCall, BatchOutcome } from '../redis/RedisWindow.js';
import type { RedisTier } from '../redis/RedisTier.js';

/**
 * Decides calls of `limit()` (or peeks, at cost 0) in one script call through the tier: the window's
 * batch, or `how` (a hot key's lease, told the deadline and the local time it is sent at). Its
 * staleness deadline counts from the send (see `RedisTier.notAfter`). Every decision of a batch tells
 * the same time: the first one's teaches the clock offset (a batch Redis could not decide teaches nothing).
 */
export async function sendDecisions(
  tier: RedisTier,
  calls: readonly BatchCall[],
  how = (notAfter: number | undefined, _sentNow: LocalMs) => tier.window[decideBatch](calls, notAfter, tier.reserve),
): Promise<BatchOutcome[]> {
  let sentNow = 0 as LocalMs;
  const decisions = await tier.call(calls.length, (now) => how(tier.notAfter((sentNow = now)), now));
  for (const d of decisions) {
    if (d instanceof ResilimitError) continue;
    tier.learnOffset(sentNow, d.nowMs);
    break;
  }
  return decisions;
}
