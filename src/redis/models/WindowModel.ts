/**
 * A counting model: how one window of a key is kept in Redis and which scripts decide on it. The
 * limiter picks one at construction ({@link windowModel}) and asks it everything that depends on
 * the model: keys, script calls, how a call is named in Redis. Nothing else branches on the model.
 * A new model is a new file implementing this interface, and one line in `windowModel()` (choose.ts).
 */
import type { RedisPort } from '../../client/port.js';
import type { RedisKey, RedisMs } from '../../base/time.js';
import type { Script } from '../../base/wire.js';
import type { BatchAsk } from '../scripts/slidingWindow.js';
import type { WriteBackAsk } from '../scripts/reconcile.js';

/** A script and its arguments, its keys given by the caller. */
export type ScriptArgs = { readonly script: Script; readonly args: (string | number)[] };

/** The script's `nowMs`: the window's clock, or '' for Redis's `TIME`. */
export type NowArg = number | '';

/** One decision of a batch of calls of one window length. */
export type DecideAsk = BatchAsk;

/** One call of `limitAll()` on a group of windows that share a slot. */
export type GroupAsk = {
  readonly op: 'take' | 'give' | 'check';
  readonly items: readonly GroupItem[];
  readonly id: string;
  readonly nowArg: string | number;
  readonly notAfterArg: string | number;
  /** Permits of a limit to leave free (see `Settings.reserveOf`); the cost always fits. */
  readonly reserve: (limit: number) => number;
  /** A give: the nowMs of the take's reply (a model that counts by time slices needs it). */
  readonly takenMs?: RedisMs | undefined;
};

/** What a group call needs of an item. */
export type GroupItem = { readonly limit: number; readonly windowMs: number; readonly cost: number; readonly model: WindowModel };

/** A call to give back by the id Redis knows it by, with its cost when known. */
export type RefundAsk = { readonly id: string; readonly cost: number | undefined };

/** The model of one window length. */
export interface WindowModel {
  /** `'exact log'` or `'slices of N ms'`: for messages. */
  readonly name: string;
  /** False when it cannot tell one call from another (a caller's `id` is refused, none is made). */
  readonly namesCalls: boolean;
  /** The Redis key of `key`'s window. */
  keyOf(prefix: string, key: string): RedisKey;
  /** The window of one of `limitAll()`'s limits, of its own length: its key and its model. */
  allWindow(prefix: string, key: string, windowMs: number): { readonly redisKey: RedisKey; readonly model: WindowModel };
  /** A decision of a batch of calls (keys: one a call). */
  decide(ask: DecideAsk): ScriptArgs;
  /** A take, give or check of `limitAll()` (keys: one an item). */
  group(ask: GroupAsk): ScriptArgs;
  /** A write-back of journalled calls into one window (keys: the window's). */
  writeBack(ask: WriteBackAsk): ScriptArgs;
  /** Blocks a key for `ms` (0 lifts it): the reply of the script run. */
  block(redis: RedisPort, ask: { redisKey: RedisKey; windowMs: number; nowArg: NowArg; ms: number }): Promise<unknown>;
  /** Forgets every permit of a key. */
  reset(redis: RedisPort, ask: { redisKey: RedisKey; windowMs: number; nowArg: NowArg }): Promise<void>;
  /** Gives calls back by id: the permits each gave back, in order (0: not in the window). */
  refund(redis: RedisPort, ask: { redisKey: RedisKey; windowMs: number; nowArg: NowArg; calls: readonly RefundAsk[] }): Promise<number[]>;
  /** The id Redis knows a call by, admitted at `nowMs` on Redis's clock. */
  redisId(id: string, nowMs: number): string;
  /** The call's own id in an id {@link redisId} made (the local tiers know it by that). */
  ownId(redisId: string): string;
  /** Throws `ERR_RESILIMIT_INVALID_OPTION` when a caller's `id` cannot be kept. */
  checkCallerId(id: unknown): void;
  /** The time a local window keeps a call Redis admitted at `nowMs`, so that it holds it as long as Redis does. */
  countedFrom(nowMs: RedisMs): RedisMs;
  /** Throws `ERR_RESILIMIT_INVALID_OPTION` unless the window may become `windowMs` long (`update()`). */
  checkWindow(windowMs: number): void;
}
