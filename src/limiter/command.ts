import { ErrorCode, isResilimitError, ResilimitError } from '../base/errors.js';
import { isOpenRejection, isTimeout } from '../redis/Breaker.js';
import type { RedisTier } from '../redis/RedisTier.js';

/**
 * Runs a Redis call of `name` (`'reset()'`, `'block()'`) through the tier, in the ledger with no
 * decisions. `otherwise`: what the caller did all the same, for the error's message.
 * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` as Redis gave it; `ERR_RESILIMIT_REDIS_UNAVAILABLE`
 *   saying why for anything else (the breaker open, the deadline, the connection).
 */
export async function command<T>(tier: RedisTier, name: string, otherwise: string, run: () => Promise<T>): Promise<T> {
  try {
    return await tier.call(0, run);
  } catch (error) {
    if (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY) throw error;
    const why = isOpenRejection(error)
      ? 'the breaker is open'
      : isTimeout(error)
        ? `no answer within ${tier.timeoutMs} ms`
        : error instanceof Error
          ? error.message
          : String(error);
    throw new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, `${name} could not reach Redis (${why}): ${otherwise}`, { cause: error });
  }
}
