/**
 * The Redis and limiters of the HTTP middleware tests (`http.test.ts`, `honoKoa.test.ts`): one Redis
 * for the file, one client shared by every limiter, and every served app, then every limiter, closed
 * after each test. Call it at the top of a file (it registers the vitest hooks).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createRedisClient, ResilientLimiter, type ResilientLimiterOptions } from '../../src/index.js';
import type { App } from './httpReplies.js';
import { useRedis, waitReady, type RedisHandle } from './redis.js';

/** The limiters' window: the RateLimit fields' `w` and a full Retry-After are 60. */
export const WINDOW_MS = 60_000;

export type HttpLimiters = {
  /** The apps a test served: push them to have them closed after the test. */
  readonly apps: App[];
  /** The limiters made so far (closed after the test, or earlier by splicing them out). */
  readonly limiters: ResilientLimiter[];
  /** A limiter of 3 over {@link WINDOW_MS} for 1 instance on the shared client: the file's `defaults`, then `options`. */
  limiter(options?: Partial<ResilientLimiterOptions>): ResilientLimiter;
};

/**
 * Registers the hooks and returns the file's helpers. `name`: the start of each limiter's prefix (a
 * prefix of its own per limiter); `defaults`: options every limiter of the file gets.
 */
export function useHttpLimiters(name: string, defaults: Partial<ResilientLimiterOptions> = {}): HttpLimiters {
  let redisServer: RedisHandle | undefined;
  let redis: Redis | undefined;
  const limiters: ResilientLimiter[] = [];
  const apps: App[] = [];
  beforeAll(async () => {
    redisServer = await useRedis();
    redis = createRedisClient(redisServer.url);
    await waitReady(redis);
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((a) => a.close()));
    await Promise.all(limiters.splice(0).map((l) => l.close()));
  });
  afterAll(async () => {
    await redis?.quit();
    await redisServer?.close();
  });
  return {
    apps,
    limiters,
    limiter(options = {}) {
      if (redis === undefined) throw new Error('useHttpLimiters: Redis starts in beforeAll');
      const l = new ResilientLimiter({
        redis,
        limit: 3,
        windowMs: WINDOW_MS,
        prefix: `${name}:${randomUUID()}:`,
        local: { instances: 1 },
        // A generous deadline: these tests are about HTTP, so Redis must decide even on a loaded machine.
        breaker: { timeoutMs: 2000 },
        ...defaults,
        ...options,
      });
      limiters.push(l);
      return l;
    },
  };
}

/** Polls (bounded: 2 s) until `key`'s window has `remaining` permits: a refund runs as the response closes, after the client has it. */
export async function remainingBecomes(l: Pick<ResilientLimiter, 'peek'>, remaining: number, key: string): Promise<void> {
  for (let i = 0; (await l.peek(key)).remaining !== remaining; i += 1) {
    if (i > 200) throw new Error(`remaining ${(await l.peek(key)).remaining}, not ${remaining}`);
    await sleep(10);
  }
}
