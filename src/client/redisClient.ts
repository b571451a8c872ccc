import { createRequire } from 'node:module';
import type { Redis, RedisOptions } from 'ioredis';
import type { RedisPort } from './port.js';
import { ErrorCode, ResilimitError } from '../base/errors.js';
import { followFailovers } from './followFailovers.js';
import { requireRuntime } from '../base/runtime.js';

/**
 * The client settings resilimit needs on a request path, and why:
 * - `enableOfflineQueue: false`: while disconnected, a command fails at once instead of queueing
 *   without bound and replaying later (a replayed ZADD is quota spent twice);
 * - `maxRetriesPerRequest: 0`: an in-flight command fails when its connection closes, instead of
 *   being retried for up to ~73 s; with it, `autoResendUnfulfilledCommands` re-sends nothing;
 * - `connectTimeout: 1000`: a black-holed connect fails in 1 s, not 10 s;
 * - a reconnect back-off of 50 ms doubling to 1 s, with jitter, forever (the breaker, not the
 *   client, decides when to give up on Redis);
 * - `enableAutoPipelining: false` (measured here: it raised p99 on loopback);
 * - `disconnectTimeout: 200`: `disconnect()` ends a socket and destroys it if the server has not
 *   closed its side by then (a round trip to a healthy server is far less); with Redis down, ioredis
 *   arms that timer on the socket already closed, and it held the process 2 s (its default) after
 *   `closeRedisClient()`; a frozen server never closes its side;
 * - `reconnectOnError`: a `READONLY` reply reconnects (without re-sending the command): behind an
 *   address repointed at a failover (a DNS name, a proxy, a Kubernetes Service), a connection made
 *   before keeps reaching the demoted master, which refuses every write while it answers PING; a
 *   new connection reaches the new master (measured: never again in 5 s without it);
 * - with Sentinel (`sentinels` and `name`; ignored otherwise), `sentinelCommandTimeout: 500`: a
 *   Sentinel that accepts connections but does not answer (frozen, overloaded) costs a reconnect
 *   500 ms before the next Sentinel is asked; without it, the client waits for it forever (measured).
 *   ioredis's `failoverDetector` is left off: {@link createRedisClient} follows failovers itself
 *   (see `followFailovers.ts` for why).
 */
export const SAFE_CLIENT_OPTIONS = Object.freeze({
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  autoResendUnfulfilledCommands: false,
  connectTimeout: 1000,
  enableAutoPipelining: false,
  disconnectTimeout: 200,
  retryStrategy: (times: number): number => Math.min(50 * 2 ** Math.min(times - 1, 6), 1000) + Math.floor(Math.random() * 50),
  reconnectOnError: (error: Error): boolean => error.message.startsWith('READONLY'),
  sentinelCommandTimeout: 500,
}) satisfies RedisOptions;

/**
 * ioredis's module, loaded when first needed: resilimit runs without it for the users of another
 * client (it is an optional peer dependency).
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when ioredis is not installed.
 */
function ioredis(): typeof import('ioredis') {
  try {
    return createRequire(import.meta.url)('ioredis') as typeof import('ioredis');
  } catch (error) {
    throw new ResilimitError(
      ErrorCode.INVALID_OPTION,
      'createRedisClient() makes an ioredis client: install ioredis (npm install ioredis)',
      { cause: error },
    );
  }
}

/** ioredis options accepted by {@link createRedisClient} (RESP3 reply mapping is not supported). */
export type ClientOptions = Omit<RedisOptions, 'replyMapping'>;

/**
 * Creates an ioredis client with {@link SAFE_CLIENT_OPTIONS} (your options win where given) and an
 * `'error'` listener, so that a Redis outage never crashes the process through an unhandled
 * `'error'` event. You own the client: close it with `closeRedisClient()` when done (`quit()`
 * alone never ends while Redis is down).
 *
 * With Redis Sentinel (`sentinels` and `name`), the client also follows a failover as soon as a
 * Sentinel announces it (`+switch-master`), through one connection to each listed Sentinel, closed
 * with the client.
 *
 * @throws {ResilimitError} `ERR_RESILIMIT_UNSUPPORTED_RUNTIME` on a Node.js older than 22.12.
 * @example
 * const redis = createRedisClient(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
 * @example
 * // Redis Sentinel: the Sentinels' addresses and the master group's name
 * const redis = createRedisClient({ sentinels: [{ host: '10.0.0.1', port: 26379 }], name: 'mymaster' });
 */
export function createRedisClient(urlOrOptions: string | ClientOptions, options: ClientOptions = {}): Redis {
  requireRuntime();
  const { Redis } = ioredis();
  const client =
    typeof urlOrOptions === 'string'
      ? new Redis(urlOrOptions, { ...SAFE_CLIENT_OPTIONS, ...options })
      : new Redis({ ...SAFE_CLIENT_OPTIONS, ...urlOrOptions, ...options });
  client.on('error', () => {
    // Connection errors are reported through the limiter's decisions and stats; reconnection is automatic.
  });
  followFailovers(client, Redis);
  return client;
}

const warned = new WeakSet<object>();

/**
 * Emits one process warning (`RESILIMIT_UNSAFE_REDIS_CLIENT`) per client whose settings make calls
 * wait or replay while Redis is down: an offline queue, or retries per request.
 */
export function warnIfUnsafe(port: RedisPort): void {
  if (warned.has(port)) return;
  const problems = port.unsafeSettings();
  if (problems.length === 0) return;
  warned.add(port);
  const advice =
    port.library === 'ioredis'
      ? 'Use createRedisClient() from resilimit, or set enableOfflineQueue: false and maxRetriesPerRequest: 0.'
      : 'Set disableOfflineQueue: true when you create it.';
  process.emitWarning(
    `This ${port.library} client's settings let commands queue and replay while Redis is down (${problems.join('; ')}). ${advice}`,
    { type: 'ResilimitWarning', code: 'RESILIMIT_UNSAFE_REDIS_CLIENT' },
  );
}
