import { knownOptions, optionalInteger } from '../base/checks.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { MAX_INT, MAX_PREFIX_LENGTH, resolveLimiterOptions, type ResilientLimiterOptions } from '../options/options.js';

/** Options of `ResilimitThrottlerStorage`: a `ResilientLimiter`'s, but those the throttlers give, and `maxLimiters`. */
export type ResilimitThrottlerStorageOptions = Omit<ResilientLimiterOptions, 'limit' | 'windowMs' | 'blockMs' | 'prefix'> & {
  /**
   * The start of every Redis key: each limiter's prefix is it followed by `<limit>:<ttl>:<blockDuration>:`.
   * One per service, the same in every instance of it. At most 95 characters (the limiter's 128, less
   * the 33 the numbers may take), without `{` or `}`.
   * @default 'resilimit:nest:'
   */
  prefix?: string;
  /**
   * How many limiters the storage makes at most: one per different (`limit`, `ttl`, `blockDuration`)
   * the throttlers ask for. A call that would need one more rejects with `ERR_RESILIMIT_INVALID_OPTION`.
   * Integer 1 … 1,024.
   * @default 16
   */
  maxLimiters?: number;
};

/** What each limiter's options are made of. */
export type ResolvedThrottlerStorageOptions = Readonly<{
  prefix: string;
  maxLimiters: number;
  /** The options every limiter gets, with its own `prefix`, `limit`, `windowMs` and `blockMs`. */
  limiter: Readonly<Omit<ResilientLimiterOptions, 'limit' | 'windowMs' | 'blockMs' | 'prefix'>>;
}>;

/** The longest `<limit>:<ttl>:<blockDuration>:` a limiter's prefix adds. */
const SUFFIX_LENGTH = `${MAX_INT}:${MAX_INT}:${MAX_INT}:`.length;
const MAX_BASE_PREFIX = MAX_PREFIX_LENGTH - SUFFIX_LENGTH;
/** The limiter options each throttler gives, by the name it gives them under. */
const FROM_THROTTLERS = { limit: 'limit', windowMs: 'ttl', blockMs: 'blockDuration' };
const NAMES = [
  ...['redis', 'prefix', 'mode', 'local', 'breaker', 'maxInFlight', 'slowCallMs', 'clock', 'perf', 'heartbeatMs', 'maxPending'],
  ...['maxPendingBytes', 'reconcile', 'coalesce', 'maxWaiters', 'shadow', 'resolutionMs', 'hotKeys', 'maxLimiters'],
] as const satisfies readonly (keyof ResilimitThrottlerStorageOptions)[];
type Unlisted = Exclude<keyof ResilimitThrottlerStorageOptions, (typeof NAMES)[number]>;
/** Every option's name is in {@link NAMES}: a limiter option added to the type must be added there. */
export const STORAGE_OPTION_NAMES_COMPLETE: [Unlisted] extends [never] ? true : { unlisted: Unlisted } = true;

/**
 * Validates the options at once, as a limiter would, rather than at the first request.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming the option.
 */
export function resolveThrottlerStorageOptions(raw: unknown): ResolvedThrottlerStorageOptions {
  const given = raw as Record<string, unknown> | undefined;
  for (const [name, throttlers] of Object.entries(FROM_THROTTLERS)) {
    if (typeof given === 'object' && given !== null && name in given) {
      throw invalidOption(name, `absent: each throttler gives it, as its \`${throttlers}\``, given[name]);
    }
  }
  const options = knownOptions('ResilimitThrottlerStorage', raw, NAMES);
  const prefix = options['prefix'] ?? 'resilimit:nest:';
  if (typeof prefix !== 'string' || prefix.length > MAX_BASE_PREFIX || /[{}]/.test(prefix) || !prefix.isWellFormed()) {
    throw invalidOption('prefix', `a string of at most ${MAX_BASE_PREFIX} characters without \`{\` or \`}\``, prefix);
  }
  const maxLimiters = optionalInteger('maxLimiters', options['maxLimiters'], 1, 1024, 16);
  const { maxLimiters: _, prefix: __, ...limiter } = options;
  // Every other option, checked as the limiters will take them (a window as long as a numeric
  // resolutionMs: each throttler's ttl is checked against it when its limiter is made).
  const resolution = limiter['resolutionMs'];
  resolveLimiterOptions({
    ...limiter,
    prefix,
    limit: 1,
    windowMs: Number.isSafeInteger(resolution) && (resolution as number) >= 1 ? resolution : 1,
  });
  return Object.freeze({ prefix, maxLimiters, limiter: Object.freeze(limiter) as ResolvedThrottlerStorageOptions['limiter'] });
}

/**
 * Checks what a throttler gives for one call: a value @nestjs/throttler resolved, per route, from its
 * options and decorators.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming the value and the throttler.
 */
export function throttlerValue(name: string, value: unknown, min: number, throttler: string): number {
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= MAX_INT) return value;
  const unit = name === 'limit' ? '' : ' ms';
  throw new ResilimitError(
    ErrorCode.INVALID_OPTION,
    `Expected \`${name}\` of the throttler ${JSON.stringify(throttler)} to be an integer from ${min} to ${MAX_INT}${unit}, got ${describe(value)}`,
  );
}
