import type { RedisClient } from './clientType.js';
import { knownOptions, optionalInteger } from '../options/checks.js';
import { MAX_INT } from '../options/windowOptions.js';
import { portOf } from './portOf.js';

/** Options of {@link waitForRedis}. */
export type WaitForRedisOptions = {
  /** The longest wait, ms. @default 5000 */
  timeoutMs?: number;
};

/**
 * Waits until `redis` is ready, for at most `timeoutMs`, and never throws: resolves `true` once the
 * client is ready, `false` when the time is up. For a service's start-up: with Redis down, a wrong
 * address or a wrong password, the service still starts, and the limiter answers locally (reason
 * `'not-ready'`) until the client connects; the limiter's `notReady` warning then names the cause.
 * (`events.once(redis, 'ready')` rejects on the client's first `'error'` and so stops the start-up,
 * and waits forever when no error comes.) A Valkey GLIDE client counts as ready until it is closed
 * (docs/clients.md); a node-redis client not connected yet (`connect()` not called) answers `false` at once.
 *
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when `redis` is not a client resilimit takes or `timeoutMs` not an integer ≥ 0.
 * @example
 * const redis = createRedisClient(process.env.REDIS_URL);
 * await waitForRedis(redis); // at most 5 s; never throws
 */
export function waitForRedis(client: RedisClient, options: WaitForRedisOptions = {}): Promise<boolean> {
  const redis = portOf(client);
  const checked = knownOptions('waitForRedis', options, ['timeoutMs'], { optional: true });
  const timeoutMs = optionalInteger('timeoutMs', checked['timeoutMs'], 0, MAX_INT, 5_000);
  if (redis.ready) return Promise.resolve(true);
  if (redis.ended) return Promise.resolve(false); // closed: it never will be
  const { promise, resolve } = Promise.withResolvers<boolean>();
  const done = (ready: boolean): void => {
    clearTimeout(timer);
    for (const unlisten of listening) unlisten();
    resolve(ready);
  };
  const onReady = (): void => done(true);
  // Errors are the client's to report (and the limiter's `notReady` names the last); waiting, they only mean "not yet".
  const ignore = (): void => {};
  const timer = setTimeout(() => done(false), timeoutMs);
  const listening = [redis.on('ready', onReady), redis.on('error', ignore)];
  return promise;
}
