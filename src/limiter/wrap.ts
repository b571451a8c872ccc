import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import type { Decision, LimitOptions } from '../types.js';
import { requireRuntime } from '../base/runtime.js';

/** Anything that decides calls: `ResilientLimiter`, `RedisWindow` or `LocalWindow`. */
export type Limiter<D extends Decision = Decision> = {
  limit(key: string, options?: LimitOptions): D | Promise<D>;
};

/**
 * How a wrapped function (or a decorated method) is limited. Each function receives the call's
 * arguments, and `this` of the call.
 */
export type WrapOptions<This, Args extends unknown[], R, D extends Decision = Decision> = {
  /** The key this call counts against (e.g. the user id among the arguments). */
  key: (this: This, ...args: Args) => string;
  /** The permits this call takes. @default 1 */
  cost?: (this: This, ...args: Args) => number;
  /** The call's id, to make retries idempotent. @default generated */
  id?: (this: This, ...args: Args) => string | undefined;
  /**
   * What a rejected call returns instead of running the function. Without it, a rejected call
   * rejects with a {@link RateLimitedError} that carries the decision.
   */
  onLimited?: (this: This, decision: D, ...args: Args) => R | Promise<R>;
};

/**
 * The error of a call that a wrapped function or a decorated method refused to run because its key
 * is over its limit (when no `onLimited` is given). Not a failure of resilimit: the decision says
 * why, and when to retry.
 */
export class RateLimitedError<D extends Decision = Decision> extends ResilimitError {
  /** The decision that refused the call. */
  readonly decision: D;
  /** The key the call counted against. */
  readonly key: string;
  /** Shortcut for `decision.retryAfterMs`. */
  readonly retryAfterMs: number;

  constructor(key: string, decision: D) {
    // The key is a property, not part of the message: messages end up in logs, keys may be personal.
    super(
      ErrorCode.RATE_LIMITED,
      `Rate limited: over the limit of ${decision.limit} (source ${decision.source}${decision.reason === undefined ? '' : `, reason ${decision.reason}`}); retry after ${decision.retryAfterMs} ms`,
    );
    this.decision = decision;
    this.key = key;
    this.retryAfterMs = decision.retryAfterMs;
  }
}

function checkFunction(name: string, value: unknown, required: boolean): void {
  if (value === undefined && !required) return;
  if (typeof value !== 'function') throw invalidOption(name, 'a function', value);
}

/** Checks wrap options once, when the wrapper is made. */
function checkWrapOptions(options: unknown): void {
  if (typeof options !== 'object' || options === null) {
    throw new ResilimitError(
      ErrorCode.INVALID_OPTION,
      `Expected the options of wrap() to be an object with a \`key\` function, got ${describe(options)}`,
    );
  }
  const o = options as Record<string, unknown>;
  checkFunction('key', o['key'], true);
  checkFunction('cost', o['cost'], false);
  checkFunction('id', o['id'], false);
  checkFunction('onLimited', o['onLimited'], false);
}

/**
 * Returns a function that decides each call with `limiter` before running `fn`: an admitted call
 * runs `fn` with the same `this` and arguments; a rejected one returns `onLimited(decision, …args)`,
 * or rejects with a {@link RateLimitedError}. Errors of `key`, `cost` or `id` (and misuse errors of
 * the limiter) reject the call without running `fn`.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when `fn` or an option is not a function.
 * @example
 * const search = wrap(limiter, searchCatalog, { key: (userId) => `search:${userId}` });
 * await search('42', 'red shoes'); // rejects with RateLimitedError past the limit
 */
export function wrap<This, Args extends unknown[], R, D extends Decision>(
  limiter: Limiter<D>,
  fn: (this: This, ...args: Args) => R | Promise<R>,
  options: WrapOptions<This, Args, R, D>,
): (this: This, ...args: Args) => Promise<Awaited<R>> {
  requireRuntime();
  if (typeof fn !== 'function') throw invalidOption('fn', 'a function to wrap', fn);
  checkWrapOptions(options);
  const { key, cost, id, onLimited } = options;
  return async function limited(this: This, ...args: Args): Promise<Awaited<R>> {
    const k = key.apply(this, args);
    let limitOptions: LimitOptions | undefined;
    if (cost !== undefined || id !== undefined) {
      limitOptions = {};
      if (cost !== undefined) limitOptions.cost = cost.apply(this, args);
      const callId = id?.apply(this, args);
      if (callId !== undefined) limitOptions.id = callId;
    }
    const decision = await limiter.limit(k, limitOptions);
    if (decision.allowed) return await fn.apply(this, args);
    if (onLimited !== undefined) return await onLimited.call(this, decision, ...args);
    throw new RateLimitedError(k, decision);
  };
}

/**
 * A standard (TC39) method decorator: every call of the method is decided by `limiter` first, as
 * with {@link wrap}; the option functions receive the instance as `this`.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when an option is not a function.
 * @example
 * class Mailer {
 *   @rateLimited(limiter, { key: (to: string) => `mail:${to}` })
 *   async send(to: string, body: string): Promise<void> { … }
 * }
 */
export function rateLimited<This, D extends Decision>(
  limiter: Limiter<D>,
  // The arguments are not known when the decorator is made (TypeScript infers nothing from the method
  // at this point): the option functions take the method's leading arguments, typed by you.
  // biome-ignore lint/suspicious/noExplicitAny: see above: unknown here would refuse every typed option function
  options: WrapOptions<This, any[], any, D>,
): <Args extends unknown[], R>(
  method: (this: This, ...args: Args) => R | Promise<R>,
  context: ClassMethodDecoratorContext<This>,
) => (this: This, ...args: Args) => Promise<Awaited<R>> {
  requireRuntime();
  checkWrapOptions(options);
  return <Args extends unknown[], R>(method: (this: This, ...args: Args) => R | Promise<R>, context: ClassMethodDecoratorContext<This>) => {
    if (context.kind !== 'method') {
      throw new ResilimitError(ErrorCode.INVALID_OPTION, `@rateLimited decorates methods, not a ${String(context.kind)}`);
    }
    return wrap(limiter, method, options as WrapOptions<This, Args, R, D>);
  };
}
