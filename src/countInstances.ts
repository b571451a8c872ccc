import type { DenyCache } from './DenyCache.js';
import { nextId } from './input.js';
import { InstanceCounter } from './InstanceCounter.js';
import type { ResolvedLimiterOptions } from './options.js';
import type { Recovery } from './Recovery.js';
import type { RedisTier } from './RedisTier.js';

/**
 * Starts the instance count of an `instances: 'auto'` limiter: one heartbeat member per limiter,
 * gone 3 beats after its last; beats say whether this instance is clean (`Recovery.clean`, and retry a
 * failed write-back pass when it is not), and the
 * deny cache is cleared as unrecovered instances come back (its denials were made with their shares
 * left free). `changed` is told the new count.
 */
export function countInstances(
  tier: RedisTier,
  recovery: Recovery,
  deny: DenyCache,
  options: Pick<ResolvedLimiterOptions, 'prefix' | 'heartbeatMs' | 'now'>,
  changed: (count: number) => void,
): InstanceCounter {
  const { prefix, heartbeatMs, now } = options;
  const counter = new InstanceCounter(heartbeatMs, {
    send: tier.beat.bind(tier, `${prefix}instances`, nextId(), heartbeatMs * 3),
    clean: () => {
      // An instance that gets no calls would stay dirty after a failed pass (only calls retry one),
      // and the others would keep its share free for good: each beat retries it.
      if (!recovery.clean) recovery.schedule();
      return recovery.clean;
    },
    now,
    changed,
    recovered: () => deny.clear(),
  });
  counter.start();
  return counter;
}
