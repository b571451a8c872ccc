/**
 * The node-redis and Valkey GLIDE adapters on a real three-master Redis Cluster: a script call goes
 * to the master of its keys' slot (limit() on a key of each master, limitAll() over several slots),
 * `INFO` reads every master, and the limiter writes back what it admitted while one master was frozen.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { GlideClusterClient, Logger } from '@valkey/valkey-glide';
import { createCluster } from 'redis';
import { describe, expect, it } from 'vitest';
import { portOf } from '../../src/client/portOf.js';
import { closeRedisClient, ResilientLimiter, type RedisClient, waitForRedis } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';
import { until, whileFrozen } from '../support/wait.js';

// GLIDE logs each failed request (a server's error reply included) as a warning on stderr.
Logger.setLoggerConfig('off');

const cluster = useCluster();

const CLIENTS: Record<string, () => Promise<RedisClient>> = {
  'node-redis': async () => {
    const client = createCluster({
      rootNodes: [{ socket: { host: '127.0.0.1', port: cluster.nodes[0]!.port } }],
      defaults: {
        socket: { connectTimeout: 1_000, reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 500) },
        disableOfflineQueue: true,
      },
    });
    client.on('error', () => {});
    await client.connect();
    return client as unknown as RedisClient;
  },
  'valkey-glide': async () =>
    (await GlideClusterClient.createClient({
      addresses: [{ host: '127.0.0.1', port: cluster.nodes[0]!.port }],
      requestTimeout: 500,
    })) as unknown as RedisClient,
};

describe.each(Object.keys(CLIENTS))('the %s adapter on a Cluster', (library) => {
  it('sends each script call to its slot, reads every master, and serves limit() and limitAll()', async () => {
    const client = await CLIENTS[library]!();
    const port = portOf(client);
    expect(port.isCluster).toBe(true);
    expect(await waitForRedis(client)).toBe(true);
    const prefix = `ac:${randomUUID()}:`;
    const limiter = new ResilientLimiter({
      redis: client,
      prefix,
      limit: 2,
      windowMs: 60_000,
      local: { instances: 1 },
      breaker: { timeoutMs: 500 },
    });
    try {
      expect(await port.info('server')).toHaveLength(3);
      // A key on each master: each decided by Redis (a call sent to another master would get MOVED).
      const keys = cluster.keysOnEveryMaster(1, (k) => redisKey(prefix, k));
      for (const key of keys) {
        const decisions = [await limiter.limit(key), await limiter.limit(key), await limiter.limit(key)];
        expect(decisions.map((d) => [d.allowed, d.source, d.reason])).toEqual([
          [true, 'redis', 'decided'],
          [true, 'redis', 'decided'],
          [false, 'redis', 'decided'],
        ]);
      }
      const all = await limiter.limitAll(keys.map((key) => ({ key: `all:${key}`, limit: 1, windowMs: 60_000 })));
      expect([all.allowed, all.source]).toEqual([true, 'redis']);
      const again = await limiter.limitAll(keys.map((key) => ({ key: `all:${key}`, limit: 1, windowMs: 60_000 })));
      expect([again.allowed, again.source]).toEqual([false, 'redis']);
    } finally {
      await limiter.close();
      await closeRedisClient(client);
    }
  });

  it('answers locally within the deadline while a master is frozen, then writes the calls back', async () => {
    const client = await CLIENTS[library]!();
    const prefix = `acf:${randomUUID()}:`;
    const limiter = new ResilientLimiter({
      redis: client,
      prefix,
      limit: 3,
      windowMs: 60_000,
      local: { instances: 1 },
      breaker: { timeoutMs: 100, resetTimeoutMs: 200 },
    });
    const [key] = cluster.keysOnEveryMaster(1, (k) => redisKey(prefix, k));
    const node = cluster.nodes[cluster.nodeOf(redisKey(prefix, key!))]!;
    try {
      expect((await limiter.limit(key!)).source).toBe('redis');
      const frozen = await whileFrozen(node, () => limiter.limit(key!));
      expect([frozen.result.allowed, frozen.result.source]).toEqual([true, 'local']);
      // The deadline (100 ms) plus a loaded machine's timer slack.
      expect(frozen.ms).toBeLessThan(100 + 400);
      let held = await limiter.peek(key!);
      // The write-back follows the breaker's reset (200 ms); 10 s is a loaded machine's slack.
      await until(
        async () => {
          held = await limiter.peek(key!);
          return held.source === 'redis' && held.remaining === 1;
        },
        10_000,
        `the calls written back (last peek: ${JSON.stringify(held)})`,
      );
    } finally {
      await limiter.close();
      await closeRedisClient(client);
    }
  });

  it('reports a master restarted after start-up, the first time too', async () => {
    if (library !== 'node-redis') return; // ioredis's '+node' has its own Cluster tests; GLIDE reports by its replies
    const client = await CLIENTS[library]!();
    const port = portOf(client);
    let restarted = 0;
    const stop = port.on('node', () => (restarted += 1));
    try {
      await cluster.restart(0);
      await cluster.waitOk();
      const started = performance.now();
      // node-redis reconnects with its back-off (at most 500 ms here); 15 s is a loaded machine's slack.
      while (restarted === 0 && performance.now() - started < 15_000) await sleep(50);
      expect(restarted).toBeGreaterThan(0);
    } finally {
      stop();
      await closeRedisClient(client);
    }
  });
});
