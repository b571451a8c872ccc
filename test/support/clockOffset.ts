import type { ClockOffset } from '../../src/redis/ClockOffset.js';
import type { LocalMs, RedisMs } from '../../src/base/time.js';

/** Samples `offset` with plain numbers: sent and received on the local clock, `redisMs` on Redis's. */
export function sample(offset: ClockOffset, sentMs: number, redisMs: number, receivedMs: number): void {
  offset.sample(sentMs as LocalMs, redisMs as RedisMs, receivedMs as LocalMs);
}
