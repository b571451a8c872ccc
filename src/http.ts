/**
 * `resilimit/http`: rate limiting for HTTP servers. {@link rateLimit} is a `(req, res, next)`
 * middleware for Express, Connect and plain `node:http`; {@link rateLimitHook} is a Fastify
 * `onRequest` hook. No framework is imported: both work on Node's request and response and on the few
 * members of Fastify's request and reply they use.
 * @module
 */
import { Buffer } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, ErrorCode, ResilimitError } from './options/errors.js';
import { joined, partitionKeyParameter, problemBody, PROBLEM_TYPE, RateLimitFields, retryAfterSeconds } from './http/fields.js';
import type { RequestLike } from './http/keys.js';
import { checkLimiter, resolveHttpOptions, type ClosingResponse, type CommonHttpOptions, type HttpLimiter } from './http/options.js';
import type { Decision } from './types.js';

export { byHeader, byIp, byRoute, combine, headerKey, type KeyFunction, type RequestLike } from './http/keys.js';
export type { ClosingResponse, CommonHttpOptions, HttpLimiter } from './http/options.js';

/** Options of {@link rateLimit}. */
export type RateLimitOptions<Req = IncomingMessage, Res = ServerResponse> = CommonHttpOptions<Req, Res> & {
  /**
   * Writes the response to a rejected request in place of the default problem details body. When it
   * is called, the status is 429 and `Retry-After` and the RateLimit fields are set; it must end the
   * response. If it throws or rejects, the error goes to `next(error)`.
   * @default a 429 with an `application/problem+json` body (RFC 9457) of the draft's
   *   `quota-exceeded` problem type: `type`, `title`, `status`, `detail`, `violated-policies`
   *   (`[policyName]`) and `retryAfterMs`
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
   * called, the status is 429 and `Retry-After` and the RateLimit fields are set; it must call
   * `reply.send()`. If it throws or rejects, the error goes to Fastify's error handling.
   * @default a 429 with an `application/problem+json` body, as {@link rateLimit}'s
   */
  onLimited?: (request: Req, reply: Reply, decision: Decision) => void | Promise<void>;
};

/** The middleware {@link rateLimit} returns. */
export type RateLimitMiddleware<Req, Res> = (req: Req, res: Res, next: (error?: unknown) => void) => void;

/** The hook {@link rateLimitHook} returns: Fastify's callback form of `onRequest`. */
export type RateLimitHook<Req, Reply> = (request: Req, reply: Reply, done: (error?: Error) => void) => void;

/** `skip` must answer with a boolean: a promise (an `async` skip) is truthy and would skip every request. */
function skips(answer: unknown): boolean {
  if (typeof answer === 'boolean') return answer;
  throw new ResilimitError(ErrorCode.INVALID_OPTION, `Expected \`skip\` to return a boolean, got ${describe(answer)}`);
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | undefined)?.then === 'function';
}

/** What the shared flow does to a framework's response (Node's `res`, Fastify's `reply`); made once. */
type Response<Res> = {
  getHeader(res: Res, name: string): unknown;
  setHeader(res: Res, name: string, value: string): void;
  /** Sets the status to 429 (before `onLimited` runs). */
  limited(res: Res): void;
  /** Sends the default body of a 429, `application/problem+json` (ASCII). */
  sendProblem(res: Res, body: string): void;
  /** Node's response under the framework's (for the skip options). */
  raw(res: Res): ClosingResponse | undefined;
};

/** A refund that failed: the request counts, and the application never hears of it. */
function ignore(): void {}

/**
 * The flow of both: `skip`, decide, write the fields, and either go on (`proceed()`) or answer 429
 * (`onLimited`, or the default problem details body). Every error goes to `proceed(error)`, and the
 * request does not go on. With the skip options, an admitted request is refunded as its response
 * closes, when `refundIf` says so.
 */
