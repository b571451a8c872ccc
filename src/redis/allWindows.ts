import type { RedisKey } from '../base/time.js';
import type { WindowModel } from './models/WindowModel.js';
import { knownOptions } from '../base/checks.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { checkKey, memberOf, type SentId } from '../base/call.js';
import { integer, MAX_INT } from '../options/options.js';
import { redisKey } from './redisKey.js';

/** One of the limits {@link ResilientLimiter.limitAll} decides together. */
export type LimitAllItem = {
  /** The key this limit counts (e.g. `user:42`, `route:/search`, `global`). */
  key: string;
  /** Permits allowed in any window of `windowMs`. Integer 1 … 2^31 − 1. */
  limit: number;
  /** The window's length in ms. Integer 1 … 2^31 − 1. */
  windowMs: number;
  /** Permits this call takes from this limit. Integer 1 … `limit`. @default 1 */
  cost?: number;
};

/** An item with its arguments checked and its Redis key built. */
export type CheckedItem = {
  readonly key: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly cost: number;
  readonly redisKey: RedisKey;
  /** Its window's name in the journal and among the calls waiting on Redis (`groupOf`). */
  readonly group: string;
  /** 1 for the first item of its Redis key in this call, 2 for the second, …: its member is `id#n` past 1. */
  readonly occurrence: number;
  /** Its window's counting model: the limiter's, for a window of this length. */
  readonly model: WindowModel;
};

/**
 * The journal's group of a call: its key, and its own window for a call of `limitAll()`. A group of
 * `limitAll()` opens with a lone surrogate, which no key can hold (keys are well-formed strings), so
 * that no `limit()` key can name a `limitAll()` window, whatever characters it holds; the key of
 * `limit()` is its group as it is, with no string built per call.
 */
export function groupOf(call: { key: string; windowMs?: number | undefined }): string {
  return call.windowMs === undefined ? call.key : `\uD800${call.windowMs}\u0000${call.key}`;
}

/** The most limits one call may decide together. */
export const MAX_ITEMS = 64;

/**
 * The Redis key of one of `limitAll()`'s windows: the user key is the hash tag (as for `limit()`),
 * and the window length is part of the name, because one sorted set holds one window length (a
 * shorter window would forget calls a longer one still counts). So a `limitAll()` window never
 * shares its key with `limit()`.
 */
export function allKey(prefix: string, key: string, windowMs: number): RedisKey {
  return `${redisKey(prefix, key)}:w${windowMs}` as RedisKey;
}

/** Checks the items of a `limitAll()` call; `model`: the limiter's counting model. @throws {ResilimitError} */
const ITEM_OPTIONS = ['key', 'limit', 'windowMs', 'cost'] satisfies (keyof LimitAllItem)[];

export function checkItems(items: unknown, prefix: string, options: unknown, model: WindowModel): CheckedItem[] {
  if (options !== undefined) knownOptions('limitAll()', options, ['id']);
  if (!Array.isArray(items) || items.length === 0 || items.length > MAX_ITEMS) {
    throw new ResilimitError(
      ErrorCode.INVALID_OPTION,
      `Expected the limits of limitAll() to be an array of 1 to ${MAX_ITEMS} { key, limit, windowMs, cost? }, got ${Array.isArray(items) ? `an array of ${items.length}` : describe(items)}`,
    );
  }
  const seen = new Map<string, number>();
  return items.map((item: unknown, i): CheckedItem => {
    if (typeof item !== 'object' || item === null) throw invalidOption(`limits[${i}]`, 'an object { key, limit, windowMs, cost? }', item);
    const o = knownOptions('limitAll()', item, ITEM_OPTIONS, { path: `limits[${i}].` });
    checkKey(o['key']);
    const limit = integer(`limits[${i}].limit`, o['limit'], 1, MAX_INT);
    const windowMs = integer(`limits[${i}].windowMs`, o['windowMs'], 1, MAX_INT);
    const cost = o['cost'] === undefined ? 1 : integer(`limits[${i}].cost`, o['cost'], 1, limit);
    const { redisKey: rk, model: own } = model.allWindow(prefix, o['key'], windowMs);
    const occurrence = (seen.get(rk) ?? 0) + 1;
    seen.set(rk, occurrence);
    return { key: o['key'], limit, windowMs, cost, redisKey: rk, group: groupOf({ key: o['key'], windowMs }), occurrence, model: own };
  });
}

/**
 * The id of an item in one call: the call's id, `#n` for the n-th occurrence of its Redis key (as
 * the script names its member). A generated id past its first occurrence becomes a string, which the
 * local windows check as a repeat like a caller's id: unique all the same, it never matches.
 */
export function itemId(id: SentId, item: CheckedItem): SentId {
  if (item.occurrence === 1) return id;
  return `${memberOf(id)}#${item.occurrence}`;
}
