import { integer, integerOrAuto, knownOptions, MAX_INT, optionalFunction, optionalInteger } from '../base/checks.js';
import type { RedisClient } from '../client/clientType.js';
import type { RedisPort } from '../client/port.js';
import { portOf } from '../client/portOf.js';
import { resolveBreakerOptions, type BreakerOptions, type ResolvedBreakerOptions } from './breakerOptions.js';
import { requireRuntime } from '../base/runtime.js';
import { mode, type Mode } from './options.js';
import { prefix } from './windowOptions.js';

/** The options of `ConcurrencyLimiter`. */
export type ConcurrencyLimiterOptions = {
  /** A client of ioredis, iovalkey, node-redis or Valkey GLIDE. resilimit never closes it. Required. */
  redis: RedisClient;
  /** Slots of a key held at once, across every instance. Integer 1 … 2^31 − 1. Required. */
  max: number;
  /**
   * How long a slot stays held without a renewal, ms: a holder that crashed or froze gives its slot
   * back this late at most. Integer 100 … 2^31 − 1.
   * @default 30000
   */
  ttlMs?: number;
  /**
   * How often a held slot is renewed, ms: at most half of `ttlMs`, so that one renewal may fail.
   * @default ttlMs / 3
   */
  renewEveryMs?: number;
  /**
   * How often the first waiter of a key asks Redis again, ms: a slot given back by another instance
   * is seen this late at most (one given back by this instance wakes a waiter at once).
   * @default 50 (range 1 … 60,000)
   */
  pollMs?: number;
  /** Prefix of every Redis key written (at most 128 characters, no braces). @default 'resilimit:' */
  prefix?: string;
  /**
   * What answers when Redis cannot: `'local'` takes slots within this instance's share of `max`
   * (see `instances`), `'fail-open'` takes every slot asked, `'fail-closed'` none.
   * @default 'local'
   */
  mode?: Mode;
  /**
   * How many instances share `max` while Redis cannot answer: a number (each then holds at most
   * `floor(max / instances)`), or `'auto'` to count them through heartbeats in Redis and hold the share
   * each was granted (see docs/concurrency.md).
   * @default 'auto'
   */
  instances?: number | 'auto';
  /**
   * With `instances: 'auto'`, the share of an instance that has never reached Redis: `floor(max / maxInstances)`.
   * @default 10 (range 1 … 1,000,000)
   */
  maxInstances?: number;
  /**
   * With `instances: 'auto'`, how long after its last heartbeat Redis answered an instance may still
   * take slots locally; after it, it takes none until Redis answers (those it holds stay held). The
   * others keep its share free this long plus `ttlMs`. Integer 3 × heartbeatMs … 2^31 − 1.
   * @default 600000
   */
  leaseMs?: number;
  /** With `instances: 'auto'`, how often an instance beats, ms. @default 2000 (range 100 … 60,000) */
  heartbeatMs?: number;
  /** The breaker in front of every Redis call (the same options as `ResilientLimiter`'s). */
  breaker?: BreakerOptions;
  /** A client clock in ms since the epoch, for tests; absent: Redis's `TIME` times every lease. */
  clock?: () => number;
};

export type ResolvedSlotOptions = Readonly<{
  redis: RedisPort;
  max: number;
  ttlMs: number;
  renewEveryMs: number;
  pollMs: number;
  prefix: string;
  mode: Mode;
  instances: number | 'auto';
  maxInstances: number;
  leaseMs: number;
  heartbeatMs: number;
  breaker: ResolvedBreakerOptions;
  clock: (() => number) | undefined;
}>;

const SLOT_OPTIONS = [
  ...['redis', 'max', 'ttlMs', 'renewEveryMs', 'pollMs', 'prefix', 'mode', 'instances', 'maxInstances', 'leaseMs', 'heartbeatMs'],
  ...['breaker', 'clock'],
] as const satisfies readonly (keyof ConcurrencyLimiterOptions)[];
type Missing = Exclude<keyof ConcurrencyLimiterOptions, (typeof SLOT_OPTIONS)[number]>;
export const SLOT_OPTION_NAMES_COMPLETE: [Missing] extends [never] ? true : { missing: Missing } = true;

/** Validates {@link ConcurrencyLimiterOptions}; a frozen copy with the defaults filled in. @throws {ResilimitError} */
export function resolveSlotOptions(raw: unknown): ResolvedSlotOptions {
  requireRuntime();
  const o = knownOptions('ConcurrencyLimiter', raw, SLOT_OPTIONS);
  const ttlMs = optionalInteger('ttlMs', o['ttlMs'], 100, MAX_INT, 30_000);
  const heartbeatMs = optionalInteger('heartbeatMs', o['heartbeatMs'], 100, 60_000, 2_000);
  return Object.freeze({
    redis: portOf(o['redis']),
    max: integer('max', o['max'], 1, MAX_INT),
    ttlMs,
    renewEveryMs: optionalInteger('renewEveryMs', o['renewEveryMs'], 1, Math.floor(ttlMs / 2), Math.floor(ttlMs / 3)),
    pollMs: optionalInteger('pollMs', o['pollMs'], 1, 60_000, 50),
    prefix: prefix(o['prefix']),
    mode: o['mode'] === undefined ? 'local' : mode('mode', o['mode']),
    instances: integerOrAuto('instances', o['instances'], 1_000_000),
    maxInstances: optionalInteger('maxInstances', o['maxInstances'], 1, 1_000_000, 10),
    leaseMs: optionalInteger('leaseMs', o['leaseMs'], heartbeatMs * 3, MAX_INT, Math.max(600_000, heartbeatMs * 3)),
    heartbeatMs,
    breaker: resolveBreakerOptions('ConcurrencyLimiter', o['breaker']),
    clock: optionalFunction('clock', o['clock']),
  });
}
