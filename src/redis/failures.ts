import { isOpenRejection, isTimeout } from './Breaker.js';
import { ErrorCode, isResilimitError, ResilimitError } from '../base/errors.js';
import type { DecisionReason } from '../types.js';

/**
 * Server replies that say this server cannot serve anyone right now, whatever the request (the
 * texts of Redis 7.0's `server.c`, which Redis 7.2+ and Valkey keep; an error raised by a command
 * inside our scripts reaches us with its own code since Redis 7.0):
 * - `BUSY` a script or function is running past `busy-reply-threshold`; `LOADING` a dump is loading;
 * - `MASTERDOWN` a replica lost its master; `READONLY` a replica (a failover in progress);
 * - `TRYAGAIN`, `CLUSTERDOWN` a Cluster resharding or down;
 * - `OOM` out of memory; `MISCONF` the last save failed and writes are refused
 *   (`stop-writes-on-bgsave-error`); `NOREPLICAS` fewer good replicas than `min-replicas-to-write`;
 * - `NOTREADY` a server (or module) not ready to serve yet, kept from earlier versions of this rule;
 * - `NOAUTH`, `WRONGPASS` the connection is not authenticated: every call of this client fails;
 * - `ERR max number of clients reached`: the server refuses the connection itself.
 */
const UNAVAILABLE_REPLY =
  /^(?:(?:BUSY|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|READONLY|OOM|MISCONF|NOREPLICAS|NOTREADY|NOAUTH|WRONGPASS)\b|ERR max number of clients reached)/;

/**
 * The one rule for what counts as "Redis cannot answer" (and so trips a breaker, and a call answered
 * locally meanwhile is journalled, to be written back once Redis can take it):
 *  - every error that is not a server reply: connection refused, reset or closed, a command timeout,
 *    a client that is not ready, retries exhausted, a cluster with no reachable node;
 *  - the server replies listed above: the server's state, not the request, is what fails.
 * Any other reply is about the request, not about Redis's health: `ERR` from our script or its
 * arguments, `WRONGTYPE` (another program wrote this key with another type), `NOPERM` (an ACL refuses
 * this command or this key: it can be one key), `CROSSSLOT`, `NOSCRIPT` (handled before it gets here).
 * It is reported as `ERR_RESILIMIT_REDIS_REPLY` and must not open a breaker: one bad key must not send
 * every key to the fallback. Neither may a programming error of ours (`TypeError`, `RangeError`,
 * `ReferenceError`, `SyntaxError`).
 */
export function isRedisUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return true;
  if (error.name === 'ReplyError') return UNAVAILABLE_REPLY.test(error.message);
  return !isProgrammingError(error);
}

/** A programming error (ours or the runtime's): neither Redis's unavailability nor a reply of Redis's. */
export function isProgrammingError(error: unknown): error is Error {
  return error instanceof TypeError || error instanceof RangeError || error instanceof ReferenceError || error instanceof SyntaxError;
}

/**
 * Wraps an error from a Redis call into a coded resilimit error, keeping the original as `cause`; a
 * programming error is thrown as it is (see {@link reasonOf}).
 */
export function redisCallError(error: unknown): ResilimitError {
  if (isProgrammingError(error)) throw error;
  const message = error instanceof Error ? error.message : String(error);
  return isRedisUnavailable(error)
    ? new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, `Redis could not answer: ${message}`, { cause: error })
    : new ResilimitError(ErrorCode.REDIS_REPLY, `Redis rejected the call: ${message}`, { cause: error });
}

/** The rejection of a call made while the client is not connected: nothing was sent. */
export const NOT_READY = new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, 'The Redis client is not ready');

/**
 * The reason a decision gets when its Redis call failed with `error`. A reply error (Redis answered
 * that it cannot take this call) is also handed to `onReplyError`, as a coded error.
 * @throws the error itself when it is a programming error (`TypeError`, …): a bug of ours or a missing
 *   runtime feature is not Redis's doing, and is not hidden behind a fallback answer.
 */
export function reasonOf(error: unknown, onReplyError: (error: ResilimitError) => void): DecisionReason {
  if (isProgrammingError(error)) throw error;
  if (isOpenRejection(error)) return 'breaker-open';
  if (isTimeout(error)) return 'timeout';
  if (error === NOT_READY) return 'not-ready';
  if (isResilimitError(error) && error.code === ErrorCode.REDIS_UNAVAILABLE) return 'redis-error';
  onReplyError(
    isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY
      ? error
      : new ResilimitError(ErrorCode.REDIS_REPLY, `Unexpected failure of a Redis call: ${String(error)}`, { cause: error }),
  );
  return 'redis-reply-error';
}
