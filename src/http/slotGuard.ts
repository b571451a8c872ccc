import { integer, MAX_INT, optionalInteger, unknownOption } from '../base/checks.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
// Types only: resilimit/http loads no limiter (nor Redis, nor opossum) until the application does.
import type { HeldSlot, SlotOptions } from '../limiter/ConcurrencyLimiter.js';
import { skips } from './guard.js';
import { byIp, type KeyFunction } from './keys.js';
import { checkPolicyName, optionalFunction } from './options.js';
import { requireRuntime } from '../base/runtime.js';

/**
 * What the concurrency middleware needs of a limiter; a `ConcurrencyLimiter` fits. `options.max`, when
 * there, bounds a fixed `cost` when the middleware is made.
 */
export interface HttpSlotLimiter {
  acquire(key: string, options?: SlotOptions): Promise<HeldSlot | undefined>;
  readonly options?: { readonly max?: number };
}

/** What the concurrency middleware watches of Node's response (Node's `res`, Fastify's `reply.raw`). */
export interface SlotResponse {
  /** The response was closed (the client went away, or it was sent and closed). */
  readonly closed?: boolean;
  readonly destroyed?: boolean;
  once(event: 'finish' | 'close', listener: () => void): unknown;
  off(event: 'finish' | 'close', listener: () => void): unknown;
}

/** Why a request got no slot: what {@link ConcurrencyLimitOptions.onLimited} is told. */
export type SlotRefusal = {
  /** The limiter key the request asked a slot of. */
  readonly key: string;
  /** The slots it asked for. */
  readonly cost: number;
  /** How long it waited, ms (the `maxWaitMs` option). */
  readonly maxWaitMs: number;
};

/** The options of both concurrency middleware (`R`: the request). */
export type ConcurrencyLimitCommonOptions<R> = {
  /**
   * The key whose slots a request takes: {@link byIp}, {@link byHeader}, {@link byRoute} and
   * {@link combine} make the usual ones. A key function that throws, or returns something that is not
   * a string of 1 … 1024 characters, fails the request through the framework's error handling.
   * @default byIp (the TCP peer's address; never `X-Forwarded-For`)
   */
  key?: KeyFunction<R>;
  /**
   * Slots a request takes while it runs: an integer from 1 to the limiter's `max` (checked when the
   * middleware is made), or a function of the request whose answer is checked per request (anything
   * else fails that request through the framework's error handling).
   * @default 1
   */
  cost?: number | ((request: R) => number);
  /**
   * How long a request waits for a slot, ms, in the order requests came (FIFO within this process);
   * after it, it is refused. 0: now or never. Integer 0 … 2^31 − 1. A client that goes away while
   * its request waits stops the wait: nothing is taken, nothing is answered.
   * @default 0
   */
  maxWaitMs?: number;
  /**
   * Requests for which this returns `true` take no slot. It must return a boolean: anything else fails
   * the request rather than skip it.
   */
  skip?: (request: R) => boolean;
  /**
   * The name in the default refusal's `violated-policies`. 1 … 64 printable ASCII characters without
   * `"` or `\`.
   * @default 'default'
   */
  policyName?: string;
};

/** Options both concurrency middleware take, resolved. */
type Resolved<R, L> = Readonly<{
  key: KeyFunction<R>;
  cost: (request: R) => number;
  maxWaitMs: number;
  skip: ((request: R) => boolean) | undefined;
  onLimited: L | undefined;
  policyName: string;
}>;

const KNOWN = ['key', 'cost', 'maxWaitMs', 'skip', 'onLimited', 'policyName'];

/** Checks the limiter given to `caller` (`concurrencyLimit` or `concurrencyLimitHook`). */
function checkSlotLimiter(caller: string, limiter: unknown): HttpSlotLimiter {
  const l = limiter as Partial<Record<'acquire' | 'limit', unknown>> | null | undefined;
  // A ResilientLimiter has an acquire() too, which waits for a permit of a rate: it gives nothing back.
  if (typeof l?.acquire !== 'function' || typeof l.limit === 'function') {
    throw new ResilimitError(
      ErrorCode.INVALID_OPTION,
      `Expected the limiter of ${caller}() to be a ConcurrencyLimiter (a ResilientLimiter goes to rateLimit()), got ${describe(limiter)}`,
    );
  }
  return limiter as HttpSlotLimiter;
}

function resolveCost<R>(value: unknown, max: unknown): (request: R) => number {
  if (value === undefined) return () => 1;
  if (typeof value === 'function') return value as (request: R) => number;
  const top = typeof max === 'number' && Number.isSafeInteger(max) && max >= 1 ? max : MAX_INT;
  if (typeof value !== 'number') throw invalidOption('cost', `an integer from 1 to max (${top}) or a function`, value);
  const cost = integer('cost', value, 1, top);
  return () => cost;
}

