/**
 * The Redis-tier contenders, each behind the same small interface. `decide` resolves with an
 * outcome label: `'allowed'` or `'denied'` when the store decided, anything else names who answered
 * instead (`'local:slow'`, `'fail-open:timeout'`, `'error'`), so that a throughput figure can count
 * only what each contender really decided in Redis.
 */
import { Ratelimit } from '@upstash/ratelimit';
import type { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { LimiterStats } from '../../src/index.ts';
import { waitReady } from '../../test/support/redis.ts';
import { naiveLimit } from './naive.ts';
import { createRedisClient, ResilientLimiter } from './resilimit.ts';
import type { BenchServer } from './server.ts';
import { upstashAdapter } from './upstashAdapter.ts';

export type Outcome = string;
export const STORE_OUTCOMES: readonly Outcome[] = ['allowed', 'denied'];

export type Contender = {
  readonly name: string;
  decide(key: string): Promise<Outcome>;
  /** resilimit only: its own counters. */
  stats?(): LimiterStats;
  /**
   * rate-limiter-flexible only: `calls` calls of `key` in one, leaving the store as that many calls
   * of `decide` would (one `consume(key, calls)`: the same counter, the TTL set at the key's first
   * call). Absent: a fill makes the calls one by one (resilimit's log holds one member per call).
   */
  fill?(key: string, calls: number): Promise<void>;
  close(): Promise<void>;
};

export type Window = { limit: number; windowMs: number };

export type ContenderFactory = { readonly name: string; create(server: BenchServer, window: Window): Promise<Contender> };

async function plainClient(server: BenchServer): Promise<Redis> {
  const client = server.redis.client();
  await waitReady(client);
  return client;
}

export function resilimitWith(name: string, extra: { coalesce?: boolean; resolutionMs?: number }): ContenderFactory {
  return {
    name,
    async create(server, { limit, windowMs }) {
      const redis = createRedisClient(server.redis.url);
      await waitReady(redis);
      const limiter = new ResilientLimiter({ redis, limit, windowMs, local: { instances: 1 }, ...extra });
      return {
        name,
        decide: (key) =>
          limiter.limit(key).then((d) => (d.source === 'redis' ? (d.allowed ? 'allowed' : 'denied') : `${d.source}:${d.reason}`)),
        stats: () => limiter.stats(),
        async close() {
          await limiter.close();
          redis.disconnect();
        },
      };
    },
  };
}

/** resilimit as documented: defaults, but a fixed instance count (no heartbeats in the way). */
export const resilimit = resilimitWith('resilimit ResilientLimiter', {});

/** With `coalesce: false`: one script call per decision (by default, the calls of one event-loop turn share script calls). */
export const resilimitOneByOne = resilimitWith('resilimit ResilientLimiter, coalesce: false', { coalesce: false });

export const rateLimiterFlexible: ContenderFactory = {
  name: 'rate-limiter-flexible RateLimiterRedis',
  async create(server, { limit, windowMs }) {
    const client = await plainClient(server);
    const limiter = new RateLimiterRedis({ storeClient: client, points: limit, duration: windowMs / 1000 });
    const denied = (error: unknown): Outcome => (error instanceof RateLimiterRes ? 'denied' : 'error');
    return {
      name: this.name,
      decide: (key) => limiter.consume(key).then(() => 'allowed', denied),
      fill: (key, calls) => limiter.consume(key, calls).then(() => undefined),
      async close() {
        client.disconnect();
      },
    };
  },
};

export const upstash: ContenderFactory = {
  name: '@upstash/ratelimit slidingWindow',
  async create(server, { limit, windowMs }) {
    const client = await plainClient(server);
    const limiter = new Ratelimit({
      redis: upstashAdapter(client),
      limiter: Ratelimit.slidingWindow(limit, `${windowMs / 1000} s`),
      ephemeralCache: false,
      analytics: false,
    });
    return {
      name: this.name,
      // Its `timeout` (5 s by default) answers success with reason 'timeout': not a Redis decision.
      decide: (key) =>
        limiter.limit(key).then((r) => (r.reason === undefined ? (r.success ? 'allowed' : 'denied') : `fail-open:${r.reason}`)),
      async close() {
        client.disconnect();
      },
    };
  },
};

/** The plain sliding-window script: one ZSET script per decision, no breaker (`support/naive.ts`). */
export const naive: ContenderFactory = {
  name: 'plain sliding-window script',
  async create(server, { limit, windowMs }) {
    const client = await plainClient(server);
    return {
      name: this.name,
      decide: (key) => naiveLimit(client, `naive:${key}`, limit, windowMs).then((ok) => (ok ? 'allowed' : 'denied')),
      async close() {
        client.disconnect();
      },
    };
  },
};
