/**
 * Numbers that mean different things, told apart by their types. Each is a plain number at run time;
 * a value gets its brand where it is made (a clock's reading, a key's construction) or through a
 * named conversion, and a function that takes one refuses the others.
 */
declare const brand: unique symbol;
type Brand<T, B extends string> = T & { readonly [brand]: B };

/**
 * ms on this process's local clock: the `clock` option, or a steady clock in ms since the epoch that
 * a wall-clock step does not move (`steadyClock`). The local windows, the journal and the fallback's
 * times.
 */
export type LocalMs = Brand<number, 'LocalMs'>;

/** ms on Redis's clock (its `TIME`), as a script reads it: the times in Redis's windows. */
export type RedisMs = Brand<number, 'RedisMs'>;

/**
 * A Redis key, made from a user key by `redisKey` (or `allKey` for a `limitAll()` window): the
 * prefix, the user key escaped as the hash tag, and a window's suffix. A user key is a plain string.
 */
export type RedisKey = Brand<string, 'RedisKey'>;

/** The local clock, branded: a reading of `now` is a {@link LocalMs}. */
export function localClock(now: () => number): () => LocalMs {
  return now as () => LocalMs;
}
