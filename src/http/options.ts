import { unknownOption } from '../base/checks.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { MAX_KEY_LENGTH } from '../options/options.js';
import type { Decision, LimitOptions } from '../types.js';
import { byIp, type KeyFunction } from './keys.js';

/**
 * What the middleware needs of a limiter; a `ResilientLimiter` fits. `stats().windowMs` is read at
 * most once a second, for the `w` of `RateLimit-Policy`. `refund()`, and the admitted decision's `id`,
 * only with `skipFailedRequests` or `skipSuccessfulRequests`.
 */
export interface HttpLimiter {
  limit(key: string, options?: LimitOptions): Promise<Decision & { readonly id?: string | undefined }>;
  stats(): { readonly windowMs: number };
  refund?(key: string, id: string): Promise<unknown>;
}

/**
 * What `skipFailedRequests` and `skipSuccessfulRequests` read of Node's response as it closes (Node's
 * `ServerResponse`, Fastify's `reply.raw`).
 */
export interface ClosingResponse {
  readonly statusCode: number;
  /** The whole response was handed to the operating system. */
  readonly writableFinished: boolean;
  /** The response has closed (`'close'` was emitted). */
  readonly closed?: boolean;
  once(event: 'close', listener: () => void): unknown;
}

/**
 * How a refusal of reduced capacity is answered (see `Decision.reducedCapacity`): as any refusal, 429
 * with the draft's `quota-exceeded` problem type, or 503 with its `temporary-reduced-capacity` type.
 */
export type ReducedCapacityAnswer = 'quota-exceeded' | 'temporary-reduced-capacity';

/** The options both {@link rateLimit} and {@link rateLimitHook} take (`S`: the response, or Fastify's reply). */
export type CommonHttpOptions<R, S = unknown> = {
  /**
   * The key a request counts against. The helpers {@link byIp}, {@link byHeader}, {@link byRoute}
   * and {@link combine} make the usual ones. A key function that throws, or returns something that is
   * not a string of 1 … 1024 characters, fails the request through the framework's error handling.
   * @default byIp (the TCP peer's address; never `X-Forwarded-For`)
   */
  key?: KeyFunction<R>;
  /**
   * Permits the request takes: an integer from 1 to the limit. Anything else is a misuse error,
   * passed to the framework's error handling.
   * @default 1
   */
  cost?: (request: R) => number;
  /**
   * Requests for which this returns `true` are neither counted nor limited, and get no RateLimit
   * fields. It must return a boolean: anything else (a promise, say) fails the request rather than
   * skip it, so that a mistake cannot switch the limit off.
   */
  skip?: (request: R) => boolean;
  /**
   * `'draft-8'`: the `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers
   * (the format of drafts 08 to 11) on every limited response, admitted or rejected; `false`: none
   * (`Retry-After` is still sent with a 429).
   * @default 'draft-8'
   */
  headers?: 'draft-8' | false;
  /**
   * The policy's name in the RateLimit fields. Give each limiter on a route its own: their items are
   * then listed side by side in the same fields. 1 … 64 printable ASCII characters without `"` or `\`.
   * @default 'default'
   */
  policyName?: string;
  /**
   * How to answer a request refused for this instance's reduced capacity rather than for its quota
   * (`decision.reducedCapacity`: while Redis does not decide, the local window's share refused a
   * request that the whole limit had room for, or mode `'fail-closed'` refused).
   * `'quota-exceeded'`: as any refusal, 429 with the draft's `quota-exceeded` problem type.
   * `'temporary-reduced-capacity'`: 503 with the draft's `temporary-reduced-capacity` problem type,
   * `Retry-After`, and the lowered quota in `RateLimit-Policy` (`q`: the local share, 0 in
   * `'fail-closed'`). Refusals of the quota (Redis's, the deny cache's, a blocked key's, the local
   * window's when the whole limit is used up as far as it knows) stay 429 `quota-exceeded`.
   * @default 'quota-exceeded': a 5xx makes load balancers and meshes take the instance for a failing
   *   one (outlier ejection) and retry at once, during an outage that every instance shares; see
   *   docs/http.md.
   */
  reducedCapacity?: ReducedCapacityAnswer;
  /**
   * Adds the draft's partition key, `pk`, to the `RateLimit` field: the UTF-8 bytes of a string as a
   * Structured Fields Byte Sequence, `pk=:<base64>:` (the format of drafts 08 to 11). `true`: the
   * request's limiter key (`key`'s answer, such as `ip:203.0.113.7`); a function: what it returns
   * for the request, a string of 1 … 1024 characters (anything else fails the request, uncounted,
   * through the framework's error handling). The key is sent to the client and to whatever logs
   * responses on the way: send something that names no one (a tenant id, a hash) when the limiter
   * key would. Needs the fields: refused with `headers: false`.
   * @default false (no `pk`)
   */
  partitionKey?: boolean | ((request: R) => string);
  /**
   * Gives an admitted request's permit back once its response has failed: a status of 400 or more, or
   * a connection closed before the whole response was sent (what `requestWasSuccessful` says
   * otherwise). Only successes count then, as with express-rate-limit's option of this name. The
   * request counts while it runs (concurrent requests are limited as usual) and is refunded
   * (`limiter.refund()`) as its response closes; a refund that fails is ignored (the request counts).
   * @default false
   */
  skipFailedRequests?: boolean;
  /**
   * Gives an admitted request's permit back once its response has succeeded: a status below 400, the
   * whole response sent (what `requestWasSuccessful` says otherwise). Only failures count then: a
   * lock-out of failed attempts, say. As `skipFailedRequests`, at the response's close.
   * @default false
   */
  skipSuccessfulRequests?: boolean;
  /**
   * Whether a request whose whole response was sent succeeded, asked as its response closes (a
   * response cut short never did). It must return a boolean; if it throws or returns anything else,
   * the request counts (no refund). Only with `skipFailedRequests` or `skipSuccessfulRequests`.
   * @default status < 400
   */
  requestWasSuccessful?: (request: R, response: S) => boolean;
};

