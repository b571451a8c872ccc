/**
 * A test file's Redis and limiters: one `redis-server` child for the file, a client per limiter, and
 * every limiter and client closed after each test. Call it at the top of a file (it registers the
 * vitest hooks).
 */
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createRedisClient, ResilientLimiter, type LimiterDecision, type ResilientLimiterOptions } from '../../src/index.js';
import { startRedisServer, waitReady, type RedisChild } from './redis.js';

export type Limiters = {
  /** The file's server (set once `beforeAll` ran). */
  readonly server: RedisChild;
  /** The test's own client, to read what the limiters wrote. */
  readonly admin: Redis;
  /** A new client made as the README says (`createRedisClient`), ready, closed after the test. */
  client(): Promise<Redis>;
  /** A limiter on a client of its own: `defaults` of the file, then `options`; closed after the test. */
  limiter(options?: Partial<ResilientLimiterOptions>): Promise<ResilientLimiter>;
  /** The client `limiter()` made for `l` (to wait for its reconnect, say). */
  clientOf(l: ResilientLimiter): Redis;
  /** Closes `l` after the test (for a limiter made by hand). */
  track<T extends ResilientLimiter>(l: T): T;
};

/**
 * Registers the hooks and returns the file's helpers. `defaults`: options every `limiter()` of the file
 * gets (a prefix of its own per limiter unless they name one); without `limit` and `windowMs`, every
 * `limiter()` names them.
 */
export function useLimiters(defaults: Partial<ResilientLimiterOptions>): Limiters {
  let server: RedisChild | undefined;
  let admin: Redis | undefined;
  const clients: Redis[] = [];
  const limiters: ResilientLimiter[] = [];
  const clientOf = new WeakMap<ResilientLimiter, Redis>();
  beforeAll(async () => {
    server = await startRedisServer();
    admin = server.client();
    await waitReady(admin);
  });
  afterEach(async () => {
    await Promise.all(limiters.splice(0).map((l) => l.close()));
    for (const c of clients.splice(0)) c.disconnect();
  });
  afterAll(async () => {
    await server?.close();
  });
  const helpers: Limiters = {
    get server() {
      if (server === undefined) throw new Error('useLimiters: the server starts in beforeAll');
      return server;
    },
    get admin() {
      if (admin === undefined) throw new Error('useLimiters: the server starts in beforeAll');
      return admin;
    },
    async client() {
      const redis = createRedisClient({ host: '127.0.0.1', port: helpers.server.port });
      clients.push(redis);
      await waitReady(redis);
      return redis;
    },
    async limiter(options = {}) {
      const redis = await helpers.client();
      // A file whose defaults leave out `limit` or `windowMs` names them at each call (the constructor checks).
      const all = { redis, prefix: `t:${crypto.randomUUID()}:`, ...defaults, ...options } as ResilientLimiterOptions;
      const l = helpers.track(new ResilientLimiter(all));
      clientOf.set(l, redis);
      return l;
    },
    clientOf(l) {
      const redis = clientOf.get(l);
      if (redis === undefined) throw new Error('useLimiters: not a limiter of limiter()');
      return redis;
    },
    track(l) {
      limiters.push(l);
      return l;
    },
  };
  return helpers;
}

/** `n` calls of `l.limit(key, options)`, one after another. */
export async function run(l: ResilientLimiter, key: string, n: number, options?: { cost?: number }): Promise<LimiterDecision[]> {
  const out: LimiterDecision[] = [];
  for (let i = 0; i < n; i++) out.push(await l.limit(key, options));
  return out;
}
