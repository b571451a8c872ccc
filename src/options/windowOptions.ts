import type { RedisPort } from '../client/port.js';
import { portOf } from '../client/portOf.js';
import type { RedisClient } from '../client/clientType.js';
import { integer, knownOptions, MAX_INT, optionalFunction, optionalInteger } from '../base/checks.js';
import { steadyClock } from './clock.js';
import { invalidOption } from '../base/errors.js';
import { requireRuntime } from '../base/runtime.js';

export { MAX_ID_LENGTH, MAX_INT, MAX_KEY_LENGTH } from '../base/checks.js';
/** A Redis key prefix may be at most this many characters long. */
export const MAX_PREFIX_LENGTH = 128;

/** Options shared by both tiers. */
export type WindowOptions = {
  /** Permits allowed in any window of `windowMs`. Integer, 1 to 2^31 - 1. Required. */
  limit: number;
  /** The window's length in milliseconds. Integer, 1 to 2^31 - 1 (about 24.8 days). Required. */
  windowMs: number;
};

/** Options of {@link LocalWindow}. */
export type LocalWindowOptions = WindowOptions & {
  /**
   * The most keys kept in memory. Past it, the least recently used key is forgotten: its next call
   * starts from an empty window. Integer, 1 to 2^24. Required: the local tier is always bounded.
   */
  maxKeys: number;
  /**
   * The clock, in milliseconds since the epoch. Inject one in tests so that nothing sleeps.
   * @default `Date.now()` at construction plus `performance.now()` elapsed since: a wall clock that steps does not move it
   */
  now?: () => number;
};

/** Options of {@link RedisWindow}. */
export type RedisWindowOptions = WindowOptions & {
  /** A client of ioredis, iovalkey, node-redis or Valkey GLIDE (docs/clients.md). resilimit never closes it and defines no command on it. Required. */
  redis: RedisClient;
  /**
   * Prefix of every Redis key written. At most 128 characters, without `{` or `}` (they would
   * change the key's hash slot).
   * @default 'resilimit:'
   */
  prefix?: string;
  /**
   * A client clock in milliseconds since the epoch. When absent, Redis's own `TIME` is used, so that
   * the application servers' clock skew cannot widen the window. Give one in tests, or where every
   * client's clock is trusted more than Redis's. Below 9 × 10^13 (Redis refuses larger values: a
   * reply error naming `nowMs`).
   * @default undefined (Redis `TIME`)
   */
  now?: () => number;
  /**
   * A call refused for want of permits blocks its key for this long, in ms: every call of the key is
   * refused until then, whatever its window holds (a penalty, against brute force). Calls refused
   * while the key is blocked do not lengthen the block. 0: no penalty.
   * @default 0 (range 0 … 2^31 - 1)
   */
  blockMs?: number;
  /**
   * Counts calls by time slices of this many ms instead of one by one: Redis keeps a key in a few
   * hundred bytes and decides with one read and one write of its head, whatever the limit (the exact log keeps one member
   * per call in the window: about 100 KB at a limit of 1,000). Never more than `limit` permits in
   * any window, as the exact log; a call may be refused up to one slice earlier than it would refuse
   * it (a call counts until the end of its slice plus the window). Integer, 1 … `windowMs`, with
   * `windowMs / resolutionMs` at most 4096 (60 slices a window is a good start), or `'auto'`: 60
   * slices a window when `limit` is above 100, else the exact log (decided once, at construction). Not with
   * a caller's `id` (a slice counts calls, it does not name them: `ERR_RESILIMIT_INVALID_OPTION`);
   * `refund()` goes by the slice in the decision's id; `limitAll()`'s windows are cut in as many slices
   * as this window (`ResilientLimiter`). Its keys are not the exact log's: changing it starts
   * every key's window afresh, as changing `prefix` does. See docs/resolution.md.
   * @default undefined (the exact log)
   */
  resolutionMs?: number | 'auto';
};

export type ResolvedWindowOptions = Readonly<{ limit: number; windowMs: number }>;
export type ResolvedLocalWindowOptions = ResolvedWindowOptions & Readonly<{ maxKeys: number; now: () => number }>;
export type ResolvedRedisWindowOptions = ResolvedWindowOptions &
  Readonly<{ redis: RedisPort; prefix: string; now: (() => number) | undefined; blockMs: number; resolutionMs: number | undefined }>;

/** Validates the options both tiers share. */
export function resolveWindowOptions(options: Record<string, unknown>): ResolvedWindowOptions {
  return {
    limit: integer('limit', options['limit'], 1, MAX_INT),
    windowMs: integer('windowMs', options['windowMs'], 1, MAX_INT),
  };
}

/** A per-key `limit`: the permits of `key`'s calls, an integer from 1 to 2^31 - 1 (see `limitValue`). */
export type LimitFunction = (key: string) => number;

/** Validates {@link LocalWindowOptions} and returns a frozen copy with defaults filled in. */
export function resolveLocalWindowOptions(raw: unknown): ResolvedLocalWindowOptions {
  requireRuntime();
  const options = knownOptions('LocalWindow', raw, ['limit', 'windowMs', 'maxKeys', 'now'] satisfies (keyof LocalWindowOptions)[]);
  return Object.freeze({
    ...resolveWindowOptions(options),
    maxKeys: integer('maxKeys', options['maxKeys'], 1, 2 ** 24),
    now: optionalFunction('now', options['now']) ?? steadyClock(),
  });
}

