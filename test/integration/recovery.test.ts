/**
 * Recovery after a reconnect, on a real redis-server child: the journal keeps every call of the
 * outage (a re-seed never takes its room), and the warm windows are written back only when Redis
 * lost its data (a new run id: a restart, or a failover to another server).
 */
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter, type ResilientLimiterOptions } from '../../src/index.js';
import { restartEmpty, startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

const KEYS = Array.from({ length: 20 }, (_, i) => `user:${i}`);
const LIMIT = 50;

let server: RedisChild;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  server = await startRedisServer();
});
afterEach(async () => {
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
});
afterAll(async () => {
  await server?.close();
});

async function setup(options: Partial<ResilientLimiterOptions> = {}) {
  const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
  clients.push(redis);
  await waitReady(redis);
  const l = new ResilientLimiter({
    redis,
    prefix: `r:${randomUUID()}:`,
    limit: LIMIT,
    // Long enough that every call of a test stays in one window on a loaded machine.
    windowMs: 60_000,
    local: { instances: 1 },
    maxPending: 800,
    breaker: { resetTimeoutMs: 50 },
    ...options,
  });
  limiters.push(l);
  const admitted = new Map<string, number>();
  /** `n` calls of every key, one after another; counts the admitted ones per key. */
  const round = async (n: number): Promise<void> => {
    for (const key of KEYS) {
      for (let i = 0; i < n; i++) if ((await l.limit(key)).allowed) admitted.set(key, (admitted.get(key) ?? 0) + 1);
    }
  };
  /** Waits (bounded) until the breaker is closed and the journal written. */
  const recovered = async (): Promise<void> => {
    for (let i = 0; l.state !== 'closed' || l.stats().reconcile.pending > 0; i++) {
      if (i > 1_000) throw new Error(`not recovered: ${JSON.stringify(l.stats())}`);
      await sleep(5);
      await l.reconcile();
    }
  };
  return { redis, l, admitted, round, recovered };
}

describe('recovery after a reconnect', () => {
  it('keeps every call of a connection cut, and writes back only those when Redis kept its data', async () => {
    const { redis, l, admitted, round, recovered } = await setup();
    await round(30); // 600 calls decided by Redis: the warm windows hold them
    expect(l.stats().bySource.redis).toBe(600);
    const reconnected = once(redis, 'ready');
    redis.disconnect(true); // the connection is cut; the client reconnects to the same server
    await round(20); // answered locally before the client can reconnect: 400 journalled
    expect(l.stats().reconcile.pending).toBe(400);
    await reconnected;
    await recovered();
    // Redis kept its data: nothing of the warm windows is written again, and nothing is dropped.
    expect(l.stats().reconcile).toMatchObject({ pending: 0, dropped: 0, written: 400, present: 0 });
    await round(30);
    for (const key of KEYS) expect(admitted.get(key), key).toBe(LIMIT);
  });

  it('re-seeds a Redis that restarted empty without dropping any call of the outage', async () => {
    const { redis, l, admitted, round, recovered } = await setup();
    await round(30);
    const restarted = restartEmpty(server, redis);
    await round(20); // Redis is down: 400 journalled
    await restarted;
    await recovered();
    // The journal's 400 and the warm windows' 1,000 (the 400 among them) are written, once each.
    expect(l.stats().reconcile.dropped).toBe(0);
    await round(30);
    for (const key of KEYS) expect(admitted.get(key), key).toBe(LIMIT);
  });
});
