import type { RedisKey, RedisMs } from '../time.js';
import { knownOptions } from '../options/checks.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../options/errors.js';
import { checkKey, idOf, type CallId } from '../options/input.js';
import { integer, MAX_INT } from '../options/options.js';
import { groupOf } from '../recovery/Journal.js';
import { redisKey } from '../redis/redisKey.js';

export type { LimitAllDecision } from './decisions.js';

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
  /** Its window's slices' length when counted by slices (see {@link allSlicesOf}), else undefined (an exact log). */
  readonly resolutionMs: number | undefined;
};

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

/**
 * How many slices a `limitAll()` window is cut in: as many as `limit()`'s window when the limiter
 * counts it by slices (`resolutionMs`, at construction: `update()` does not change the keys), else
 * undefined (exact logs).
 */
export function allSlicesOf(options: { readonly windowMs: number; readonly resolutionMs: number | undefined }): number | undefined {
  return options.resolutionMs === undefined ? undefined : Math.ceil(options.windowMs / options.resolutionMs);
}

/**
 * The Redis key of a `limitAll()` window and its slices' length: {@link allKey}, or with `slices`
 * (see {@link allSlicesOf}) a window cut in that many slices of at least 1 ms, `…:s<resolutionMs>`.
 */
export function allWindow(
  prefix: string,
  key: string,
  windowMs: number,
  slices: number | undefined,
): { readonly redisKey: RedisKey; readonly resolutionMs: number | undefined } {
  const exact = allKey(prefix, key, windowMs);
  if (slices === undefined) return { redisKey: exact, resolutionMs: undefined };
  const resolutionMs = Math.max(1, Math.ceil(windowMs / slices));
  return { redisKey: `${exact}:s${resolutionMs}` as RedisKey, resolutionMs };
}

/**
 * The time a local window keeps a call Redis admitted at `nowMs` at, so that it holds the call as long
 * as Redis counts it: `nowMs` in an exact log; in a window cut in slices of `resolutionMs`, the end of
 * the call's slice (Redis counts it until then plus the window: up to a slice longer than the call's
 * own time plus the window, see docs/resolution.md).
 */
export function countedFrom(nowMs: RedisMs, resolutionMs: number | undefined): RedisMs {
  return resolutionMs === undefined ? nowMs : (((Math.floor(nowMs / resolutionMs) + 1) * resolutionMs) as RedisMs);
}

/** Checks the items of a `limitAll()` call; `slices`: see {@link allSlicesOf}. @throws {ResilimitError} */
const ITEM_OPTIONS = ['key', 'limit', 'windowMs', 'cost'] satisfies (keyof LimitAllItem)[];

export function checkItems(items: unknown, prefix: string, options?: unknown, slices?: number): CheckedItem[] {
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
    const { redisKey: rk, resolutionMs } = allWindow(prefix, o['key'], windowMs, slices);
    const occurrence = (seen.get(rk) ?? 0) + 1;
    seen.set(rk, occurrence);
    return { key: o['key'], limit, windowMs, cost, redisKey: rk, group: groupOf({ key: o['key'], windowMs }), occurrence, resolutionMs };
  });
}

/**
 * The id of an item in one call: the call's id, `#n` for the n-th occurrence of its Redis key (as
 * the script names its member). A generated id past its first occurrence becomes a string, which the
 * local windows check as a repeat like a caller's id: unique all the same, it never matches.
 */
export function itemId(id: CallId, item: CheckedItem): CallId {
  if (item.occurrence === 1) return id;
  return `${typeof id === 'number' ? idOf(id) : id}#${item.occurrence}`;
}
