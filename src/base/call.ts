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
 * The tag of a generated id (see {@link CallId}). Its two kinds are numbers tagged in their type: made by {@link nextSeq} and {@link localOnly} alone,
 * told apart by {@link isGenerated} and {@link isLocalOnly}, never by reading a sign at a call site.
 */
declare const generated: unique symbol;

/**
 * A generated id (from {@link nextSeq}): unique by construction, never checked, and made into its
 * string ({@link idOf}) only where it leaves the process (Redis members).
 */
export type GeneratedId = number & { readonly [generated]: 'sent' };

/**
 * A generated id of a call the local window admitted that is never to reach Redis (not journalled:
 * `reconcile: false`, a reply error): kept so that `refund()` finds it, never re-seeded, never a
 * Redis member. Made by {@link localOnly}; the number it is kept as costs no allocation.
 */
export type LocalOnlyId = number & { readonly [generated]: 'local-only' };

/**
 * A call's identity, one value for every part that keeps it:
 * - a string is the caller's own id: a call re-sent with it counts once, so the windows check it;
 * - a {@link GeneratedId} is one this process made;
 * - a {@link LocalOnlyId} is a generated one of a call that never reaches Redis.
 * A number costs no string while a call is only kept in memory (the warm window, the journal).
 */
export type CallId = string | GeneratedId | LocalOnlyId;

/** The id of a call that reaches Redis (or may): the caller's, or a {@link GeneratedId}. */
export type SentId = string | GeneratedId;

/**
 * The counter part of a new call id: a small integer that stands for the id (see {@link idOf}), so
 * that a call kept in memory for long holds a number, not a string the garbage collector must move.
 */
export function nextSeq(): GeneratedId {
  counter += 1;
  return counter as GeneratedId;
}

/** The generated id `id` of a call that is never to reach Redis (kept as the number negated: no allocation). */
export function localOnly(id: GeneratedId): LocalOnlyId {
  return -id as LocalOnlyId;
}

/** The generated id a {@link LocalOnlyId} was made from. */
export function generatedOf(id: LocalOnlyId): GeneratedId {
  return -id as GeneratedId;
}

/** Whether `id` is a generated id of a call never to reach Redis (see {@link LocalOnlyId}). */
export function isLocalOnly(id: CallId | undefined): id is LocalOnlyId {
  return typeof id === 'number' && id < 0;
}

/** Whether `id` is a generated id of a call that reaches Redis (see {@link GeneratedId}). */
export function isGenerated(id: CallId | undefined): id is GeneratedId {
  return typeof id === 'number' && id > 0;
}

/** The call id that `seq` (from {@link nextSeq}) stands for. */
export function idOf(seq: GeneratedId): string {
  return seq.toString(36) + processTag;
}

/** The member a call is known by in Redis (a {@link LocalOnlyId} has none). */
export function memberOf(id: SentId): string {
  return typeof id === 'number' ? idOf(id) : id;
}

/**
 * Tells whether a kept call id (see {@link CallId}) is the call `id` names, as a decision gave it:
 * the caller's string, or, for an id this process generated, its {@link GeneratedId} or, as the
 * local window keeps a call never to be written to Redis (see `Fallback.one`), its {@link LocalOnlyId}.
 */
export function sameCall(id: string): (kept: CallId) => boolean {
  const seq = seqOf(id);
  if (seq === undefined) return (kept) => kept === id;
  const local = localOnly(seq);
  return (kept) => kept === seq || kept === local || kept === id;
}

/** The generated id of this process that `id` was made from ({@link idOf}), or undefined for any other id. */
export function seqOf(id: string): GeneratedId | undefined {
  if (!id.endsWith(processTag) || id.length === processTag.length) return undefined;
  const seq = Number.parseInt(id.slice(0, -processTag.length), 36);
  return Number.isSafeInteger(seq) && seq > 0 && idOf(seq as GeneratedId) === id ? (seq as GeneratedId) : undefined;
}

/** The identity of a call: the caller's checked id, or a new generated one. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_ID` */
export function callIdOf(id: unknown): SentId {
  return id === undefined ? nextSeq() : checkId(id);
}
