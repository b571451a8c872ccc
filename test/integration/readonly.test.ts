/**
 * A failover behind an address that is repointed (a DNS name, a proxy, a Kubernetes Service): new
 * connections reach the new master, but a connection made before keeps reaching the demoted one,
 * which answers every write `READONLY` (a replica answers PING, so a breaker's trial would close
 * and reopen for as long as that connection lives). The forwarder below stands for the address:
 * it sends each new connection to its current target and leaves the open ones where they are.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeRedisClient, createRedisClient, ResilientLimiter, waitForRedis } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { startRedisServer, type RedisChild } from '../support/redis.js';

let master: RedisChild;
let replica: RedisChild;
let forwarder: Server;
const target = { port: 0 };
const sockets = new Set<Socket>();

beforeAll(async () => {
  [master, replica] = await Promise.all([startRedisServer(), startRedisServer()]);
  target.port = master.port;
  forwarder = createServer((client) => {
    const upstream = connect({ host: '127.0.0.1', port: target.port });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  forwarder.listen(0, '127.0.0.1');
  await once(forwarder, 'listening');
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  forwarder?.close();
  await Promise.all([master?.stop(), replica?.stop()]);
});

describe('a failover behind a repointed address', () => {
  it('reconnects a connection that meets READONLY: Redis decides again, on the new master', async () => {
    const admin = { master: master.client(), replica: replica.client() };
    await admin.replica.replicaof('127.0.0.1', master.port);
    const redis = createRedisClient({ host: '127.0.0.1', port: (forwarder.address() as AddressInfo).port });
    expect(await waitForRedis(redis)).toBe(true);
    const prefix = `t:${randomUUID()}:`;
    const limiter = new ResilientLimiter({
      redis,
      limit: 1_000,
      windowMs: 60_000,
      prefix,
      local: { instances: 1 },
      breaker: { resetTimeoutMs: 100 },
    });
    try {
      expect((await limiter.limit('k')).source).toBe('redis');
      // The failover: the replica is promoted, the master demoted, the address repointed.
      await admin.replica.replicaof('NO', 'ONE');
      await admin.master.replicaof('127.0.0.1', replica.port);
      target.port = replica.port;
      const started = performance.now();
      let again: number | undefined;
      // 5 s: a reconnect is at most one READONLY reply and a back-off step (≤ 1 s) away; without it
      // the connection to the demoted master lives on, and no decision is Redis's in that time.
      while (performance.now() - started < 5_000) {
        const d = await limiter.limit('k');
        if (d.source === 'redis') {
          again = performance.now() - started;
          break;
        }
        await sleep(20);
      }
      console.log(`Redis decided again ${again === undefined ? 'never in 5 s' : `${again.toFixed(0)} ms`} after the failover`);
      expect(again).toBeDefined();
      // The decision was the new master's: it holds the key's window.
      expect(await admin.replica.exists(redisKey(prefix, 'k'))).toBe(1);
    } finally {
      await limiter.close();
      await closeRedisClient(redis);
      admin.master.disconnect();
      admin.replica.disconnect();
    }
  });
});
