import { ErrorCode, ResilimitError } from '../../base/errors.js';
import type { RedisMs } from '../../base/time.js';
import { integersOf, loadScript } from './script.js';

/** `lua/slots.lua`: a concurrency limit's slots of one key (KEYS, ARGV and the reply in its header). */
export const slotsScript = loadScript('slots');

/** One op of `lua/slots.lua` on a slot. */
export type SlotAsk =
  | { readonly op: 'acquire'; readonly id: string; readonly cost: number; readonly ttlMs: number; readonly max: number }
  | { readonly op: 'renew' | 'write'; readonly id: string; readonly cost: number; readonly ttlMs: number }
  | { readonly op: 'release'; readonly id: string; readonly cost: number };

/** What an op did: `ok` (acquired, renewed, released, written), the slots held after it, the lease's end. */
export type SlotReply = { readonly nowMs: RedisMs; readonly ok: boolean; readonly held: number; readonly untilMs: number };

const OPS = { acquire: 'a', renew: 'r', release: 'x', write: 'w' } as const;

/** The script's arguments for `ask`; `nowArg` the injected clock, or '' (the script reads Redis's `TIME`). */
export function slotArgs(ask: SlotAsk, nowArg: number | ''): (string | number)[] {
  const ttl = ask.op === 'release' ? '' : ask.ttlMs;
  const max = ask.op === 'acquire' ? ask.max : '';
  return [OPS[ask.op], nowArg, ask.id, ask.cost, ttl, max];
}

/** Reads the script's reply. @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` for any other reply. */
export function readSlot(reply: unknown): SlotReply {
  const values = typeof reply === 'string' ? integersOf(reply) : undefined;
  if (values === undefined || values.length !== 4) {
    throw new ResilimitError(ErrorCode.REDIS_REPLY, `Unexpected reply from the slots script: ${JSON.stringify(reply)}`);
  }
  const [nowMs, ok, held, untilMs] = values as [number, number, number, number];
  return { nowMs: nowMs as RedisMs, ok: ok === 1, held, untilMs };
}
