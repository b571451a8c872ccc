import type { RedisClient } from './clientType.js';
import { knownOptions, MAX_INT, optionalInteger } from '../base/checks.js';
import { portOf } from './portOf.js';
import { requireRuntime } from '../base/runtime.js';

/** Options of {@link waitForRedis}. */
export type WaitForRedisOptions = {
  /** The longest wait, ms. @default 5000 */
  timeoutMs?: number;
};

/**
 * Waits until `redis` is ready, for at most `timeoutMs`, and never throws: resolves `true` once the
 * client is ready, `false` when the time is up (with the process warning `RESILIMIT_WAIT_FOR_REDIS`,
 * naming the client's status and last error). For a service's start-up: with Redis down, a wrong
 * address or a wrong password, the service still starts, and the limiter answers locally (reason
 * `'not-ready'`) until the client connects; the limiter's `notReady` warning then names the cause.
 * (`events.once(redis, 'ready')` rejects on the client's first `'error'` and so stops the start-up,
 * and waits forever when no error comes.) A Valkey GLIDE client counts as ready until it is closed
 * (docs/clients.md); a node-redis client not connected yet (`connect()` not called) answers `false` at once.
 *
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when `redis` is not a client resilimit takes or `timeoutMs` not an integer ≥ 0;
 *   `ERR_RESILIMIT_UNSUPPORTED_RUNTIME` on a Node.js older than 22.12.
 * @example
 * const redis = createRedisClient(process.env.REDIS_URL);
 * await waitForRedis(redis); // at most 5 s; never throws
 */
export function waitForRedis(client: RedisClient, options: WaitForRedisOptions = {}): Promise<boolean> {
  requireRuntime();
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
  // Errors only mean "not yet" while waiting; the last one is named if the wait gives up.
  let lastError: string | undefined;
  const onError = (error: unknown): void => {
    lastError = (error instanceof Error ? error.message : String(error)).slice(0, 200);
  };
  const giveUp = (): void => {
    done(false);
    process.emitWarning(
      `waitForRedis: the client (${redis.describe()}, status '${redis.status}'${lastError === undefined ? '' : `; its last error: ${lastError}`}) ` +
        `was not ready within ${timeoutMs} ms. Starting without Redis: each limiter answers as its mode says until it connects ` +
        '(its RESILIMIT_REDIS_NOT_READY warning, a second after it is made, says on what).',
      { type: 'ResilimitWarning', code: 'RESILIMIT_WAIT_FOR_REDIS' },
    );
  };
  const timer = setTimeout(giveUp, timeoutMs);
  const listening = [redis.on('ready', onReady), redis.on('error', onError)];
  return promise;
}
