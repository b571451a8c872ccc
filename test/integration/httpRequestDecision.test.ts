/**
 * The decision is on the request (`req.rateLimit`), as express-rate-limit's users read it: Express
 * and Fastify, a real limiter on a real Redis.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeRedisClient, createRedisClient, type Decision, ResilientLimiter } from '../../src/index.js';
import { rateLimit, rateLimitHook } from '../../src/http.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;

beforeAll(async () => {
  server = await useRedis();
});

afterAll(async () => {
  await server?.close();
});

describe('req.rateLimit', () => {
  it('holds the decision in the handler (Express) and in onLimited', async () => {
    const redis = createRedisClient({ host: server.host, port: server.port });
    await waitReady(redis);
    const limiter = new ResilientLimiter({ redis, limit: 2, windowMs: 60_000, prefix: `t:${randomUUID()}:` });
    const app = express();
    const seen: (Decision | undefined)[] = [];
    app.use(
      rateLimit(limiter, {
        onLimited: (req, res) => {
          seen.push((req as { rateLimit?: Decision }).rateLimit);
          res.statusCode = 429;
          res.end();
        },
      }),
    );
    app.get('/', (req, res) => {
      seen.push((req as { rateLimit?: Decision }).rateLimit);
      res.send('ok');
    });
    const http = app.listen(0);
    await once(http, 'listening');
    const { port } = http.address() as AddressInfo;
    try {
      for (let i = 0; i < 3; i += 1) await fetch(`http://127.0.0.1:${port}/`);
      expect(seen.map((d) => [d?.allowed, d?.remaining, d?.limit, d?.source])).toEqual([
        [true, 1, 2, 'redis'],
        [true, 0, 2, 'redis'],
        [false, 0, 2, 'redis'],
      ]);
    } finally {
      http.close();
      await limiter.close();
      await closeRedisClient(redis);
    }
  });

  it('holds the decision in the route handler (Fastify), the hook put on routes without type arguments', async () => {
    const redis = createRedisClient({ host: server.host, port: server.port });
    await waitReady(redis);
    const limiter = new ResilientLimiter({ redis, limit: 5, windowMs: 60_000, prefix: `t:${randomUUID()}:` });
    const app = Fastify();
    // On a route, without type arguments: this type-checks (npm run typecheck) only since the hook's
    // types are not inferred from where it is put (they were `never`: TS2322).
    app.get('/', { onRequest: rateLimitHook(limiter) }, async (request) => ({
      remaining: (request as { rateLimit?: Decision }).rateLimit?.remaining,
    }));
    app.route({ method: 'GET', url: '/b', onRequest: [rateLimitHook(limiter)], handler: async () => 'b' });
    try {
      const reply = await app.inject({ method: 'GET', url: '/' });
      expect(reply.json()).toEqual({ remaining: 4 });
      expect((await app.inject({ method: 'GET', url: '/b' })).headers['ratelimit']).toBe('"default";r=3;t=60');
    } finally {
      await app.close();
      await limiter.close();
      await closeRedisClient(redis);
    }
  });
});
