import type { Cluster, Redis } from 'ioredis';
import { invalidOption } from './errors.js';

/** The largest limit, window, cost or key count accepted: 2^31 - 1. */
export const MAX_INT = 2_147_483_647;
/** Keys and request ids may be at most this many UTF-16 code units long. */
export const MAX_KEY_LENGTH = 1024;
/** A request id may be at most this many UTF-16 code units long. */
export const MAX_ID_LENGTH = 128;
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
   * @default Date.now
   */
  now?: () => number;
};

/** Options of {@link RedisWindow}. */
export type RedisWindowOptions = WindowOptions & {
  /** An ioredis `Redis` or `Cluster` client. resilimit never closes it and defines no command on it. Required. */
  redis: Redis | Cluster;
  /**
   * Prefix of every Redis key written. At most 128 characters, without `{` or `}` (they would
   * change the key's hash slot).
   * @default 'resilimit:'
   */
  prefix?: string;
  /**
   * A client clock in milliseconds since the epoch. When absent, Redis's own `TIME` is used, so that
   * the application servers' clock skew cannot widen the window. Give one in tests, or where every
   * client's clock is trusted more than Redis's.
   * @default undefined (Redis `TIME`)
   */
  now?: () => number;
};

export type ResolvedWindowOptions = Readonly<{ limit: number; windowMs: number }>;
export type ResolvedLocalWindowOptions = ResolvedWindowOptions & Readonly<{ maxKeys: number; now: () => number }>;
export type ResolvedRedisWindowOptions = ResolvedWindowOptions &
  Readonly<{ redis: Redis | Cluster; prefix: string; now: (() => number) | undefined }>;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Checks an integer option in [min, max]. */
export function integer(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalidOption(name, `an integer from ${min} to ${max}`, value);
  }
  return value;
}

function optionalFunction(name: string, value: unknown): (() => number) | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw invalidOption(name, 'a function returning milliseconds', value);
  return value as () => number;
}

function requireObject(value: unknown): Record<string, unknown> {
  if (!isObject(value)) throw invalidOption('options', 'an object', value);
  return value;
}

/** Validates the options both tiers share. */
export function resolveWindowOptions(options: Record<string, unknown>): ResolvedWindowOptions {
  return {
    limit: integer('limit', options['limit'], 1, MAX_INT),
    windowMs: integer('windowMs', options['windowMs'], 1, MAX_INT),
  };
}

/** Validates {@link LocalWindowOptions} and returns a frozen copy with defaults filled in. */
export function resolveLocalWindowOptions(raw: unknown): ResolvedLocalWindowOptions {
  const options = requireObject(raw);
  return Object.freeze({
    ...resolveWindowOptions(options),
    maxKeys: integer('maxKeys', options['maxKeys'], 1, 2 ** 24),
    now: optionalFunction('now', options['now']) ?? Date.now,
  });
}

/** Validates {@link RedisWindowOptions} and returns a frozen copy with defaults filled in. */
export function resolveRedisWindowOptions(raw: unknown): ResolvedRedisWindowOptions {
  const options = requireObject(raw);
  return Object.freeze({
    ...resolveWindowOptions(options),
    redis: redisClient(options['redis']),
    prefix: prefix(options['prefix']),
    now: optionalFunction('now', options['now']),
  });
}

/** Checks that a value looks like an ioredis `Redis` or `Cluster`. */
export function redisClient(value: unknown): Redis | Cluster {
  const client = value as Partial<Record<'evalsha' | 'eval' | 'del' | 'on', unknown>> | undefined;
  if (
    !isObject(value) ||
    typeof client?.evalsha !== 'function' ||
    typeof client.eval !== 'function' ||
    typeof client.del !== 'function'
  ) {
    throw invalidOption('redis', 'an ioredis Redis or Cluster client', value);
  }
  return value as unknown as Redis | Cluster;
}

function prefix(value: unknown): string {
  if (value === undefined) return 'resilimit:';
  if (typeof value !== 'string' || value.length > MAX_PREFIX_LENGTH || /[{}]/.test(value) || !value.isWellFormed()) {
    throw invalidOption('prefix', `a string of at most ${MAX_PREFIX_LENGTH} characters without \`{\` or \`}\``, value);
  }
  return value;
}
