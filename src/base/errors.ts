/**
 * Every error resilimit throws or rejects with. The `code` is stable across releases and listed in
 * the README's errors table.
 */
export const ErrorCode = {
  /** An option is missing, of the wrong type or out of range. */
  INVALID_OPTION: 'ERR_RESILIMIT_INVALID_OPTION',
  /** A key is not a non-empty, well-formed string within the length limit. */
  INVALID_KEY: 'ERR_RESILIMIT_INVALID_KEY',
  /** A cost is not an integer from 1 to the limit. */
  INVALID_COST: 'ERR_RESILIMIT_INVALID_COST',
  /** A request id is not a non-empty, well-formed string within the length limit. */
  INVALID_ID: 'ERR_RESILIMIT_INVALID_ID',
  /** Redis could not answer: connection lost or refused, timeout, client not ready, server busy or loading. */
  REDIS_UNAVAILABLE: 'ERR_RESILIMIT_REDIS_UNAVAILABLE',
  /** Redis answered with an error that is not about its availability: a bug in the script or its arguments, a key of another type. */
  REDIS_REPLY: 'ERR_RESILIMIT_REDIS_REPLY',
  /** The object was used after `close()`. */
  CLOSED: 'ERR_RESILIMIT_CLOSED',
  /** A wrapped function or decorated method was not run: its key is over its limit (`RateLimitedError`). */
  RATE_LIMITED: 'ERR_RESILIMIT_RATE_LIMITED',
  /** `acquire()` was called while `maxWaiters` calls of the limiter were already waiting. */
  TOO_MANY_WAITERS: 'ERR_RESILIMIT_TOO_MANY_WAITERS',
  /** A concurrency limit's slot was lost: its holder could not renew it within its lease (`SlotLostError`, a slot's `signal.reason`). */
  SLOT_LOST: 'ERR_RESILIMIT_SLOT_LOST',
  /** `settle()` or `cancel()` of a handle its `Budget` did not make, or of a reservation that was refused. */
  UNKNOWN_RESERVATION: 'ERR_RESILIMIT_UNKNOWN_RESERVATION',
  /** The Node.js running the package is older than its minimum (`engines` in package.json: 22.12): thrown by every function or constructor a user calls first. */
  UNSUPPORTED_RUNTIME: 'ERR_RESILIMIT_UNSUPPORTED_RUNTIME',
} as const;

/** One of the stable error codes. */
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

const brand = Symbol.for('resilimit.error');

/**
 * The base class of every resilimit error: a fixed `name`, a stable `code` and, where another error
 * caused it, `cause`.
 */
export class ResilimitError extends Error {
  override readonly name = 'ResilimitError';
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    Object.defineProperty(this, brand, { value: true });
  }
}

/**
 * True for any resilimit error, also one thrown by another copy of the package in the same process
 * (where `instanceof` would fail).
 */
export function isResilimitError(value: unknown): value is ResilimitError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}

/** Describes a value for an error message: `` `0` (number) ``. */
export function describe(value: unknown): string {
  if (typeof value === 'string') {
    const shown = value.length > 40 ? `${value.slice(0, 40)}…` : value;
    return `\`${JSON.stringify(shown)}\` (string of length ${value.length})`;
  }
  if (value === null) return '`null`';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'function') return 'a function';
  return `\`${String(value)}\` (${typeof value})`;
}

/** Builds the error for a bad option: ``Expected `windowMs` to be …, got `0` (number)``. */
export function invalidOption(name: string, expected: string, got: unknown): ResilimitError {
  return new ResilimitError(ErrorCode.INVALID_OPTION, `Expected \`${name}\` to be ${expected}, got ${describe(got)}`);
}