/** Validates `caller`'s limiter and options once, when the middleware is made. */
function resolve<R, L>(caller: string, limiter: HttpSlotLimiter, raw: unknown, defaultKey: KeyFunction<R>): Resolved<R, L> {
  if (raw !== undefined && (typeof raw !== 'object' || raw === null || Array.isArray(raw))) {
    throw invalidOption('options', 'an object', raw);
  }
  const options = (raw ?? {}) as Record<string, unknown>;
  for (const name of Object.keys(options)) {
    if (!KNOWN.includes(name)) throw unknownOption(`${caller}()`, name, options[name], KNOWN);
  }
  return Object.freeze({
    key: optionalFunction<KeyFunction<R>>('key', options['key']) ?? defaultKey,
    cost: resolveCost<R>(options['cost'], limiter.options?.max),
    maxWaitMs: optionalInteger('maxWaitMs', options['maxWaitMs'], 0, MAX_INT, 0), // as acquire() checks it
    skip: optionalFunction<(request: R) => boolean>('skip', options['skip']),
    onLimited: optionalFunction<L>('onLimited', options['onLimited']),
    policyName: checkPolicyName(options['policyName']),
  });
}

/** What the slot flow does to one framework's request and response; made once per middleware. */
export type SlotFramework<Req, Res, L> = {
  /** Node's response under the framework's: its `'finish'` and `'close'` end the slot. */
  raw(res: Res): SlotResponse;
  /** Puts the held slot on the request (`req.slot`). */
  expose(req: Req, slot: HeldSlot): void;
  /** Sends the default refusal: 429, `application/problem+json`, `body` (ASCII). */
  sendProblem(res: Res, body: string): void;
  /** Sets the status 429, before `onLimited` runs. */
  limited(res: Res): void;
  /** Calls the user's `onLimited` with the framework's arguments and returns what it returns. */
  onLimited(onLimited: L, req: Req, res: Res, refusal: SlotRefusal): unknown;
};

/** One request through the slot flow: `proceed()` (it goes on holding a slot), `proceed(error)`, or a 429; once. */
export type SlotFlow<Req, Res> = (req: Req, res: Res, proceed: (error?: unknown) => void) => void;

/** The default refusal's body: RFC 9457 problem details of the draft's `quota-exceeded` type. */
function refusalBody(policyName: string, maxWaitMs: number): string {
  return (
    '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",' +
    '"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,' +
    `"detail":"Too many requests at once: no slot within ${maxWaitMs} ms",` +
    `"violated-policies":${JSON.stringify([policyName])}}`
  );
}

function ignore(): boolean {
  return false;
}

/**
 * The flow of the concurrency middleware: `skip`, take a slot of the request's key (waiting up to
 * `maxWaitMs`), then go on holding it, or answer 429 (`onLimited`, or the default body). The slot is
 * given back once, at the first of: the response's `'finish'` (sent), its `'close'` (the client went
 * away, or it closed after it was sent), and a synchronous throw out of `proceed()`. A client that
 * goes away while its request waits aborts the wait, and the request is dropped: nothing taken,
 * nothing answered. Other errors go to `proceed(error)`. Checks the limiter and the options once, here.
 */
export function slotGuard<Req, Res, L>(who: string, limiter: unknown, options: unknown, f: SlotFramework<Req, Res, L>): SlotFlow<Req, Res> {
  requireRuntime();
  const l = checkSlotLimiter(who, limiter);
  const { key, cost, maxWaitMs, skip, onLimited, policyName } = resolve<Req, L>(who, l, options, byIp as KeyFunction<Req>);
  const body = refusalBody(policyName, maxWaitMs);

  const refuse = (req: Req, res: Res, proceed: (error?: unknown) => void, refusal: SlotRefusal): void => {
    try {
      f.limited(res);
      if (onLimited === undefined) f.sendProblem(res, body);
      else Promise.resolve(f.onLimited(onLimited, req, res, refusal)).then(undefined, proceed);
    } catch (error) {
      proceed(error);
    }
  };

  return (req, res, proceed) => {
    let k: string;
    let c: number;
    let raw: SlotResponse;
    try {
      if (skip !== undefined && skips(skip(req))) {
        proceed();
        return;
      }
      k = key(req);
      c = cost(req);
      raw = f.raw(res);
    } catch (error) {
      proceed(error);
      return;
    }
    if (raw.closed === true || raw.destroyed === true) return; // gone already: nobody to serve
    const abort = new AbortController();
    let slot: HeldSlot | undefined;
    let ended = false;
    /** The response finished or closed, or the handler threw: the slot back, or the wait aborted; once. */
    const end = (): void => {
      if (ended) return;
      ended = true;
      raw.off('finish', end);
      raw.off('close', end);
      if (slot !== undefined) void slot.release().catch(ignore);
      else abort.abort(); // the client went away while its request waited
    };
    raw.once('finish', end);
    raw.once('close', end);
    let taking: Promise<HeldSlot | undefined>;
    try {
      taking = l.acquire(k, { cost: c, maxWaitMs, signal: abort.signal });
    } catch (error) {
      end();
      proceed(error);
      return;
    }
    taking.then(
      (held) => {
        if (held === undefined) {
          if (ended) return;
          ended = true;
          raw.off('finish', end);
          raw.off('close', end);
          refuse(req, res, proceed, { key: k, cost: c, maxWaitMs });
          return;
        }
        if (ended) {
          void held.release().catch(ignore); // taken as the client went away
          return;
        }
        slot = held;
        f.expose(req, held);
        try {
          proceed();
        } catch (error) {
          end(); // a handler that threw: it holds no slot, whoever answers
          throw error;
        }
      },
      (error: unknown) => {
        if (ended) return; // the client went away while its request waited
        end();
        proceed(error);
      },
    );
  };
}