function guard<Req, Res>(
  who: string,
  limiter: HttpLimiter,
  options: (CommonHttpOptions<Req, Res> & { onLimited?: (req: Req, res: Res, decision: Decision) => void | Promise<void> }) | undefined,
  r: Response<Res>,
): (req: Req, res: Res, proceed: (error?: unknown) => void) => void {
  const l = checkLimiter(who, limiter);
  const { key, cost, skip, onLimited, headers, policyName, partitionKey, refundIf } = resolveHttpOptions<
    Req,
    (req: Req, res: Res, decision: Decision) => void | Promise<void>,
    Res
  >(who, options);
  /** With the skip options: refunds the admitted request `id` of `k` as its response closes, if `refundIf` says so then. */
  let refundOnClose: ((req: Req, res: Res, raw: ClosingResponse, k: string, id: string) => void) | undefined;
  if (refundIf !== undefined) {
    const refund = l.refund?.bind(l);
    if (refund === undefined) {
      throw new ResilimitError(
        ErrorCode.INVALID_OPTION,
        `Expected the limiter of ${who}() to have refund() (a ResilientLimiter) for skipFailedRequests or skipSuccessfulRequests, got ${describe(limiter)}`,
      );
    }
    refundOnClose = (req, res, raw, k, id) => {
      const closed = (): void => {
        if (!refundIf(req, res, raw)) return;
        try {
          Promise.resolve(refund(k, id)).then(undefined, ignore);
        } catch {
          // A limiter of your own whose refund() throws: the request counts, as when it rejects.
        }
      };
      if (raw.closed === true) closed();
      else raw.once('close', closed);
    };
  }
  const fields = headers ? new RateLimitFields(l, policyName) : undefined;
  const body = problemBody(policyName);

  /**
   * Writes the answer; true when the request goes on. `pk`: the `pk` parameter, or `''`. A refusal
   * admitted in shadow mode goes on, without 429 or `Retry-After`, but its RateLimit fields are the
   * refusal's: what the limit says of the quota left.
   */
  const answer = (req: Req, res: Res, proceed: (error?: unknown) => void, decision: Decision, pk: string): boolean => {
    (req as { rateLimit?: Decision }).rateLimit = decision; // as express-rate-limit's users read it
    const refused = !decision.allowed || (decision as { shadowRejected?: true }).shadowRejected === true;
    const retryAfterS = refused ? retryAfterSeconds(decision.retryAfterMs) : 0;
    if (fields !== undefined) {
      r.setHeader(res, 'RateLimit-Policy', joined(r.getHeader(res, 'RateLimit-Policy'), fields.policy(decision, Date.now())));
      r.setHeader(res, 'RateLimit', joined(r.getHeader(res, 'RateLimit'), fields.state(decision, retryAfterS, pk)));
    }
    if (decision.allowed) return true;
    r.limited(res);
    r.setHeader(res, 'Retry-After', String(retryAfterS));
    if (onLimited === undefined) {
      r.sendProblem(res, body(decision, retryAfterS));
    } else {
      const written = onLimited(req, res, decision);
      if (isThenable(written)) written.then(undefined, proceed);
    }
    return false;
  };

  return (req, res, proceed) => {
    let decided: Promise<Decision & { readonly id?: string | undefined }> | undefined;
    let pk = '';
    let k = '';
    let raw: ClosingResponse | undefined;
    try {
      if (skip === undefined || !skips(skip(req))) {
        k = key(req);
        // Before the limiter: a partition key that fails leaves the request uncounted.
        if (partitionKey !== undefined) pk = partitionKeyParameter(partitionKey(req, k));
        if (refundOnClose !== undefined && (raw = r.raw(res)) === undefined) {
          throw new ResilimitError(
            ErrorCode.INVALID_OPTION,
            `${who}(): skipFailedRequests and skipSuccessfulRequests need the reply's \`raw\` response`,
          );
        }
        decided = l.limit(k, cost === undefined ? undefined : { cost: cost(req) });
      }
    } catch (error) {
      proceed(error);
      return;
    }
    if (decided === undefined) {
      proceed();
      return;
    }
    decided.then((decision) => {
      let goOn: boolean;
      try {
        goOn = answer(req, res, proceed, decision, pk);
      } catch (error) {
        proceed(error);
        return;
      }
      if (goOn && refundOnClose !== undefined && raw !== undefined && decision.id !== undefined)
        refundOnClose(req, res, raw, k, decision.id);
      // Outside the try: an error thrown by what proceed() runs is not ours to report a second time.
      if (goOn) proceed();
    }, proceed);
  };
}

/**
 * A middleware that decides every request with `limiter` before it goes on. Admitted: the
 * RateLimit fields are set and `next()` is called. Rejected: a 429 with `Retry-After` (whole
 * seconds, at least 1), the RateLimit fields and an RFC 9457 problem details body of the draft's
 * `quota-exceeded` type (or `onLimited`'s response), and `next` is not called. A decision made
 * without Redis (`source` `'local'`, `'fail-open'`, …) is a decision like any other. The decision is
 * on the request as `req.rateLimit` (the last middleware's, with several) before `next()` or the 429.
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
  const flow = guard<Req, Res>('rateLimit', limiter, options, {
    getHeader: (res, name) => res.getHeader(name),
    setHeader: (res, name, value) => void res.setHeader(name, value),
    limited: (res) => void (res.statusCode = 429),
    sendProblem(res, body) {
      res.setHeader('Content-Type', PROBLEM_TYPE);
      res.setHeader('Content-Length', body.length); // ASCII only
      res.end(body);
    },
    raw: (res) => res,
  });
  return function rateLimitMiddleware(req, res, next): void {
    flow(req, res, next);
  };
}

/**
 * A Fastify `onRequest` hook that decides every request with `limiter`, with the same behaviour as
 * {@link rateLimit}: admitted requests get the RateLimit fields and go on; rejected ones get a 429
 * with `Retry-After`, the fields and the problem details body (or `onLimited`'s reply), and neither the later hooks
 * nor the handler run. Errors (a throwing `key`, a misuse error of the limiter) go to Fastify's error
 * handling.
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
  const flow = guard<Req, Reply>('rateLimitHook', limiter, options, {
    getHeader: (reply, name) => reply.getHeader(name.toLowerCase()),
    setHeader: (reply, name, value) => void reply.header(name.toLowerCase(), value),
    limited: (reply) => void reply.code(429),
    sendProblem(reply, body) {
      reply.header('content-type', PROBLEM_TYPE);
      // As bytes: Fastify adds `; charset=utf-8` to a JSON type sent as a string, and JSON has no charset.
      reply.send(Buffer.from(body, 'latin1'));
    },
    raw: (reply) => reply.raw,
  });
  return function rateLimitHook(request, reply, done): void {
    flow(request, reply, (error?: unknown) => (error === undefined ? done() : done(error as Error)));
  };
}
