import { randomBytes } from 'node:crypto';
import { isObject, MAX_ID_LENGTH, MAX_KEY_LENGTH, unknownOption } from './checks.js';
import { describe, ErrorCode, invalidOption, ResilimitError } from './errors.js';

// Per-call checks: they run on every limit() call, so they are kept to a few comparisons.

/** Throws `ERR_RESILIMIT_INVALID_KEY` unless `key` is a well-formed string of 1 to 1024 characters. */
export function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH || !key.isWellFormed()) {
    throw new ResilimitError(
      ErrorCode.INVALID_KEY,
      `Expected \`key\` to be a well-formed string of 1 to ${MAX_KEY_LENGTH} characters, got ${describe(key)}`,
    );
  }
}

const CALL_OPTIONS = ['cost', 'id'];

/**
 * Throws `ERR_RESILIMIT_INVALID_OPTION` unless a call's options are absent or an object of `cost` and
 * `id` only: `{ costs: 5 }` would otherwise run as cost 1. `owner`: `'limit()'`, say.
 */
export function checkCallOptions(owner: string, options: unknown): void {
  if (options === undefined) return;
  if (!isObject(options)) throw invalidOption('options', 'an object { cost?, id? }', options);
  for (const name in options) if (!CALL_OPTIONS.includes(name)) throw unknownOption(owner, name, options[name], CALL_OPTIONS);
}

/** Returns the cost of a call (1 when absent); throws `ERR_RESILIMIT_INVALID_COST` unless it is an integer in 1..limit. */
export function checkCost(cost: unknown, limit: number): number {
  if (cost === undefined) return 1;
  if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 1 || cost > limit) {
    throw new ResilimitError(
      ErrorCode.INVALID_COST,
      `Expected \`cost\` to be an integer from 1 to the limit (${limit}), got ${describe(cost)}`,
    );
  }
  return cost;
}

/** Returns the call's id, generating one when absent; throws `ERR_RESILIMIT_INVALID_ID` for a bad one. */
export function checkId(id: unknown): string {
  return id === undefined ? nextId() : checkGivenId(id);
}

/** Returns `id`, which must be given; throws `ERR_RESILIMIT_INVALID_ID` unless it is a well-formed string of 1 to 128 characters. */
export function checkGivenId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH || !id.isWellFormed()) {
    throw new ResilimitError(
      ErrorCode.INVALID_ID,
      `Expected \`id\` to be a well-formed string of 1 to ${MAX_ID_LENGTH} characters, got ${describe(id)}`,
    );
  }
  return id;
}

// A random per-process prefix (48 bits) and a counter: unique across processes with overwhelming
// probability, short (it is stored once per admitted call), and cheap to make.
const processTag = randomBytes(6).toString('base64url');
let counter = 0;

/** A new call id, unique across processes: a counter followed by a random per-process tag. */
export function nextId(): string {
  return idOf(nextSeq());
}

/**
 * The counter part of a new call id: a small integer that stands for the id (see {@link idOf}), so
 * that a call kept in memory for long holds a number, not a string the garbage collector must move.
 */
export function nextSeq(): number {
  counter += 1;
  return counter;
}

/** The call id that `seq` (from {@link nextSeq}) stands for. */
export function idOf(seq: number): string {
  return seq.toString(36) + processTag;
}

/**
 * A call's identity, one value for every part that keeps it:
 * - a string is the caller's own id: a call re-sent with it counts once, so the windows check it;
 * - a number is a generated one (from {@link nextSeq}): unique by construction, never checked, and
 *   made into its string ({@link idOf}) only where it leaves the process (Redis members);
 * - a negative number is a generated one, negated, of a call the local window admitted that is never
 *   to reach Redis (not journalled: `reconcile: false`, a reply error): kept so that `refund()` finds
 *   it, never re-seeded.
 * A number costs no string while a call is only kept in memory (the warm window, the journal).
 */
export type CallId = string | number;

/** The member a call is known by in Redis. */
export function memberOf(id: CallId): string {
  return typeof id === 'number' ? idOf(id) : id;
}

/**
 * Tells whether a kept call id (see {@link CallId}) is the call `id` names, as a decision gave it:
 * the caller's string, or, for an id this process generated, its number (negative as the local
 * window keeps a call never to be written to Redis: see `Fallback.one`).
 */
export function sameCall(id: string): (kept: CallId) => boolean {
  const seq = seqOf(id);
  return seq === undefined ? (kept) => kept === id : (kept) => kept === seq || kept === -seq || kept === id;
}

/** The number a generated id of this process was made from ({@link idOf}), or undefined for any other id. */
export function seqOf(id: string): number | undefined {
  if (!id.endsWith(processTag) || id.length === processTag.length) return undefined;
  const seq = Number.parseInt(id.slice(0, -processTag.length), 36);
  return Number.isSafeInteger(seq) && seq > 0 && idOf(seq) === id ? seq : undefined;
}

/** The identity of a call: the caller's checked id, or a new generated one. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_ID` */
export function callIdOf(id: unknown): CallId {
  return id === undefined ? nextSeq() : checkId(id);
}
