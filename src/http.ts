/**
 * `resilimit/http`: rate limiting for HTTP servers. {@link rateLimit} is a `(req, res, next)`
 * middleware for Express, Connect and plain `node:http`; {@link rateLimitHook} is a Fastify
 * `onRequest` hook. {@link concurrencyLimit} and {@link concurrencyLimitHook} are their counterparts
 * for a `ConcurrencyLimiter`: how many requests of a key run at once. No framework is imported: both work on Node's request and response and on the few
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
import {
  type ConcurrencyLimitCommonOptions,
  type HttpSlotLimiter,
  type SlotRefusal,
  type SlotResponse,
  slotGuard,
} from './http/slotGuard.js';
import type { HeldSlot } from './limiter/ConcurrencyLimiter.js';
import type { Decision } from './types.js';

export * from './http/nodeKeys.js';
export type { ClosingResponse, CommonHttpOptions, HttpLimiter, ReducedCapacityAnswer } from './http/options.js';
export type { ConcurrencyLimitCommonOptions, HttpSlotLimiter, SlotRefusal, SlotResponse } from './http/slotGuard.js';

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

/** Options of {@link concurrencyLimit}. */
export type ConcurrencyLimitOptions<Req = IncomingMessage, Res = ServerResponse> = ConcurrencyLimitCommonOptions<Req> & {
  /**
   * Writes the response to a request that got no slot within `maxWaitMs`, in place of the default
   * problem details body. When it is called, the status is 429; it must end the response. If it
   * throws or rejects, the error goes to `next(error)`.
   * @default a 429 with an `application/problem+json` body (RFC 9457) of the draft's `quota-exceeded`
   *   type: `type`, `title`, `status`, `detail` and `violated-policies` (`[policyName]`)
   */
  onLimited?: (req: Req, res: Res, refusal: SlotRefusal) => void | Promise<void>;
};

/** The members of Fastify's reply that {@link concurrencyLimitHook} uses. */
export interface FastifySlotReplyLike {
  code(statusCode: number): unknown;
  header(key: string, value: string): unknown;
  send(payload?: unknown): unknown;
  /** Node's response: its `'finish'` and `'close'` give the slot back. */
  readonly raw: SlotResponse;
}

/** Options of {@link concurrencyLimitHook}. */
export type ConcurrencyLimitHookOptions<Req = RequestLike, Reply = FastifySlotReplyLike> = ConcurrencyLimitCommonOptions<Req> & {
  /**
   * Sends the reply to a request that got no slot within `maxWaitMs`, in place of the default problem
   * details body. When it is called, the status is 429; it must call `reply.send()`. If it throws or
   * rejects, the error goes to Fastify's error handling.
   * @default a 429 with an `application/problem+json` body, as {@link concurrencyLimit}'s
   */
  onLimited?: (request: Req, reply: Reply, refusal: SlotRefusal) => void | Promise<void>;
};

/** Puts the held slot on the request as `slot`: see {@link slotOf}. */
function exposeSlot(req: unknown, slot: HeldSlot): void {
  (req as { slot?: HeldSlot }).slot = slot;
}

/**
 * The slot {@link concurrencyLimit} or {@link concurrencyLimitHook} took for `request` (it is
 * `request.slot`), or undefined when none did (skipped, or no such middleware on the route). Its
 * `signal` aborts if the slot is lost while the request runs (this process could not renew it for a
 * whole lease, so another holder may have it): the middleware cannot stop the handler, the handler
 * should stop its work, e.g. `fetch(url, { signal: slotOf(req)?.signal })`. Do not release it: the
 * middleware does, when the response ends or the client goes away.
 */
export function slotOf(request: object): HeldSlot | undefined {
  return (request as { slot?: HeldSlot }).slot;
}

