import { ErrorCode, ResilimitError } from './errors.js';

/**
 * Server replies that say Redis cannot serve right now (busy script, loading a dump, failing over,
 * out of memory, a replica that cannot write), as opposed to replies about the request itself.
 */
const UNAVAILABLE_REPLY = /^(BUSY|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|READONLY|OOM|NOREPLICAS|NOTREADY)\b/;

/**
 * The one rule for what counts as "Redis cannot answer" (and so trips a breaker):
 *  - every error that is not a server reply: connection refused, reset or closed, a command timeout,
 *    a client that is not ready, retries exhausted, a cluster with no reachable node;
 *  - server replies listed above (`BUSY`, `LOADING`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`,
 *    `READONLY`, `OOM`, `NOREPLICAS`).
 * Any other reply (`ERR` from our script or its arguments, `WRONGTYPE`, `NOPERM`) is about the request,
 * not about Redis's health: it is reported as `ERR_RESILIMIT_REDIS_REPLY` and must not open a breaker.
 * Neither may a programming error of ours (`TypeError`, `RangeError`, `ReferenceError`, `SyntaxError`).
 */
export function isRedisUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return true;
  if (error.name === 'ReplyError') return UNAVAILABLE_REPLY.test(error.message);
  return !(
    error instanceof TypeError ||
    error instanceof RangeError ||
    error instanceof ReferenceError ||
    error instanceof SyntaxError
  );
}

/** Wraps an error from a Redis call into a coded resilimit error, keeping the original as `cause`. */
export function redisCallError(error: unknown): ResilimitError {
  const message = error instanceof Error ? error.message : String(error);
  return isRedisUnavailable(error)
    ? new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, `Redis could not answer: ${message}`, { cause: error })
    : new ResilimitError(ErrorCode.REDIS_REPLY, `Redis rejected the call: ${message}`, { cause: error });
}
