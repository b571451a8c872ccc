/**
 * A refund storm on a large key must not stall Redis for everybody. A key holding
 * 100,000 calls; 200 refunds of ids it does not hold (a second refund, another instance's call, a
 * call that has left: each looks the same to Redis). Before, the script scanned the whole key for any
 * `<cost>*<id>`: 50-65 ms a refund, past the deadline, kept pending and sent again by every write-back
 * pass, and another limiter on the same Redis saw its breaker open. Now a refund costs two ZSCOREs.
 *
 * Checked on Redis's side, not by a timer of ours: `SLOWLOG` (commands over 10 ms; a scan of 100,000
 * members took five times that) holds no script call, and the other limiter's breaker never opened.
 */
import { describe, expect, it } from 'vitest';
import { useLimiters } from '../test/support/limiters.ts';

const CALLS = 100_000;
const REFUNDS = 200;
/** SLOWLOG's threshold, µs: a refund scanning 100,000 members took 50-65 ms here; two ZSCOREs take microseconds. */
const SLOW_US = 10_000;

const redis = useLimiters({ limit: 1_000_000, windowMs: 60_000, local: { instances: 1 } });

describe('a refund storm on a key of 100,000 calls', () => {
  it('answers refunded: false at once for ids the key does not hold, with no slow command, and another limiter keeps deciding', async () => {
    // A generous deadline while filling: a loaded machine must not send the filling calls to the local tier.
    const big = await redis.limiter({ windowMs: 600_000, breaker: { timeoutMs: 5_000 } });
    const other = await redis.limiter();
    const admin = redis.admin;
    try {
      for (let filled = 0; filled < CALLS; filled += 500) {
        const ds = await Promise.all(Array.from({ length: 500 }, () => big.limit('big')));
        expect(ds.every((d) => d.allowed && d.source === 'redis')).toBe(true);
      }
      await admin.config('SET', 'slowlog-log-slower-than', String(SLOW_US));
      await admin.slowlog('RESET');
      const openedBefore = other.stats().opened;
      const deciding = (async () => {
        let decided = 0;
        for (let i = 0; i < 50; i++) {
          const ds = await Promise.all(Array.from({ length: 20 }, (_, j) => other.limit(`k${j}`)));
          decided += ds.filter((d) => d.source === 'redis').length;
        }
        return decided;
      })();
      const refunds = await Promise.all(Array.from({ length: REFUNDS }, () => big.refund('big', `absent-${crypto.randomUUID()}`)));
      const decided = await deciding;
      expect(refunds.filter((r) => r.refunded || r.pending)).toEqual([]);
      const slow = (await admin.slowlog('GET', 128)) as [number, number, number, string[]][];
      console.log(`refund storm: ${REFUNDS} refunds, slow commands ${slow.length}, the other limiter decided ${decided} of 1000 in Redis`);
      expect(slow.map(([, , us, args]) => `${args[0]} ${us} µs`)).toEqual([]);
      expect(other.stats().opened).toBe(openedBefore);
      expect(big.stats().refunds.pending).toBe(0);
    } finally {
      await admin.config('SET', 'slowlog-log-slower-than', '10000');
    }
  }, 120_000);
});
