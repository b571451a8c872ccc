import { ErrorCode, ResilimitError } from '../../base/errors.js';
import { loadScript } from './script.js';

/** `lua/heartbeat.lua`: one beat of the instance count (KEYS, ARGV and the reply in its header). */
export const heartbeatScript = loadScript('heartbeat');

/** An instance in the heartbeat set: its id, and its process's token when the id is a name ('' when unique). */
export type BeatMember = { readonly id: string; readonly token: number | '' };

/** What one beat does: beat clean, beat with calls Redis has not seen yet, or leave the count. */
export type BeatOp = 'clean' | 'dirty' | 'leave';

/**
 * A beat's answer: the instances (this one included, and the silent ones whose lease may still be in
 * force), the other instances that are fresh, when an instance last left the count (Redis's clock; 0
 * when none did lately), and when a beat last found the heartbeat set gone (see `lua/heartbeat.lua`).
 * Claims, fractions of the limit: `granted` this instance's from now on, `reserved` the other
 * instances' that are not fresh, `othersClaim` every other instance's.
 */
export type BeatReply = {
  readonly live: number;
  readonly fresh: number;
  readonly leftAt?: number;
  readonly lostAt?: number;
  readonly granted: number;
  readonly reserved: number;
  readonly othersClaim: number;
  /** The instance's name is held by another process that beats (nothing else in the reply counts). */
  readonly taken?: true;
};

/**
 * How long a beat counts, in ms: `ttlMs` as beating, `quietMs` as fresh (older, the instance may be
 * answering locally), and `holdMs` as holding its share should it fall silent (lease + longest window).
 */
export type BeatTimes = { readonly ttlMs: number; readonly quietMs: number; readonly holdMs: number };

/**
 * The arguments of a beat of `member`: `sinceArg` and `notAfterArg` on Redis's clock, or '' for none
 * (see `RedisTier.beat`).
 */
export function heartbeatArgs(
  member: string,
  times: BeatTimes,
  op: BeatOp,
  sinceArg: number | '',
  notAfterArg: number | '',
  usedClaim: number,
  token: number | '',
): (string | number)[] {
  return [member, times.ttlMs, op, sinceArg, notAfterArg, Math.ceil(times.holdMs), Math.ceil(times.quietMs), usedClaim, token];
}

/** Reads a beat's reply. @throws {ResilimitError} `ERR_RESILIMIT_REDIS_UNAVAILABLE` when the beat reached Redis after its deadline. */
export function readBeat(reply: unknown): BeatReply {
  const [live, fresh, leftAt, , lostAt, granted, reserved, othersClaim] = reply as [
    number,
    number,
    number,
    number,
    number,
    string,
    string,
    string,
  ];
  if (live === -2) return { live: 0, fresh: 0, granted: 0, reserved: 0, othersClaim: 0, taken: true };
  if (live < 0) throw new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, 'A heartbeat reached Redis after its deadline');
  return { live, fresh, leftAt, lostAt, granted: Number(granted), reserved: Number(reserved), othersClaim: Number(othersClaim) };
}
