import { describe, ErrorCode, ResilimitError } from '../base/errors.js';
import { MAX_INT, type LimitFunction } from './options.js';

/**
 * Calls a `limit` function for `key` and checks what it returned.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when it throws or returns anything but an integer from 1 to 2^31 - 1.
 */
export function limitValue(fn: LimitFunction, key: string): number {
  const forKey = `for key ${JSON.stringify(key.length > 40 ? `${key.slice(0, 40)}…` : key)}`;
  let value: unknown;
  try {
    value = fn(key);
  } catch (error) {
    throw new ResilimitError(ErrorCode.INVALID_OPTION, `The \`limit\` function threw ${forKey}: ${String(error)}`, { cause: error });
  }
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_INT) {
    throw new ResilimitError(
      ErrorCode.INVALID_OPTION,
      `Expected the \`limit\` function to return an integer from 1 to ${MAX_INT}, got ${describe(value)} ${forKey}`,
    );
  }
  return value;
}
