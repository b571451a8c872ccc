/**
 * The simulated service instances: each its own ioredis client (`createRedisClient`) through the
 * proxy, and its own `ResilientLimiter`, all limiting one shared key.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { BreakerOptions, ResilientLimiter } from '../../src/index.ts';
import type { ProxiedRedis } from '../../chaos/types.ts';
import type { Library } from '../../chaos/library.ts';
import type { DemoMode } from './options.ts';

/**
 * The breaker: the library's deadline (50 ms), but an open period of 0.5 s doubling to 1 s at most
 * (defaults: 1 s doubling to 30 s), so that recovery shows within seconds in a one-minute demo. The
 * client reconnects within about 1 s of Redis coming back, and the next trial follows within 1 s.
 */
export const DEMO_BREAKER: Readonly<Required<Pick<BreakerOptions, 'timeoutMs' | 'resetTimeoutMs' | 'maxResetTimeoutMs'>>> = {
  timeoutMs: 50,
  resetTimeoutMs: 500,
  maxResetTimeoutMs: 1000,
};

/** The one key every instance limits: a global limit. */
export const DEMO_KEY = 'global';
export const WINDOW_MS = 1000;

export type Fleet = {
  readonly limiters: readonly ResilientLimiter[];
  /** The instance count each limiter found through its heartbeats. */
  readonly counted: readonly number[];
  /** Closes the limiters, then quits the clients; bounded in time, never throws. */
  close(): Promise<void>;
};

const READY_TIMEOUT_MS = 5_000;
const COUNT_TIMEOUT_MS = 3_500;

/**
 * Connects `instances` clients through `redis`, waits until each is ready, creates the limiters
 * (`local.instances: 'auto'`), and waits until each has counted every instance by heartbeat (they
 * beat once a second), so that the local share is right before the load starts.
 * @throws Error when a client is not ready in 5 s; whatever was created is closed first.
 */
export async function startFleet(
  lib: Library,
  redis: ProxiedRedis,
  settings: { instances: number; limit: number; mode: DemoMode; prefix: string },
): Promise<Fleet> {
  const clients: Redis[] = Array.from({ length: settings.instances }, () => lib.createRedisClient({ host: redis.host, port: redis.port }));
  const limiters: ResilientLimiter[] = [];
  const close = async (): Promise<void> => {
    await Promise.allSettled(limiters.map((l) => l.close()));
    await Promise.allSettled(clients.map((c) => quit(c)));
  };
  try {
    await Promise.all(clients.map((c) => ready(c)));
    for (const client of clients) {
      limiters.push(
        new lib.ResilientLimiter({
          redis: client,
          prefix: settings.prefix,
          limit: settings.limit,
          windowMs: WINDOW_MS,
          mode: settings.mode,
          breaker: DEMO_BREAKER,
        }),
      );
    }
    const until = Date.now() + COUNT_TIMEOUT_MS;
    while (Date.now() < until && limiters.some((l) => l.stats().instances !== settings.instances)) await sleep(50);
  } catch (error) {
    await close();
    throw error;
  }
  return { limiters, counted: limiters.map((l) => l.stats().instances), close };
}

function ready(client: Redis): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onReady = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      client.off('ready', onReady);
      reject(new Error(`a Redis client was not ready after ${READY_TIMEOUT_MS} ms through the proxy (status ${client.status})`));
    }, READY_TIMEOUT_MS);
    client.once('ready', onReady);
  });
}

/** QUIT, or a plain disconnect when Redis does not answer it within a second. */
async function quit(client: Redis): Promise<void> {
  if (client.status !== 'ready') {
    client.disconnect();
    return;
  }
  const timer = setTimeout(() => client.disconnect(), 1000);
  try {
    await client.quit();
  } catch {
    client.disconnect();
  } finally {
    clearTimeout(timer);
  }
}
