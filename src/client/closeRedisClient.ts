import type { RedisClient } from './clientType.js';
import { invalidOption } from '../base/errors.js';
import { integer } from '../base/checks.js';
import { portOf } from './portOf.js';
import { requireRuntime } from '../base/runtime.js';

/** Options of {@link closeRedisClient}. */
export type CloseRedisClientOptions = {
  /**
   * How long to wait for Redis to answer `QUIT`, in ms, before the connections are dropped.
   * Integer 0 … 60,000 (0: drop them at once, without `QUIT`).
   * @default 1000
   */
  timeoutMs?: number;
};

/**
 * Closes a client for good, whatever Redis does, so that a shutdown always ends. node-redis's:
 * `close()`, then `destroy()` when it is not ready, fails or is late; Valkey GLIDE's: `close()`.
 * ioredis's (and iovalkey's): when the client is ready it sends `QUIT` (pending replies arrive first) and waits
 * for the answer at most `timeoutMs`; when the client is not ready (Redis down: it is reconnecting),
 * when `QUIT` fails, or when no answer comes in time (a frozen Redis), it calls `disconnect()`, which
 * stops ioredis reconnecting, and closes the client's sockets at once. Never rejects for Redis's sake.
 *
 * Why not `quit()` alone: with `enableOfflineQueue: false` (as {@link createRedisClient} sets), a
 * client that is not connected rejects `quit()` at once and goes on reconnecting, so the process
 * never exits; against a frozen Redis, `quit()` waits forever.
 *
 * It resolves within about `timeoutMs`, and leaves nothing of the client running, except what
 * ioredis keeps to itself (measured on ioredis 6.0.0): with Redis down, `disconnect()` arms a timer
 * of `disconnectTimeout` (200 ms with {@link createRedisClient}, 2 s by ioredis's default) on the
 * socket already closed; on a Cluster, a refresh of the slots ioredis began by itself (a cold client
 * does, after its first commands) holds its own connection for up to `slotsRefreshTimeout` +
 * `disconnectTimeout` (3 s by default). The process can exit that much later.
 *
 * Close the limiters first: `close()` may still write to Redis.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when `client` is none of those clients or
 *   `timeoutMs` is out of range, `ERR_RESILIMIT_UNSUPPORTED_RUNTIME` on a Node.js older than 22.12 (a
 *   rejection of the returned promise).
 * @example
 * process.once('SIGTERM', async () => {
 *   await limiter.close();
 *   await closeRedisClient(redis);
 * });
 */
export async function closeRedisClient(redis: RedisClient, options: CloseRedisClientOptions = {}): Promise<void> {
  requireRuntime();
  const port = portOf(redis, 'client');
  await port.close(checkTimeout(options));
}

function checkTimeout(options: unknown): number {
  if (typeof options !== 'object' || options === null) throw invalidOption('options', 'an object', options);
  const value = (options as CloseRedisClientOptions).timeoutMs;
  return value === undefined ? 1000 : integer('timeoutMs', value, 0, 60_000);
}