/** Validates {@link RedisWindowOptions} and returns a frozen copy with defaults filled in. */
export function resolveRedisWindowOptions(raw: unknown): ResolvedRedisWindowOptions {
  requireRuntime();
  const options = knownOptions('RedisWindow', raw, [
    'limit',
    'windowMs',
    'redis',
    'prefix',
    'now',
    'blockMs',
    'resolutionMs',
  ] satisfies (keyof RedisWindowOptions)[]);
  const window = resolveWindowOptions(options);
  return Object.freeze({
    ...window,
    redis: portOf(options['redis']),
    prefix: prefix(options['prefix']),
    now: optionalFunction('now', options['now']),
    blockMs: optionalInteger('blockMs', options['blockMs'], 0, MAX_INT, 0),
    resolutionMs: resolution(options['resolutionMs'], window.windowMs, window.limit),
  });
}

/** The most slices a window may have with `resolutionMs` (the script's bound: see lua/sliced-window.lua). */
export const MAX_SLICES = 4096;

/** With `resolutionMs: 'auto'`, limits above this are counted by slices (a full exact log of 100 calls is 2.6 KB). */
export const AUTO_EXACT_MAX = 100;

/**
 * Checks `resolutionMs` against the window it slices: undefined (the exact log) when absent. `'auto'`:
 * 60 slices a window when `limit` is above {@link AUTO_EXACT_MAX} (or a function: limits unknown), else the exact log.
 */
export function resolution(value: unknown, windowMs: number, limit?: number): number | undefined {
  if (value === undefined) return undefined;
  if (value === 'auto') return limit !== undefined && limit <= AUTO_EXACT_MAX ? undefined : Math.max(1, Math.floor(windowMs / 60));
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > windowMs) {
    throw invalidOption('resolutionMs', `an integer from 1 to windowMs (${windowMs}), or 'auto'`, value);
  }
  if (windowMs / value > MAX_SLICES) {
    throw invalidOption(
      'resolutionMs',
      `at least windowMs / ${MAX_SLICES} (${Math.ceil(windowMs / MAX_SLICES)} for a window of ${windowMs} ms: at most ${MAX_SLICES} slices a window)`,
      value,
    );
  }
  return value;
}

/** Checks the `prefix` option: 'resilimit:' when absent. */
export function prefix(value: unknown): string {
  if (value === undefined) return 'resilimit:';
  if (typeof value !== 'string' || value.length > MAX_PREFIX_LENGTH || /[{}]/.test(value) || !value.isWellFormed()) {
    throw invalidOption('prefix', `a string of at most ${MAX_PREFIX_LENGTH} characters without \`{\` or \`}\``, value);
  }
  return value;
}

/**
 * Hot keys (the `hotKeys` option of `ResilientLimiter`): a key this process calls often takes permits
 * ahead in Redis, a lease (see docs/resolution.md, "Hot keys").
 */
export type HotKeyOptions = {
  /**
   * How long, in ms, a lease's permits may be used after it was taken. Its permits count in Redis
   * until then plus the window, so a call may be refused up to this much earlier than the exact log
   * would. Integer 1 … windowMs. @default windowMs / 60, at most 1000 (at least 1)
   */
  validityMs?: number;
  /** The most permits one lease takes. Integer 1 … 2^31 − 1. @default 10000 */
  maxPermits?: number;
};

/**
 * Checks the `hotKeys` option: undefined (no leases) for false or absent; `true` for the defaults.
 * Leases are members of the exact log: not with a numeric `resolutionMs` (`'auto'` is read as the exact log).
 */
export function hotKeys(value: unknown, windowMs: number, resolutionMs: unknown): Readonly<Required<HotKeyOptions>> | undefined {
  if (value === undefined || value === false) return undefined;
  if (typeof resolutionMs === 'number') {
    throw invalidOption('hotKeys', `absent with resolutionMs (${resolutionMs} ms): leases are taken in the exact log only`, value);
  }
  if (value !== true && (typeof value !== 'object' || value === null)) {
    throw invalidOption('hotKeys', 'true, false or an object { validityMs?, maxPermits? }', value);
  }
  const options = value === true ? {} : knownOptions('ResilientLimiter', value, ['validityMs', 'maxPermits'], { path: 'hotKeys.' });
  return Object.freeze({
    validityMs: optionalInteger(
      'hotKeys.validityMs',
      options['validityMs'],
      1,
      windowMs,
      Math.max(1, Math.min(1000, Math.floor(windowMs / 60))),
    ),
    maxPermits: optionalInteger('hotKeys.maxPermits', options['maxPermits'], 1, MAX_INT, 10_000),
  });
}

/**
 * `heartbeatMs`'s default: a twelfth of the window, within 100 … 1,000 ms. The others then reserve a
 * cut-off instance's share (3 beats) within the quarter of a window its ghosts cover (`LocalWindow.lost`).
 */
export function defaultHeartbeatMs(windowMs: number): number {
  return Math.min(1000, Math.max(100, Math.floor(windowMs / 12)));
}