/** Options both middleware take, resolved. */
export type ResolvedHttpOptions<R, L, S = unknown> = Readonly<{
  key: KeyFunction<R>;
  cost: ((request: R) => number) | undefined;
  skip: ((request: R) => boolean) | undefined;
  onLimited: L | undefined;
  headers: boolean;
  policyName: string;
  reducedCapacity: ReducedCapacityAnswer;
  /** The partition key of a request whose limiter key is `key`; undefined: no `pk`. */
  partitionKey: ((request: R, key: string) => string) | undefined;
  /** Whether an admitted request is refunded as its response closes; undefined: never. */
  refundIf: ((request: R, response: S, raw: ClosingResponse) => boolean) | undefined;
}>;

const KNOWN = [
  'key',
  'cost',
  'skip',
  'onLimited',
  'headers',
  'policyName',
  'reducedCapacity',
  'partitionKey',
  'skipFailedRequests',
  'skipSuccessfulRequests',
  'requestWasSuccessful',
];
const POLICY_NAME = /^[\x20\x21\x23-\x5b\x5d-\x7e]{1,64}$/;

/** A function option, or undefined when absent. @throws {ResilimitError} for anything else. */
export function optionalFunction<F>(name: string, value: unknown): F | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw invalidOption(name, 'a function', value);
  return value as F;
}

/** A partition key function's answer, checked when each request is decided. */
function checkedPartitionKey(answer: unknown): string {
  if (typeof answer === 'string' && answer.length >= 1 && answer.length <= MAX_KEY_LENGTH) return answer;
  throw new ResilimitError(
    ErrorCode.INVALID_OPTION,
    `Expected \`partitionKey\` to return a string of 1 to ${MAX_KEY_LENGTH} characters, got ${describe(answer)}`,
  );
}

function resolvePartitionKey<R>(value: unknown, headers: boolean): ((request: R, key: string) => string) | undefined {
  if (value === undefined || value === false) return undefined;
  if (value !== true && typeof value !== 'function') throw invalidOption('partitionKey', 'a boolean or a function', value);
  // `pk` is a parameter of the RateLimit field: without the fields it would be dropped unseen.
  if (!headers) throw invalidOption('partitionKey', 'false or absent with `headers: false`', value);
  if (value === true) return (_request, key) => key;
  const f = value as (request: R) => unknown;
  return (request) => checkedPartitionKey(f(request));
}

