/**
 * `resilimit/http`: rate limiting for HTTP servers. {@link rateLimit} is a `(req, res, next)`
 * middleware for Express, Connect and plain `node:http`; {@link rateLimitHook} is a Fastify
 * `onRequest` hook. No framework is imported: both work on Node's request and response and on the few
 * members of Fastify's request and reply they use. Hono and Koa have entries of their own,
 * `resilimit/hono` and `resilimit/koa`, on the same flow (`http/guard.ts`).
 * @module
 */
import { Buffer } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PROBLEM_TYPE } from './http/fields.js';
import { guard } from './http/guard.js';
import type { RequestLike } from './http/keys.js';
import type { ClosingResponse, CommonHttpOptions, HttpLimiter } from './http/options.js';
import type { Decision } from './types.js';

export * from './http/nodeKeys.js';
export type { ClosingResponse, CommonHttpOptions, HttpLimiter, ReducedCapacityAnswer } from './http/options.js';

/** Options of {@link rateLimit}. */
export type RateLimitOptions<Req = IncomingMessage, Res = ServerResponse> = CommonHttpOptions<Req, Res> & {
  /**
   * Writes the response to a rejected request in place of the default problem details body. When it
   * is called, the status is 429 (503 for a refusal of reduced capacity with `reducedCapacity:
   * 'temporary-reduced-capacity'`) and `Retry-After` and the RateLimit fields are set; it must end
   * the response. If it throws or rejects, the error goes to `next(error)`.
   * @default a 429 with an `application/problem+json` body (RFC 9457) of the draft's
   *   `quota-exceeded` problem type: `type`, `title`, `status`, `detail`, `violated-policies`
   *   (`[policyName]`) and `retryAfterMs` (a 503 of its `temporary-reduced-capacity` type, as above)
   */
  onLimited?: (req: Req, res: Res, decision: Decision) => void | Promise<void>;
};

/** The members of Fastify's reply that {@link rateLimitHook} uses (`raw` only with the skip options). */
export interface FastifyReplyLike {
  code(statusCode: number): unknown;
  header(key: string, value: string): unknown;
  getHeader(key: string): unknown;
  send(payload?: unknown): unknown;
  /** Node's response: read only with `skipFailedRequests` or `skipSuccessfulRequests`. */
  readonly raw?: ClosingResponse;
}

/** Options of {@link rateLimitHook}. */
export type RateLimitHookOptions<Req = RequestLike, Reply = FastifyReplyLike> = CommonHttpOptions<Req, Reply> & {
  /**
   * Sends the reply to a rejected request in place of the default problem details body. When it is
   * called, the status is 429 (or 503, as {@link rateLimit}'s) and `Retry-After` and the RateLimit
   * fields are set; it must call `reply.send()`. If it throws or rejects, the error goes to
   * Fastify's error handling.
   * @default a 429 (or 503) with an `application/problem+json` body, as {@link rateLimit}'s
   */
  onLimited?: (request: Req, reply: Reply, decision: Decision) => void | Promise<void>;
};

/** The middleware {@link rateLimit} returns. */
export type RateLimitMiddleware<Req, Res> = (req: Req, res: Res, next: (error?: unknown) => void) => void;

/** The hook {@link rateLimitHook} returns: Fastify's callback form of `onRequest`. */
export type RateLimitHook<Req, Reply> = (request: Req, reply: Reply, done: (error?: Error) => void) => void;

/** Puts the decision on the request as `rateLimit`, as express-rate-limit's users read it. */
function exposeOnRequest<Req>(req: Req, decision: Decision): void {
  (req as { rateLimit?: Decision }).rateLimit = decision;
}

