/**
 * A Redis Cluster master (with a replica) killed under load from two service processes:
 * the replica takes over, and each process finds the new master at its own time (the second one's
 * breaker stays open 4 s at a time, as one whose open period had doubled). Before leases the first,
 * back on Redis, counted one instance and took the whole limit while the second still answered on its
 * share: 30 admitted in a window of 20 in 1 of 3 runs here (3 of 5 in the issue). In every window:
 * admitted ≤ 1.1 × the limit, Redis-decided alone ≤ the limit.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { redisKey } from '../src/redis/redisKey.ts';
import type { RedisCluster } from '../test/support/cluster.ts';
import { useCluster } from '../test/support/useCluster.ts';
import { startFleet, summary } from './bound/fleet.ts';
import type { Setup } from './bound/worker.ts';

const LIMIT = 20;
const WINDOW_MS = 2000;

/** The fleet's set-up on `cluster` (one key, whose master the test kills). */
function setupOn(cluster: RedisCluster, prefix: string): Setup {
  return {
    port: 0,
    cluster: cluster.nodes.map((n) => ({ host: n.host, port: n.port })),
    prefix,
    limit: LIMIT,
    windowMs: WINDOW_MS,
    mode: 'local',
    perSecond: 100,
    keys: 1,
    instances: 2,
    options: { heartbeatMs: 300 },
  };
}

describe('a Cluster master with a replica killed under two processes: the replica takes over', () => {
  const cluster = useCluster({ nodeTimeoutMs: 1000, requireFullCoverage: false, replicas: 1, startTimeoutMs: 60_000 });

  it('admits within 1.1 × the limit in every window while each process finds the new master at its own time', async () => {
    const prefix = `apart:${randomUUID()}:`;
    const victim = cluster.nodeOf(redisKey(prefix, 'k0'));
    const setup = setupOn(cluster, prefix);
    // The second process's breaker stays open 4 s at a time: it comes back to the new master seconds
    // after the first (as a process whose open period had doubled, or whose client learnt the new
    // topology late), while the first decides in Redis again.
    const late: Setup = { ...setup, options: { ...setup.options, breaker: { resetTimeoutMs: 4000, maxResetTimeoutMs: 4000 } } };
    const fleet = await startFleet([setup, late], 20_000);
    try {
      const at = fleet.go();
      await at(2000);
      await cluster.nodes[victim]!.kill(); // its replica is promoted after the node timeout (about 2 s)
      await at(10_000);
      const r = await fleet.stop();
      const { all, redis } = summary('Cluster master failed over to its replica', r, WINDOW_MS, LIMIT);
      expect(r.errors).toEqual([]);
      expect(redis.maxExcess).toBe(0);
      expect(all.maxExcess).toBeLessThanOrEqual(Math.floor(LIMIT * 0.1));
    } finally {
      fleet.kill();
    }
  }, 90_000);
});
