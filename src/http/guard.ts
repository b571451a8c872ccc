import { describe, ErrorCode, ResilimitError } from '../base/errors.js';
import type { Decision } from '../types.js';
import { answersReduced, joined, partitionKeyParameter, problemBody, RateLimitFields, retryAfterSeconds } from './fields.js';
import type { KeyFunction } from './keys.js';
import { checkLimiter, resolveHttpOptions, type ClosingResponse, type HttpLimiter } from './options.js';
import { requireRuntime } from '../base/runtime.js';

/** The status of a refusal: 429 `quota-exceeded`, or 503 `temporary-reduced-capacity` (see `answersReduced`). */
export type RefusalStatus = 429 | 503;

/**
 * What the shared flow does to one framework's request and response (Node's `res`, Fastify's
 * `reply`, Hono's or Koa's context); made once per middleware. `L`: the framework's `onLimited`.
 */
export type Framework<Req, Res, L> = {
  /** The key without a `key` option: the framework's `byIp`. @default Node's, `resilimit/http`'s `byIp` */
  defaultKey?: KeyFunction<Req>;
  /** A response field's value, `undefined` when it has none. */
  getHeader(res: Res, name: string): unknown;
  setHeader(res: Res, name: string, value: string): void;
  /** Sets the status of a refusal, 429, or 503 for one of reduced capacity (before `onLimited` runs). */
  limited(res: Res, status: RefusalStatus): void;
  /** Sends the default body of a refusal, `application/problem+json` (ASCII), with the status {@link limited} set. */
  sendProblem(res: Res, body: string, status: RefusalStatus): void;
  /** What closes with the response (Node's response under the framework's), for the skip options. */
  raw(res: Res): ClosingResponse | undefined;
  /** Puts the decision where the framework's users read it: `req.rateLimit`, `c.get('rateLimit')`, `ctx.state.rateLimit`. */
  expose(req: Req, decision: Decision): void;
  /** Calls the user's `onLimited` with the framework's arguments and returns what it returns. */
  onLimited(onLimited: L, req: Req, res: Res, decision: Decision): unknown;
};

/**
 * One request through the flow. Exactly one of three things happens, once: `proceed()` (the request
 * goes on), `proceed(error)` (it fails, through the framework's error handling) or `answered(written)`
 * (a 429 or 503 was answered: `written` is undefined after the default body, else what `onLimited` returned,
 * once settled when it is a promise).
 */
export type Flow<Req, Res> = (req: Req, res: Res, proceed: (error?: unknown) => void, answered?: (written: unknown) => void) => void;

/** `skip` must answer with a boolean: a promise (an `async` skip) is truthy and would skip every request. */
export function skips(answer: unknown): boolean {
  if (typeof answer === 'boolean') return answer;
  throw new ResilimitError(ErrorCode.INVALID_OPTION, `Expected \`skip\` to return a boolean, got ${describe(answer)}`);
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | undefined)?.then === 'function';
}

/** A refund that failed: the request counts, and the application never hears of it. */
function ignore(): void {}

/** What {@link guard}'s `answer` returns for a request that goes on (anything else is the refusal's `written`). */
const GO: unique symbol = Symbol('go on');

/**
 * The flow of every integration: `skip`, decide, write the fields, and either go on (`proceed()`) or
 * answer 429, or 503 for a refusal of reduced capacity when the `reducedCapacity` option asks for it
 * (`onLimited`, or the default problem details body), the same in every framework. Every error goes to
 * `proceed(error)`, and the request does not go on. With the skip options, an admitted request is
 * refunded as its response closes, when `refundIf` says so. Checks the limiter and the options (raw,
 * as the user gave them) once, here.
 */
export function guard<Req, Res, L>(who: string, limiter: HttpLimiter, options: unknown, f: Framework<Req, Res, L>): Flow<Req, Res> {
  requireRuntime();
  const l = checkLimiter(who, limiter);
  const { key, cost, skip, onLimited, headers, policyName, reducedCapacity, partitionKey, refundIf } = resolveHttpOptions<Req, L, Res>(
    who,
    options,
    f.defaultKey,
  );
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
   * Writes the answer: {@link GO} when the request goes on, else the refusal's `written`. `pk`: the
   * `pk` parameter, or `''`. A refusal admitted in shadow mode goes on, without 429 (or 503) or
   * `Retry-After`, but its RateLimit fields are the refusal's: what the limit says of the quota left
   * (the lowered quota too, for a refusal of reduced capacity answered as one).
   */
  const answer = (req: Req, res: Res, decision: Decision, pk: string): unknown => {
    f.expose(req, decision);
    const refused = !decision.allowed || (decision as { shadowRejected?: true }).shadowRejected === true;
    const retryAfterS = refused ? retryAfterSeconds(decision.retryAfterMs) : 0;
    const reduced = answersReduced(decision, reducedCapacity);
    if (fields !== undefined) {
      f.setHeader(res, 'RateLimit-Policy', joined(f.getHeader(res, 'RateLimit-Policy'), fields.policy(decision, Date.now(), reduced)));
      f.setHeader(res, 'RateLimit', joined(f.getHeader(res, 'RateLimit'), fields.state(decision, retryAfterS, pk)));
    }
    if (decision.allowed) return GO;
    const status = reduced ? 503 : 429;
    f.limited(res, status);
    f.setHeader(res, 'Retry-After', String(retryAfterS));
    if (onLimited !== undefined) return f.onLimited(onLimited, req, res, decision);
    f.sendProblem(res, body(decision, retryAfterS, reduced), status);
    return undefined;
  };

  return (req, res, proceed, answered) => {
    let decided: Promise<Decision & { readonly id?: string | undefined }> | undefined;
    let pk = '';
    let k = '';
    let raw: ClosingResponse | undefined;
    try {
      if (skip === undefined || !skips(skip(req))) {
        k = key(req);
        // Before the limiter: a partition key that fails leaves the request uncounted.
        if (partitionKey !== undefined) pk = partitionKeyParameter(partitionKey(req, k));
        if (refundOnClose !== undefined && (raw = f.raw(res)) === undefined) {
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
      let written: unknown;
      try {
        written = answer(req, res, decision, pk);
      } catch (error) {
        proceed(error);
        return;
      }
      if (written !== GO) {
        if (isThenable(written)) written.then(answered, proceed);
        else answered?.(written);
        return;
      }
      if (refundOnClose !== undefined && raw !== undefined && decision.id !== undefined) refundOnClose(req, res, raw, k, decision.id);
      // Outside the try: an error thrown by what proceed() runs is not ours to report a second time.
      proceed();
    }, proceed);
  };
}
