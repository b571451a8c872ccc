/**
 * `resilimit/koa`: rate limiting for Koa 3. {@link rateLimit} is a Koa middleware with the options,
 * fields and 429 (or 503) of `resilimit/http`'s. Koa is not loaded: only its types are imported.
 * @module
 */
import type { DefaultContext, DefaultState, Middleware, ParameterizedContext } from 'koa';
import { PROBLEM_TYPE } from './http/fields.js';
import { guard } from './http/guard.js';
import type { CommonHttpOptions, HttpLimiter } from './http/options.js';
import type { Decision } from './types.js';

// Koa's context is a RequestLike (it has `headers`, `method`, `url`, `originalUrl` and `socket`): the
// Node helpers take it as it is.
export * from './http/nodeKeys.js';
export type { HttpLimiter, ReducedCapacityAnswer } from './http/options.js';

/**
 * What {@link rateLimit} adds to `ctx.state`: `rateLimit`, the decision of the request (the last
 * middleware's, with several). Undefined for a skipped request.
 */
export type RateLimitState = { rateLimit?: Decision };

/**
 * Options of {@link rateLimit}: `resilimit/http`'s, each function given Koa's `ctx`. `S` and `C`: your
 * app's state and context types, as in `new Koa<S, C>()`.
 */
export type RateLimitOptions<S = DefaultState, C = DefaultContext> = Omit<
  CommonHttpOptions<ParameterizedContext<S, C>, ParameterizedContext<S, C>>,
  'requestWasSuccessful'
> & {
  /**
   * Whether a request whose whole response was sent succeeded, asked as its response closes. It must
   * return a boolean; if it throws or returns anything else, the request counts. Only with
   * `skipFailedRequests` or `skipSuccessfulRequests`.
   * @default status < 400
   */
  requestWasSuccessful?: (ctx: ParameterizedContext<S, C>) => boolean;
  /**
   * Writes the response to a rejected request in place of the default problem details body: set
   * `ctx.body`. When it is called, `ctx.status` is 429 (503 for a refusal of reduced capacity with
   * `reducedCapacity: 'temporary-reduced-capacity'`) and `Retry-After` and the RateLimit fields are
   * set. The middleware's promise waits for it; if it throws or rejects, the error goes to Koa's
   * error handling.
   * @default a 429 (or 503) with an `application/problem+json` body (RFC 9457), as `resilimit/http`'s
   */
  onLimited?: (ctx: ParameterizedContext<S, C>, decision: Decision) => void | Promise<void>;
};

/**
 * A Koa middleware that decides every request with `limiter` before it goes on, as
 * `resilimit/http`'s `rateLimit` does. Admitted: the RateLimit fields are set and the later
 * middleware run (`await next()`). Rejected: `ctx.status` 429 with `Retry-After` (whole seconds, at
 * least 1), the RateLimit fields and an RFC 9457 problem details body of the draft's
 * `quota-exceeded` type (or `onLimited`'s body), and nothing later runs; with `reducedCapacity:
 * 'temporary-reduced-capacity'`, a refusal of this instance's reduced capacity
 * (`decision.reducedCapacity`) is a 503 of the draft's `temporary-reduced-capacity` type instead. The
 * decision is `ctx.state.rateLimit` from then on.
 *
 * The default key is {@link byIp}: the TCP peer (`ctx.socket.remoteAddress`), not `ctx.ip`. To
 * follow Koa's explicit `app.proxy` setting, pass `key: (ctx) => \`ip:${ctx.ip}\``.
 *
 * With `skipFailedRequests` (or `skipSuccessfulRequests`), an admitted request whose response fails
 * (or succeeds) is refunded as Node's response (`ctx.res`) closes, as with `resilimit/http`.
 *
 * Errors reject the middleware's promise, for Koa's error handling (an upstream `try`/`catch`, or
 * Koa's default 500, which removes the fields with every other header): a `key`, `cost`, `skip`,
 * `partitionKey` or `onLimited` that throws, and the limiter's misuse errors. The limiter itself
 * never fails because of Redis.
 * @param limiter A `ResilientLimiter`. Closing it is yours; the middleware starts nothing.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a limiter or an option of the wrong type.
 * @example
 * const app = new Koa();
 * app.use(rateLimit(limiter, { key: byHeader('x-api-key') }));
 * app.use((ctx) => {
 *   ctx.body = `${ctx.state.rateLimit?.remaining} left`;
 * });
 */
export function rateLimit<S = DefaultState, C = DefaultContext>(
  limiter: HttpLimiter,
  options?: RateLimitOptions<S, C>,
): Middleware<S & RateLimitState, C> {
  const flow = guard('rateLimit', limiter, options, {
    // Koa writes fields to Node's response as they are set: they stay on whatever body comes later.
    getHeader: (ctx: ParameterizedContext<S, C>, name) => ctx.res.getHeader(name),
    setHeader: (ctx, name, value) => ctx.set(name, value),
    limited: (ctx, status) => void (ctx.status = status),
    sendProblem(ctx, body) {
      ctx.set('Content-Type', PROBLEM_TYPE); // before the body: Koa keeps a type that is set
      ctx.body = body;
    },
    raw: (ctx) => ctx.res,
    expose: (ctx: ParameterizedContext<S, C>, decision) => void ((ctx.state as RateLimitState).rateLimit = decision),
    onLimited: (onLimited: NonNullable<RateLimitOptions<S, C>['onLimited']>, ctx, _ctx, decision) => onLimited(ctx, decision),
  });
  return function rateLimitMiddleware(ctx, next) {
    return new Promise<void>((resolve, reject) => {
      flow(
        ctx,
        ctx,
        (error) => (error === undefined ? resolve(next()) : reject(error)),
        () => resolve(),
      );
    });
  };
}
