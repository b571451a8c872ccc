/**
 * A refund of a call whose Redis reply came after the deadline. The script ran in
 * time (the way there was fast) and Redis holds the call; its reply was late (the way back was slow),
 * so the fallback admitted the call too, and journalled it. Before, a refund of it answered
 * `{ refunded: true, pending: false }` from the journal alone and Redis kept the call for its whole
 * window; now the refund goes to Redis too, and is kept pending while Redis cannot answer it.
 */
import type { Proxy, Latency } from 'toxiproxy-node-client';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter } from '../src/index.ts';
import { waitReady } from '../test/support/redis.ts';
import { redisKey } from '../src/redis/redisKey.ts';
import { startLocalBackend, type LocalBackend } from './backends/index.ts';

let backend: LocalBackend;
let admin: Redis;

beforeAll(async () => {
  backend = await startLocalBackend('late reply test: local backend');
  admin = createRedisClient({ host: backend.redis.host, port: backend.redis.port });
  await waitReady(admin);
}, 30_000);

afterAll(async () => {
  admin?.disconnect();
  await backend?.close();
});

describe('a refund of a call whose reply came after the deadline', () => {
  it('reaches Redis, which holds the call: pending while Redis cannot answer, then written', async () => {
    const { proxy, host, port } = await backend.createRedisProxy(`late-${randomUUID()}`);
    const redis = createRedisClient({ host, port });
    await waitReady(redis);
    const prefix = `late:${randomUUID()}:`;
    const limiter = new ResilientLimiter({
      redis,
      prefix,
      limit: 10,
      windowMs: 60_000,
      local: { instances: 1 },
      breaker: { resetTimeoutMs: 100 },
    });
    try {
      // Replies 300 ms late: past the 50 ms deadline, while the script itself runs at once.
      await (proxy as Proxy).addToxic<Latency>({
        name: 'slow-back',
        type: 'latency',
        stream: 'downstream',
        toxicity: 1,
        attributes: { latency: 300, jitter: 0 },
      });
      const d = await limiter.limit('k');
      expect(d).toMatchObject({ allowed: true, source: 'local', reason: 'timeout' });
      const member = d.id as string;
      for (let i = 0; (await admin.zscore(redisKey(prefix, 'k'), member)) === null; i++) {
        if (i > 100) throw new Error('Redis never ran the call');
        await sleep(20);
      }
      // Redis holds it: the refund cannot be settled from the journal alone.
      expect(await limiter.refund('k', member)).toEqual({ refunded: true, permits: 1, pending: true });
      await (await proxy.getToxic<Latency>('slow-back')).remove();
      for (let i = 0; limiter.stats().refunds.pending > 0; i++) {
        if (i > 250) throw new Error('the refund was not written in 5 s');
        await limiter.reconcile();
        await sleep(20);
      }
      expect(await admin.zscore(redisKey(prefix, 'k'), member)).toBeNull();
    } finally {
      await limiter.close();
      redis.disconnect();
      await proxy.remove().catch(() => undefined);
    }
  }, 30_000);
});
