import { ReplyError } from '../../client/port.js';
import { ErrorCode, ResilimitError } from '../../base/errors.js';
import { memberOf, type SentId } from '../../base/call.js';
import type { RedisMs } from '../../base/time.js';
import type { Decision } from '../../types.js';
import { loadScript, replyIntegers, type Script } from './script.js';

/** `lua/sliding-window.lua`: decides a batch of calls, each against its limit (KEYS, ARGV and the reply in its header). */
export const slidingWindow = loadScript('sliding-window');

/** What the script tells beyond the decision: the time it decided at and whether the id was a repeat. */
export type RedisDecision = Decision & {
  /** The time of the decision, in ms since the epoch (Redis's clock unless `now` was given). */
  nowMs: RedisMs;
  /** True when the call's id was already in the window: admitted, not counted again. */
  duplicate: boolean;
  /** True when the call was refused because its key is blocked (`block()`, `blockMs`): `retryAfterMs` counts the block. */
  blocked: boolean;
};

/**
 * A decision of a batch, as the limiter reads it: also the permits in use in the key's window after
 * the call, every instance's (exact, also when the call was decided with permits left free). @internal
 */
export type BatchDecision = RedisDecision & { readonly used: number };

/**
 * What a batch tells of one call: its decision, or why Redis could not decide it while deciding the
 * others (its key holds a value of another type: `ERR_RESILIMIT_REDIS_REPLY`). @internal
 */
export type BatchOutcome = BatchDecision | ResilimitError;

/** The decision a batch gave a call; throws the error of a call Redis could not decide. @internal */
export function decisionOf(outcome: BatchOutcome): BatchDecision {
  if (outcome instanceof ResilimitError) throw outcome;
  return outcome;
}

/** A decision of a batch of calls of one window length (see `WindowModel.decide`). */
export type BatchAsk = {
  readonly windowMs: number;
  /** The script's `nowMs`: the window's clock, or '' for Redis's `TIME`. */
  readonly nowArg: number | '';
  /** The call changes nothing when Redis runs it after this (ms on the window's clock), or ''. */
  readonly notAfterArg: number | '';
  readonly blockMs: number;
  readonly calls: readonly BatchCall[];
  /** Each call's limit less the permits left free. */
  readonly effective: readonly number[];
};

/**
 * The script's arguments: the batch's own (`nowArg`, `notAfterArg`: '' for none), then, when every
 * call is of cost 1 under one limit (the usual batch), that limit once and the ids; else a limit, a
 * cost and an id per call. `effective`: each call's limit less the permits left free.
 */
export function slidingWindowArgs(ask: BatchAsk): (string | number)[] {
  const { windowMs, nowArg, notAfterArg, blockMs, calls, effective } = ask;
  const args: (string | number)[] = [windowMs, nowArg, notAfterArg, blockMs, ''];
  const shared = sharedLimit(calls, effective);
  if (shared !== undefined) {
    args[4] = shared;
    for (const call of calls) args.push(memberOf(call.id));
  } else {
    for (const [i, call] of calls.entries()) args.push(effective[i] as number, call.cost, memberOf(call.id));
  }
  return args;
}

/** The limit every call of a batch is decided against when all are of cost 1 under one (the usual batch: sent once), else undefined. */
export function sharedLimit(calls: readonly BatchCall[], effective: readonly number[]): number | undefined {
  const shared = effective[0] as number;
  return calls.every((call, i) => call.cost === 1 && effective[i] === shared) ? shared : undefined;
}

/**
 * One call of a batch: checked arguments (a generated id is made into its member here, as it leaves
 * the process), and the limit it is decided against.
 */
export type BatchCall = { readonly key: string; readonly cost: number; readonly id: SentId; readonly limit: number };

/**
 * Reads the script's reply: "nowMs,stale" then "allowed,used,retryAfterMs,resetAtMs,flags" per call
 * (flags 4: the call's key holds a value of another type, and the call was not decided).
 */
export function readDecisions(
  reply: unknown,
  calls: readonly BatchCall[],
  effective: readonly number[],
  script: Script = slidingWindow,
): BatchOutcome[] {
  return decisionsOf(replyIntegers(script, reply, 2 + 5 * calls.length), calls, effective);
}

/** The decisions of {@link readDecisions} from the reply's integers (a reply may hold more after them: lua/lease.lua's grant). */
export function decisionsOf(values: readonly number[], calls: readonly BatchCall[], effective: readonly number[]): BatchOutcome[] {
  const nowMs = values[0] as RedisMs;
  const decisions: BatchOutcome[] = [];
  for (let c = 0, i = 2; c < calls.length; c += 1, i += 5) {
    const flags = values[i + 4] as number;
    if (flags === WRONG_TYPE) {
      decisions.push(wrongType((calls[c] as BatchCall).key));
      continue;
    }
    const used = values[i + 1] as number;
    decisions.push({
      allowed: values[i] === 1,
      limit: (calls[c] as BatchCall).limit,
      remaining: Math.max((effective[c] as number) - used, 0),
      retryAfterMs: values[i + 2] as number,
      resetAtMs: values[i + 3] as number,
      source: 'redis',
      nowMs,
      duplicate: (flags & 1) === 1,
      blocked: (flags & 2) === 2,
      used,
    });
  }
  return decisions;
}

/** The flags of a call whose key holds a value of another type (see `lua/sliding-window.lua`). */
const WRONG_TYPE = 4;

/** The error of a call Redis did not decide because its key holds another type; `cause`: Redis's error, as the script saw it. */
function wrongType(key: string): ResilimitError {
  return new ResilimitError(
    ErrorCode.REDIS_REPLY,
    `Redis rejected the call: WRONGTYPE: the Redis key of ${JSON.stringify(key)} holds a value of another type than this limiter's sorted set (another program's key under this prefix?)`,
    { cause: new ReplyError('WRONGTYPE Operation against a key holding the wrong kind of value') },
  );
}
