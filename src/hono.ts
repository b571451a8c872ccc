/**
 * `resilimit/hono`: rate limiting for Hono 4. {@link rateLimit} is a Hono middleware with the
 * options, fields and 429 (or 503) of `resilimit/http`'s. Hono is not loaded: only its types are imported.
 * @module
 */
import type { Context, Env, MiddlewareHandler } from 'hono';
import { PROBLEM_TYPE } from './http/fields.js';
import { guard } from './http/guard.js';
import { byIp } from './http/honoKeys.js';
import type { ClosingResponse, CommonHttpOptions, HttpLimiter } from './http/options.js';
import type { Decision } from './types.js';

export type { AddressOptions } from './http/address.js';
export { byHeader, byIp, byIpFrom, byRoute, byRouteTemplate, byRouteWith } from './http/honoKeys.js';
export { combine, headerKey, type KeyFunction, type RouteKeyOptions } from './http/keys.js';
export type { HttpLimiter, ReducedCapacityAnswer } from './http/options.js';

/**
 * The variable {@link rateLimit} sets, `c.get('rateLimit')` or `c.var.rateLimit`: the decision of
 * the request (the last middleware's, with several). Undefined for a skipped request, and on routes
 * without the middleware. Importing `resilimit/hono` adds it to Hono's `ContextVariableMap`.
 */
export type RateLimitVariables = { rateLimit?: Decision };

declare module 'hono' {
  interface ContextVariableMap {
    /** The decision of {@link rateLimit} for this request; see {@link RateLimitVariables}. */
    rateLimit?: Decision;
  }
}

/**
 * Options of {@link rateLimit}: `resilimit/http`'s, each function given Hono's context `c`. `E`: your
 * app's `Env`, for the type of `c` in them (by default Hono's untyped context).
 */
// biome-ignore lint/suspicious/noExplicitAny: Hono's own default for a middleware's Env (MiddlewareHandler<E = any>)
export type RateLimitOptions<E extends Env = any> = Omit<CommonHttpOptions<Context<E>, Context<E>>, 'requestWasSuccessful'> & {
  /**
   * Whether a request whose whole response was sent succeeded. It must return a boolean; if it throws
   * or returns anything else, the request counts. Only with `skipFailedRequests` or `skipSuccessfulRequests`.
   * @default status < 400
   */
  requestWasSuccessful?: (c: Context<E>) => boolean;
  /**
   * Returns the response to a rejected request in place of the default problem details body. When it
   * is called, `c.status(429)` has been called (`c.status(503)` for a refusal of reduced capacity
   * with `reducedCapacity: 'temporary-reduced-capacity'`), so `c.json()` and `c.text()` answer with
   * it unless told otherwise, and `Retry-After` and the RateLimit fields are on `c.res`, which Hono
   * copies into the response returned. If it throws or rejects, the error goes to Hono's error
   * handling (`app.onError`).
   * @default a 429 (or 503) with an `application/problem+json` body (RFC 9457), as `resilimit/http`'s
   */
  onLimited?: (c: Context<E>, decision: Decision) => Response | Promise<Response>;
};

/** What the middleware's promise resolves to when the request goes on (anything else is the refusal's response). */
const PROCEED: unique symbol = Symbol('proceed');

/** Node's response where @hono/node-server serves the app (`c.env.outgoing`), for the skip options. */
function nodeResponse(c: Context): ClosingResponse | undefined {
  const outgoing = (c.env as { outgoing?: Partial<ClosingResponse> } | undefined)?.outgoing;
  return typeof outgoing?.once === 'function' && typeof outgoing.writableFinished === 'boolean' ? (outgoing as ClosingResponse) : undefined;
}

/**
 * What the skip options read where there is no Node response (`app.request()`, Bun, Deno, Workers):
 * it closes once the later handlers have returned, with `c.res`'s status, as a response sent whole
 * (a client that goes away is not seen there).
 */
class HandlersReturned implements ClosingResponse {
  statusCode = 0;
  readonly writableFinished = true;
  closed = false;
  #listener: (() => void) | undefined;

