import { checkGivenId, checkKey } from '../base/call.js';
import { integer, knownOptions, MAX_INT, optionalFunction } from '../base/checks.js';
import { invalidOption } from '../base/errors.js';
import type { RedisClient } from '../client/clientType.js';
import type { RedisPort } from '../client/port.js';
import { portOf } from '../client/portOf.js';
import { prefix as checkPrefix } from '../options/windowOptions.js';
import { redisCallError } from './failures.js';
import { redisKey } from './redisKey.js';
import { readSlot, type SlotAsk, type SlotReply, slotArgs, slotsScript } from './scripts/slots.js';

/** The options of {@link RedisSlots}. */
export type RedisSlotsOptions = {
  /** A client of ioredis, iovalkey, node-redis or Valkey GLIDE. resilimit never closes it. Required. */
  redis: RedisClient;
  /** Slots of a key held at once, across every client. Integer 1 … 2^31 − 1. Required. */
  max: number;
  /** How long a slot is held without a renewal, ms. Integer 1 … 2^31 − 1. Required. */
  ttlMs: number;
  /** Prefix of every Redis key written (at most 128 characters, no braces). @default 'resilimit:' */
  prefix?: string;
  /** A client clock in ms since the epoch, for tests; absent: Redis's `TIME` times every lease. */
  now?: () => number;
};

/**
 * A concurrency limit kept in Redis, one sorted set per key (`lua/slots.lua`): at most `max` slots of
 * a key held at once across every client, each for a lease timed by Redis's clock (not the clients'),
 * which its holder renews while it holds the slot. A holder that stops renewing (it crashed, it
 * froze) gives its slot back when its lease ends. Acquire, renew and release are one script call
 * each; renew and release of a slot not held change nothing, so both are safe to repeat and against
 * each other. No fallback: when Redis cannot answer, a call rejects with
 * `ERR_RESILIMIT_REDIS_UNAVAILABLE` (the cause attached).
 *
 * `ConcurrencyLimiter` calls it through its breaker (`slots/SlotTier.ts`), which answers while Redis cannot.
 */
export class RedisSlots {
  readonly #redis: RedisPort;
  readonly #prefix: string;
  readonly #now: (() => number) | undefined;
  readonly max: number;
  readonly ttlMs: number;

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming the option. */
  constructor(options: RedisSlotsOptions) {
    const o = knownOptions('RedisSlots', options, ['redis', 'max', 'ttlMs', 'prefix', 'now']);
    this.#redis = portOf(o['redis']);
    this.max = integer('max', o['max'], 1, MAX_INT);
    this.ttlMs = integer('ttlMs', o['ttlMs'], 1, MAX_INT);
    this.#prefix = checkPrefix(o['prefix']);
    this.#now = optionalFunction('now', o['now']);
  }

  /** The Redis key of `key`'s slots: `<prefix>{<key>}:c`, in the slot of the key's other keys. */
  keyOf(key: string): string {
    checkKey(key);
    return `${redisKey(this.#prefix, key)}:c`;
  }

  /**
   * Takes `cost` slots of `key` for the slot `id` when there is room: `ok` true with the lease's end
   * (`untilMs`), or false (refused: `held` slots are taken). An `id` already held is renewed. `max`:
   * this call's bound, when less than the option's (room kept for others).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_ID`, `ERR_RESILIMIT_INVALID_OPTION`
   *   (a cost outside 1 … max); `ERR_RESILIMIT_REDIS_UNAVAILABLE` or `ERR_RESILIMIT_REDIS_REPLY`.
   */
  acquire(key: string, id: string, cost = 1, max = this.max): Promise<SlotReply> {
    return this.#send(this.keyOf(key), { op: 'acquire', id: checkGivenId(id), cost: this.#cost(cost), ttlMs: this.ttlMs, max });
  }

  /** Writes slot `id` with a whole lease, even past `max`: a slot held while Redis could not answer (`ok` true). */
  write(key: string, id: string, cost = 1): Promise<SlotReply> {
    return this.#send(this.keyOf(key), { op: 'write', id: checkGivenId(id), cost: this.#cost(cost), ttlMs: this.ttlMs });
  }

  /** Moves the lease of slot `id` to `ttlMs` from now; `ok` false when it is not held (its lease ended, or it was released). */
  renew(key: string, id: string, cost = 1): Promise<SlotReply> {
    return this.#send(this.keyOf(key), { op: 'renew', id: checkGivenId(id), cost: this.#cost(cost), ttlMs: this.ttlMs });
  }

  /** Gives slot `id` back; `ok` false when it was not held (released already, or its lease ended). */
  release(key: string, id: string, cost = 1): Promise<SlotReply> {
    return this.#send(this.keyOf(key), { op: 'release', id: checkGivenId(id), cost: this.#cost(cost) });
  }

  /** Checks a key and a cost as {@link acquire} does, sending nothing. @throws {ResilimitError} */
  check(key: string, cost: unknown): void {
    this.keyOf(key);
    this.#cost(cost);
  }

  #cost(cost: unknown): number {
    if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 1 || cost > this.max) {
      throw invalidOption('cost', `an integer from 1 to max (${this.max})`, cost);
    }
    return cost;
  }

  /** Checked arguments, synchronously: bad input throws before anything is sent. */
  async #send(redisKeyOfKey: string, ask: SlotAsk): Promise<SlotReply> {
    const now = this.#now;
    let reply: unknown;
    try {
      reply = await this.#redis.run(slotsScript, [redisKeyOfKey], slotArgs(ask, now === undefined ? '' : Math.floor(now())));
    } catch (error) {
      throw redisCallError(error);
    }
    return readSlot(reply);
  }
}
