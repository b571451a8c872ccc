/**
 * Recovery on a real Redis Cluster, one master at a time (regressions of two bugs the master-kill
 * tests found): a master that comes back empty is re-seeded from the warm window, and calls admitted
 * locally are written into Redis before Redis decides their keys again, even when the catch-up ends
 * while a master is still down.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Cluster } from 'ioredis';
import { afterEach, expect, it } from 'vitest';
import { ResilientLimiter, type LimiterDecision } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';

const cluster = useCluster({ nodeTimeoutMs: 1000, requireFullCoverage: false });
let clients: Cluster[] = [];

afterEach(async () => {
  for (const c of clients) c.disconnect();
  clients = [];
  // Every master up again for the next test.
  for (let i = 0; i < cluster.nodes.length; i++) if ((await cluster.state(i)) === 'down') await cluster.restart(i);
  await cluster.waitOk();
});

async function client(): Promise<Cluster> {
  const c = cluster.client({ enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } });
  clients.push(c);
  await once(c, 'ready');
  return c;
}

/** A key of `stem` whose Redis key lives on master `node`. */
function keyOn(prefix: string, stem: string, node: number): string {
  for (let i = 0; ; i++) if (cluster.nodeOf(redisKey(prefix, `${stem}${i}`)) === node) return `${stem}${i}`;
}

const brief = (d: LimiterDecision): string => `${d.allowed}/${d.source}/${d.reason}`;

it('re-seeds a master that comes back empty: the limit holds across its restart', async () => {
  const redis = await client();
  const prefix = `rec:${randomUUID()}:`;
  const l = new ResilientLimiter({ redis, prefix, limit: 5, windowMs: 60_000, local: { instances: 1 } });
  try {
    const key = keyOn(prefix, 'k', 1);
    for (let i = 0; i < 4; i++) expect(brief(await l.limit(key))).toBe('true/redis/decided');
    await cluster.nodes[1]!.kill();
    expect((await l.limit(key)).allowed).toBe(true); // the 5th, answered locally
    await cluster.restart(1); // same port and node id, no data
    await cluster.waitOk();
    await sleep(300); // the client finds the node again
    await l.reconcile();
    const after = [];
    for (let i = 0; i < 5; i++) after.push(await l.limit(key));
    // 5 admitted in the window already: none more (without re-seeding, Redis granted 4 more).
    expect(after.filter((d) => d.allowed).map(brief)).toEqual([]);
    expect(l.stats().reconcile.written).toBeGreaterThanOrEqual(4);
  } finally {
    await l.close();
  }
});

it('keeps a key answered locally until its journalled calls are in Redis, even when the catch-up ends first', async () => {
  const redis = await client();
  const prefix = `rec:${randomUUID()}:`;
  const l = new ResilientLimiter({ redis, prefix, limit: 3, windowMs: 60_000, local: { instances: 1 } });
  try {
    const survivor = keyOn(prefix, 'a', 0);
    const victim = keyOn(prefix, 'b', 2);
    await l.limit(keyOn(prefix, 'warm', 0));
    await cluster.nodes[2]!.kill();
    l.forceOpen();
    expect(brief(await l.limit(survivor))).toBe('true/local/breaker-open'); // journalled
    expect(brief(await l.limit(victim))).toBe('true/local/breaker-open'); // journalled; its master is down
    let passes = 0;
    let during: LimiterDecision | undefined;
    const twoPasses = new Promise<void>((resolve) => {
      l.on('reconciled', () => {
        passes += 1;
        if (passes === 1) void sleep(10).then(async () => (during = await l.limit(survivor)));
        if (passes === 2) setImmediate(resolve);
      });
    });
    l.forceClose(); // the catch-up: the survivor's batch is written, the victim's fails
    await twoPasses;
    expect(during?.allowed).toBe(true); // the survivor's 2nd call, answered locally during a pass
    // Two more calls of the survivor at once: 2 are admitted already, 1 permit is left.
    const burst = await Promise.all([l.limit(survivor), l.limit(survivor)]);
    expect(burst.filter((d) => d.allowed)).toHaveLength(1);
    await l.reconcile();
    expect((await l.limit(survivor)).allowed).toBe(false);
  } finally {
    await l.close();
  }
});