  once(_event: 'close', listener: () => void): this {
    this.#listener = listener;
    return this;
  }

  close(statusCode: number): void {
    this.statusCode = statusCode;
    this.closed = true;
    this.#listener?.();
  }
}

/**
 * A Hono middleware that decides every request with `limiter` before it goes on, as
 * `resilimit/http`'s `rateLimit` does. Admitted: the RateLimit fields are set and the later handlers
 * run (`await next()`). Rejected: a 429 with `Retry-After` (whole seconds, at least 1), the RateLimit
 * fields and an RFC 9457 problem details body of the draft's `quota-exceeded` type (or `onLimited`'s
 * response), and nothing later runs; with `reducedCapacity: 'temporary-reduced-capacity'`, a refusal
 * of this instance's reduced capacity (`decision.reducedCapacity`) is a 503 of the draft's
 * `temporary-reduced-capacity` type instead. The decision is `c.get('rateLimit')` (`c.var.rateLimit`) from
 * then on. The fields go on `c.res` before the handler runs, so Hono keeps them on whatever response
 * the handler returns.
 *
 * The default key is {@link byIp}: the TCP peer, which only `@hono/node-server` passes. Elsewhere,
 * give `key` ({@link byIpFrom} with the runtime's `getConnInfo`, or an identity).
 *
 * With `skipFailedRequests` (or `skipSuccessfulRequests`), an admitted request whose response fails
 * (or succeeds) is refunded. Under `@hono/node-server` that is as Node's response closes (a status of
 * 400 or more, or a connection cut short, fails); elsewhere once the later handlers have returned,
 * by `c.res.status`.
 *
 * Errors go to Hono's error handling (`app.onError`, by default a 500): a `key`, `cost`, `skip`,
 * `partitionKey` or `onLimited` that throws, and the limiter's misuse errors. The limiter itself
 * never fails because of Redis.
 * @param limiter A `ResilientLimiter`. Closing it is yours; the middleware starts nothing.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a limiter or an option of the wrong type.
 * @example
 * const app = new Hono();
 * app.use(rateLimit(limiter)); // served by @hono/node-server: one limit per client address
 * app.get('/', (c) => c.text(`${c.get('rateLimit')?.remaining} left`));
 */
// biome-ignore lint/suspicious/noExplicitAny: Hono's own default for a middleware's Env (MiddlewareHandler<E = any>)
export function rateLimit<E extends Env = any>(limiter: HttpLimiter, options?: RateLimitOptions<E>): MiddlewareHandler<E> {
  const returned = new WeakMap<Context<E>, HandlersReturned>();
  const flow = guard('rateLimit', limiter, options, {
    defaultKey: byIp,
    // On c.res itself, made now if need be: Hono copies its fields into the response a handler returns.
    getHeader: (c: Context<E>, name) => c.res.headers.get(name) ?? undefined,
    setHeader: (c, name, value) => c.res.headers.set(name, value),
    limited: (c, status) => c.status(status),
    sendProblem(c, body, status) {
      c.res = new Response(body, { status, headers: { 'content-type': PROBLEM_TYPE } });
    },
    raw(c) {
      const node = nodeResponse(c);
      if (node !== undefined) return node;
      const view = new HandlersReturned();
      returned.set(c, view);
      return view;
    },
    expose: (c: Context<E>, decision) => (c as Context).set('rateLimit', decision),
    onLimited: (onLimited: NonNullable<RateLimitOptions<E>['onLimited']>, c, _c, decision) => onLimited(c, decision),
  });
  return async function rateLimitMiddleware(c, next) {
    const written = await new Promise<unknown>((resolve, reject) => {
      flow(c, c, (error) => (error === undefined ? resolve(PROCEED) : reject(error)), resolve);
    });
    // The default body is on c.res already; onLimited's response becomes c.res as Hono takes it.
    if (written !== PROCEED) return written as Response | undefined;
    try {
      await next();
    } finally {
      const view = returned.get(c);
      if (view !== undefined) {
        returned.delete(c);
        view.close(c.res.status);
      }
    }
    return undefined;
  };
}
