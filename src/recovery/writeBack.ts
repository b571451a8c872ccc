import type { LocalMs, RedisKey, RedisMs } from '../base/time.js';
import type { PendingCall, Script, WriteBackReply } from '../base/wire.js';
import { redisCallError } from '../redis/failures.js';
import type { RedisTier } from '../redis/RedisTier.js';
import type { WriteBatch } from './Journal.js';

/**
 * Reads Redis's clock (`TIME`) and learns the clock offset from the round trip, before a write-back
 * moves local times onto Redis's clock: it comes after an outage, before any decision, and either
 * clock may have stepped meanwhile. Inside the breaker (half-open, it is the trial), outside the
 * ledger, as write-backs are. Nothing with an injected clock (both sides use it), nor on a Cluster:
 * it has no one clock, and `TIME` goes to any node, a dead one included.
 */
export async function readClock(tier: RedisTier): Promise<void> {
  if (tier.clockInjected || tier.isCluster) return;
  await tier.call('outside', async (sentNow) => {
    const [seconds, micros] = await tier.port.time().catch((error: unknown) => Promise.reject(redisCallError(error)));
    tier.learnOffset(sentNow, (Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)) as RedisMs);
  });
}

/**
 * How a write-back pass writes one batch of a key's journalled calls: into `limit()`'s window, or
 * one of `limitAll()`'s (a call's own `windowMs`), by the limiter's model. Each call is written at the
 * latest time it can have on Redis's clock, so it leaves Redis's window no earlier than the local one
 * (the journal keeps local times as plain numbers; with an injected clock both sides read it).
 */
export function writeBatch(tier: RedisTier, prefix: string, windowMs: number): WriteBatch {
  const { offset, window } = tier;
  const { model } = window;
  const redisAt = tier.clockInjected ? Math.ceil : (at: number): number => Math.ceil(offset.redisOf(at as LocalMs));
  return (key, calls) => {
    const own = (calls[0] as PendingCall).windowMs;
    const batch = own !== undefined ? model.allWindow(prefix, key, own) : { redisKey: model.keyOf(prefix, key), model };
    const { script, args } = batch.model.writeBack({ windowMs: own ?? windowMs, nowArg: tier.nowArg(), calls, redisAt });
    return send(tier, batch.redisKey, args, script);
  };
}

/**
 * Sends one batch by source (`EVAL`: a decision sent right behind it must run after it, and a
 * `NOSCRIPT` retry would go out behind). Outside the ledger: a batch of up to 200 calls would make a
 * healthy Redis look slow to the gate; the journal bounds write-backs.
 */
function send(tier: RedisTier, redisKey: RedisKey, args: readonly (string | number)[], script: Script): Promise<WriteBackReply> {
  return tier.call('outside', async () => {
    try {
      return (await tier.port.eval(script, [redisKey], args)) as WriteBackReply;
    } catch (error) {
      throw redisCallError(error);
    }
  });
}