/**
 * A middleware that lets at most the limiter's `max` requests of a key run at once across every
 * instance (a `ConcurrencyLimiter`). Each request takes `cost` slots of its key before `next()` is
 * called, waiting up to `maxWaitMs` (FIFO within this process); none by then: a 429 with an RFC 9457
 * problem details body (or `onLimited`'s response), and `next` is not called. The slot is on the
 * request as `req.slot` ({@link slotOf}) and is given back exactly once, at the first of: the
 * response sent (`'finish'`), the connection closed before that (`'close'`: the client went away), or
 * a synchronous throw out of `next()`. A handler that fails through `next(error)` holds its slot until
 * the error handler's response ends. A client that goes away while its request waits ends the wait:
 * nothing is taken or answered, and `next` is not called.
 *
 * A slot lost while the request runs aborts `req.slot.signal`; the handler keeps running unless it
 * listens (see {@link slotOf}). While Redis cannot answer, the limiter's `mode` answers: a request is
 * never failed because of Redis. Errors go to `next(error)`: a `key`, `cost`, `skip` or `onLimited`
 * that throws, and the limiter's misuse errors (a key that is not 1 … 1024 characters, a cost above
 * `max`, a limiter closed).
 *
 * @param limiter A `ConcurrencyLimiter`. Closing it is yours.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`, when the middleware is made, for a limiter or
 *   an option of the wrong type (a `cost` outside 1 … max, a `maxWaitMs` that is not an integer ≥ 0).
 * @example
 * const exports = new ConcurrencyLimiter({ redis, max: 5, prefix: 'exports:' });
 * app.post('/export', concurrencyLimit(exports, { key: byHeader('x-tenant'), maxWaitMs: 2_000 }), runExport);
 */
export function concurrencyLimit<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  limiter: HttpSlotLimiter,
  options?: ConcurrencyLimitOptions<Req, Res>,
): RateLimitMiddleware<Req, Res> {
  const flow = slotGuard('concurrencyLimit', limiter, options, {
    raw: (res: Res) => res,
    expose: exposeSlot,
    limited: (res) => void (res.statusCode = 429),
    sendProblem(res, body) {
      res.setHeader('Content-Type', PROBLEM_TYPE);
      res.setHeader('Content-Length', body.length); // ASCII only
      res.end(body);
    },
    onLimited: (onLimited: NonNullable<ConcurrencyLimitOptions<Req, Res>['onLimited']>, req: Req, res, refusal) =>
      onLimited(req, res, refusal),
  });
  return function concurrencyLimitMiddleware(req, res, next): void {
    flow(req, res, next);
  };
}

/**
 * A Fastify `onRequest` hook with the behaviour of {@link concurrencyLimit}: a request goes on holding
 * `cost` slots of its key (`request.slot`, {@link slotOf}), given back when `reply.raw` finishes or
 * closes (Fastify's error replies included), or gets a 429 (or `onLimited`'s reply) when none came
 * within `maxWaitMs`. Errors go to Fastify's error handling.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a limiter or an option of the wrong type.
 * @example
 * fastify.addHook('onRequest', concurrencyLimitHook(partnerCalls, { key: () => 'partner', maxWaitMs: 1_000 }));
 */
export function concurrencyLimitHook<Req extends RequestLike = RequestLike, Reply extends FastifySlotReplyLike = FastifySlotReplyLike>(
  limiter: HttpSlotLimiter,
  options?: ConcurrencyLimitHookOptions<Req, Reply>,
): RateLimitHook<NoInfer<Req>, NoInfer<Reply>> {
  const flow = slotGuard('concurrencyLimitHook', limiter, options, {
    raw: (reply: Reply) => reply.raw,
    expose: exposeSlot,
    limited: (reply) => void reply.code(429),
    sendProblem(reply, body) {
      reply.header('content-type', PROBLEM_TYPE);
      reply.send(Buffer.from(body, 'latin1')); // as rateLimitHook's: no `; charset=utf-8`
    },
    onLimited: (onLimited: NonNullable<ConcurrencyLimitHookOptions<Req, Reply>['onLimited']>, request: Req, reply, refusal) =>
      onLimited(request, reply, refusal),
  });
  return function concurrencyLimitHook(request, reply, done): void {
    flow(request, reply, (error?: unknown) => (error === undefined ? done() : done(error as Error)));
  };
}