/** A `policyName` option: `'default'` when absent. @throws {ResilimitError} for anything but a valid name. */
export function checkPolicyName(value: unknown): string {
  if (value === undefined) return 'default';
  if (typeof value !== 'string' || !POLICY_NAME.test(value)) {
    throw invalidOption('policyName', '1 to 64 printable ASCII characters without `"` or `\\`', value);
  }
  return value;
}

function optionalBoolean(name: string, value: unknown): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw invalidOption(name, 'a boolean', value);
  return value;
}

/** The rule of `skipFailedRequests` / `skipSuccessfulRequests`, or undefined when neither is on. */
function resolveRefunds<R, S>(options: Record<string, unknown>): ResolvedHttpOptions<R, unknown, S>['refundIf'] {
  const failed = optionalBoolean('skipFailedRequests', options['skipFailedRequests']);
  const successful = optionalBoolean('skipSuccessfulRequests', options['skipSuccessfulRequests']);
  const predicate = optionalFunction<(request: R, response: S) => unknown>('requestWasSuccessful', options['requestWasSuccessful']);
  if (!failed && !successful) {
    // It would be ignored: the author meant one of them.
    if (predicate !== undefined)
      throw invalidOption('requestWasSuccessful', 'absent unless `skipFailedRequests` or `skipSuccessfulRequests` is true', predicate);
    return undefined;
  }
  return (request, response, raw) => {
    if (!raw.writableFinished) return failed;
    if (predicate === undefined) return raw.statusCode < 400 ? successful : failed;
    let answer: unknown;
    try {
      answer = predicate(request, response);
    } catch {
      return false;
    }
    return answer === true ? successful : answer === false && failed;
  };
}

/** Checks the limiter given to `caller` (`rateLimit` or `rateLimitHook`). */
export function checkLimiter(caller: string, limiter: unknown): HttpLimiter {
  const l = limiter as Partial<Record<keyof HttpLimiter, unknown>> | null | undefined;
  if (typeof l?.limit !== 'function' || typeof l.stats !== 'function') {
    throw new ResilimitError(
      ErrorCode.INVALID_OPTION,
      `Expected the limiter of ${caller}() to be a ResilientLimiter, got ${describe(limiter)}`,
    );
  }
  return limiter as HttpLimiter;
}

/**
 * Validates the options of `caller` once, when the middleware is made, and returns a frozen copy.
 * `defaultKey`: the key without a `key` option, the framework's `byIp`.
 */
export function resolveHttpOptions<R, L, S = unknown>(
  caller: string,
  raw: unknown,
  defaultKey: KeyFunction<R> = byIp as KeyFunction<R>,
): ResolvedHttpOptions<R, L, S> {
  if (raw !== undefined && (typeof raw !== 'object' || raw === null || Array.isArray(raw))) {
    throw invalidOption('options', 'an object', raw);
  }
  const options = (raw ?? {}) as Record<string, unknown>;
  for (const name of Object.keys(options)) {
    // An option of another rate limiter (`trustProxy`, `keyGenerator`, `max`) would otherwise be
    // ignored without a word, and the limit would not be what its author thinks.
    if (!KNOWN.includes(name)) throw unknownOption(`${caller}()`, name, options[name], KNOWN);
  }
  const headers = options['headers'];
  if (headers !== undefined && headers !== 'draft-8' && headers !== false) {
    throw invalidOption('headers', "'draft-8' or false", headers);
  }
  const policyName = checkPolicyName(options['policyName']);
  const reducedCapacity = options['reducedCapacity'];
  if (reducedCapacity !== undefined && reducedCapacity !== 'quota-exceeded' && reducedCapacity !== 'temporary-reduced-capacity') {
    throw invalidOption('reducedCapacity', "'quota-exceeded' or 'temporary-reduced-capacity'", reducedCapacity);
  }
  return Object.freeze({
    key: optionalFunction<KeyFunction<R>>('key', options['key']) ?? defaultKey,
    cost: optionalFunction<(request: R) => number>('cost', options['cost']),
    skip: optionalFunction<(request: R) => boolean>('skip', options['skip']),
    onLimited: optionalFunction<L>('onLimited', options['onLimited']),
    headers: headers !== false,
    policyName,
    reducedCapacity: reducedCapacity ?? 'quota-exceeded',
    partitionKey: resolvePartitionKey<R>(options['partitionKey'], headers !== false),
    refundIf: resolveRefunds<R, S>(options),
  });
}