/**
 * A middleware that decides every request with `limiter` before it goes on. Admitted: the
 * RateLimit fields are set and `next()` is called. Rejected: a 429 with `Retry-After` (whole
 * seconds, at least 1), the RateLimit fields and an RFC 9457 problem details body of the draft's
 * `quota-exceeded` type (or `onLimited`'s response), and `next` is not called. A decision made
 * without Redis (`source` `'local'`, `'fail-open'`, …) is a decision like any other; with
 * `reducedCapacity: 'temporary-reduced-capacity'`, one refused for this instance's reduced capacity
 * (`decision.reducedCapacity`) is a 503 of the draft's `temporary-reduced-capacity` type instead. The
 * decision is on the request as `req.rateLimit` (the last middleware's, with several) before `next()`
 * or the refusal.
 *
 * With `skipFailedRequests` (or `skipSuccessfulRequests`), an admitted request whose response fails
 * (or succeeds) is refunded with `limiter.refund()` as the response closes: only the others count.
 *
 * Errors go to `next(error)`, the way Express and Connect hand them to their error handlers: a `key`,
 * `cost`, `skip`, `partitionKey` or `onLimited` that throws, and the limiter's misuse errors (a key that is not 1 …
 * 1024 characters, a cost above the limit, a limiter closed). The limiter itself never fails
 * because of Redis.
 *
 * @param limiter A `ResilientLimiter`. Closing it is yours; the middleware starts nothing.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a limiter or an option of the wrong type.
 * @example
 * // Express or Connect
 * app.use(rateLimit(limiter, { key: combine(byIp, byRoute) }));
 * // node:http
 * const limit = rateLimit(limiter);
 * createServer((req, res) => limit(req, res, (error) => (error ? fail(res, error) : handle(req, res))));
 */
export function rateLimit<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  limiter: HttpLimiter,
  options?: RateLimitOptions<Req, Res>,
): RateLimitMiddleware<Req, Res> {
  const flow = guard('rateLimit', limiter, options, {
    getHeader: (res: Res, name) => res.getHeader(name),
    setHeader: (res, name, value) => void res.setHeader(name, value),
    limited: (res, status) => void (res.statusCode = status),
    sendProblem(res, body) {
      res.setHeader('Content-Type', PROBLEM_TYPE);
      res.setHeader('Content-Length', body.length); // ASCII only
      res.end(body);
    },
    raw: (res) => res,
    expose: exposeOnRequest<Req>,
    onLimited: (onLimited: NonNullable<RateLimitOptions<Req, Res>['onLimited']>, req: Req, res, decision) => onLimited(req, res, decision),
  });
  return function rateLimitMiddleware(req, res, next): void {
    flow(req, res, next);
  };
}

/**
 * A Fastify `onRequest` hook that decides every request with `limiter`, with the same behaviour as
 * {@link rateLimit}: admitted requests get the RateLimit fields and go on; rejected ones get a 429
 * (or 503, with `reducedCapacity`) with `Retry-After`, the fields and the problem details body (or
 * `onLimited`'s reply), and neither the later hooks nor the handler run. Errors (a throwing `key`, a
 * misuse error of the limiter) go to Fastify's error handling.
 *
 * It is the callback form of the hook: `done` is never called for a rejected request, so the chain
 * stops whatever the reply's `onSend` hooks do. (An async hook stops it only by resolving to `reply`,
 * whose promise settles once the response has ended; otherwise, with an async `onSend`, the handler
 * runs too.)
 *
 * The default key is {@link byIp}: the TCP peer, not `request.ip`. To follow Fastify's explicit
 * `trustProxy` setting, pass `key: (request) => request.ip`.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a limiter or an option of the wrong type.
 * @example
 * fastify.addHook('onRequest', rateLimitHook(limiter, { key: byHeader('x-api-key') }));
 */
export function rateLimitHook<Req extends RequestLike = RequestLike, Reply extends FastifyReplyLike = FastifyReplyLike>(
  limiter: HttpLimiter,
  options?: RateLimitHookOptions<Req, Reply>,
): RateLimitHook<NoInfer<Req>, NoInfer<Reply>> {
  const flow = guard('rateLimitHook', limiter, options, {
    getHeader: (reply: Reply, name) => reply.getHeader(name.toLowerCase()),
    setHeader: (reply, name, value) => void reply.header(name.toLowerCase(), value),
    limited: (reply, status) => void reply.code(status),
    sendProblem(reply, body) {
      reply.header('content-type', PROBLEM_TYPE);
      // As bytes: Fastify adds `; charset=utf-8` to a JSON type sent as a string, and JSON has no charset.
      reply.send(Buffer.from(body, 'latin1'));
    },
    raw: (reply) => reply.raw,
    expose: exposeOnRequest<Req>,
    onLimited: (onLimited: NonNullable<RateLimitHookOptions<Req, Reply>['onLimited']>, request: Req, reply, decision) =>
      onLimited(request, reply, decision),
  });
  return function rateLimitHook(request, reply, done): void {
    flow(request, reply, (error?: unknown) => (error === undefined ? done() : done(error as Error)));
  };
}
