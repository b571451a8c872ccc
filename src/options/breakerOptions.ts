/**
 * The options of the breaker in front of every Redis call (`ResilientLimiterOptions.breaker`), in a
 * file of their own to keep `options.ts` within the size the structure test allows.
 */

import { knownOptions, optionalInteger } from '../base/checks.js';

/** The breaker in front of every Redis call. Defaults are chosen for a request path. */
export type BreakerOptions = {
  /**
   * The deadline of one Redis call, in ms. Past it the call is answered by the fallback (the Redis
   * command itself cannot be cancelled; the script's staleness guard makes it a no-op if it runs late).
   * @default 50 (range 1 … 60,000)
   */
  timeoutMs?: number;
  /**
   * Opens when more than this percentage of the calls in the rolling window failed.
   * @default 50 (range 1 … 100)
   */
  errorThresholdPercentage?: number;
  /**
   * Calls needed in the rolling window before the error rate may open the breaker, so that one error
   * does not open it.
   * @default 10 (range 1 … 1,000,000)
   */
  volumeThreshold?: number;
  /**
   * How long the breaker stays open before one trial call, in ms. Doubles after each failed trial.
   * @default 1000 (range 1 … 3,600,000)
   */
  resetTimeoutMs?: number;
  /**
   * The longest open period the doubling reaches, in ms.
   * @default 30000 (range resetTimeoutMs … 3,600,000)
   */
  maxResetTimeoutMs?: number;
  /**
   * The rolling window over which the error rate is measured, in ms.
   * @default 1000 (range 100 … 600,000)
   */
  rollingWindowMs?: number;
};

/** The breaker's options with their defaults filled in. */
export type ResolvedBreakerOptions = Readonly<Required<BreakerOptions>>;

/** Every breaker option's name (checked against the type in `options.ts`). */
export const BREAKER_OPTIONS = [
  ...['timeoutMs', 'errorThresholdPercentage', 'volumeThreshold', 'resetTimeoutMs', 'maxResetTimeoutMs', 'rollingWindowMs'],
] as const satisfies readonly (keyof BreakerOptions)[];

/**
 * Checks the `breaker` option of `owner` (a limiter's class name, for the messages) and fills in the
 * defaults. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming `breaker.<option>`.
 */
export function resolveBreakerOptions(owner: string, raw: unknown): ResolvedBreakerOptions {
  const breaker = knownOptions(owner, raw, BREAKER_OPTIONS, { path: 'breaker.', optional: true });
  const resetTimeoutMs = optionalInteger('breaker.resetTimeoutMs', breaker['resetTimeoutMs'], 1, 3_600_000, 1000);
  return Object.freeze({
    timeoutMs: optionalInteger('breaker.timeoutMs', breaker['timeoutMs'], 1, 60_000, 50),
    errorThresholdPercentage: optionalInteger('breaker.errorThresholdPercentage', breaker['errorThresholdPercentage'], 1, 100, 50),
    volumeThreshold: optionalInteger('breaker.volumeThreshold', breaker['volumeThreshold'], 1, 1_000_000, 10),
    resetTimeoutMs,
    maxResetTimeoutMs: optionalInteger(
      'breaker.maxResetTimeoutMs',
      breaker['maxResetTimeoutMs'],
      resetTimeoutMs,
      3_600_000,
      Math.max(30_000, resetTimeoutMs),
    ),
    rollingWindowMs: optionalInteger('breaker.rollingWindowMs', breaker['rollingWindowMs'], 100, 600_000, 1000),
  });
}
