import { ErrorCode, ResilimitError } from '../../base/errors.js';
import { loadScript } from './script.js';

/** `lua/refund.lua`: removes calls from a window by id (KEYS, ARGV and the reply in its header). */
export const refundScript = loadScript('refund');

/** The arguments of a refund of `calls` (each by its member id, with its cost when known: else '') in a window of `windowMs`. */
export function refundArgs(
  windowMs: number,
  nowArg: number | '',
  calls: readonly { readonly id: string; readonly cost: number | undefined }[],
): (string | number)[] {
  const args: (string | number)[] = [windowMs, nowArg];
  for (const call of calls) args.push(call.id, call.cost ?? '');
  return args;
}

/** The permits each call gave back, in order (0: not in the window). @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` for any other reply. */
export function readRefund(reply: unknown, count: number): number[] {
  const permits = typeof reply === 'string' ? reply.split(',').map(Number) : [];
  if (permits.length !== count || !permits.every((v) => Number.isSafeInteger(v) && v >= 0)) {
    throw new ResilimitError(ErrorCode.REDIS_REPLY, `Unexpected reply from the refund script: ${JSON.stringify(reply)}`);
  }
  return permits;
}
