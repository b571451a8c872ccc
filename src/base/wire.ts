/**
 * The types that cross the layers: what a script is, a call waiting to be written into Redis, and
 * what a write-back reports. Types only: the code that makes and reads them lives in its tier.
 */
import type { SentId } from './call.js';

/** A Lua script shipped in `lua/`, with its SHA1 computed once. */
export type Script = { readonly name: string; readonly source: string; readonly sha: string };

/**
 * A call admitted by the local window while Redis could not answer, or one of the warm window's
 * calls to re-seed a Redis that lost its data. Every call has an id, the same in the local window
 * and here, so that a call both re-seeded and written back, or written back and also run late in
 * Redis, counts once.
 */
export type PendingCall = {
  key: string;
  at: number;
  cost: number;
  /** The call's id, or the number a generated one was made from (see `idOf`): no string per call while Redis is down. */
  id: SentId;
  /** Set for a call of one of `limitAll()`'s windows: its own window length (and Redis key). */
  windowMs?: number;
};

/** What a write-back batch did: calls written, calls already out of their window, calls Redis held already. */
export type WriteBackReply = [written: number, expired: number, present: number];
