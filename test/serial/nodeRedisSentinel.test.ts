/**
 * A node-redis Sentinel client (`createSentinel()`) as the limiter's client, on a real deployment: a
 * master, one replica and three Sentinels (quorum 2, down-after-milliseconds 1 s). Redis decides; the
 * master is killed; every call is answered within the deadline meanwhile; Redis decides again once
 * the client follows the promotion, and holds what was admitted locally in between.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { createSentinel } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { portOf } from '../../src/client/portOf.js';
import { closeRedisClient, ResilientLimiter, type RedisClient, waitForRedis } from '../../src/index.js';
import { startSentinels, type SentinelDeployment } from '../support/sentinel.js';

const DEADLINE_MS = 100; // breaker.timeoutMs below
/** Timer slack on top of the deadline for a loaded two-core machine (the chaos suite's is 40 ms; a Sentinel deployment is five more processes). */
const SLACK_MS = 150;
/**
 * From the kill to Redis deciding again: the Sentinels need down-after-milliseconds (1 s) and an
 * election (about 1 s here) to promote the replica, node-redis polls the Sentinels for the topology,
 * and the breaker's trial follows its reset (200 ms). The rest is room for a loaded machine.
 */
const BACK_WITHIN_MS = 15_000;

let deployment: SentinelDeployment;

beforeAll(async () => {
  deployment = await startSentinels();
}, 60_000);

afterAll(async () => {
  await deployment?.close();
});

describe('a node-redis Sentinel client', () => {
  it('is the redis option: Redis decides, a dead master is answered locally within the deadline, then the new master decides', async () => {
    const sentinel = createSentinel({
      name: deployment.name,
      sentinelRootNodes: deployment.addresses.map((a) => ({ host: a.host, port: a.port })),
      nodeClientOptions: {
        disableOfflineQueue: true,
        socket: { connectTimeout: 1_000, reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 500) },
      },
    });
    sentinel.on('error', () => {});
    await sentinel.connect();
    const redis = sentinel as unknown as RedisClient;
    expect(portOf(redis).describe()).toBe('a node-redis Sentinel client');
    expect(await waitForRedis(redis)).toBe(true);
    const limiter = new ResilientLimiter({
      redis,
      prefix: `s:${randomUUID()}:`,
      limit: 1000,
      windowMs: 60_000,
      local: { instances: 1 },
      breaker: { timeoutMs: DEADLINE_MS, resetTimeoutMs: 200 },
    });
    try {
      expect((await limiter.limit('k')).source).toBe('redis');
      await deployment.nodes[0]!.kill();
      const killedAt = performance.now();
      let slowest = 0;
      let local = 0;
      let back: number | undefined;
      while (back === undefined && performance.now() - killedAt < BACK_WITHIN_MS) {
        const started = performance.now();
        const d = await limiter.limit('k');
        slowest = Math.max(slowest, performance.now() - started);
        if (d.source === 'local') local += 1;
        if (d.source === 'redis' && local > 0) back = performance.now() - killedAt;
        await sleep(20);
      }
      expect(back, `Redis did not decide again within ${BACK_WITHIN_MS} ms of the kill`).toBeDefined();
      expect(slowest).toBeLessThan(DEADLINE_MS + SLACK_MS);
      // Every call admitted locally is on the new master once written back (1 before the kill, `local`
      // during, 1 that Redis decided after), less none; the write-back may trail the first decision a little.
      const started = performance.now();
      let held = await limiter.peek('k');
      while (held.remaining > 1000 - (1 + local + 1) && performance.now() - started < 5_000) {
        await sleep(50);
        held = await limiter.peek('k');
      }
      expect(held.remaining).toBeLessThanOrEqual(1000 - (1 + local + 1));
    } finally {
      await limiter.close();
      await closeRedisClient(redis);
    }
  }, 60_000);
});
