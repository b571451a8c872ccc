import { nextId } from '../base/call.js';
import { ErrorCode, isResilimitError } from '../base/errors.js';
import type { RedisClient } from '../client/clientType.js';
import type { Mode } from '../options/options.js';
import { withDeadline } from '../client/withDeadline.js';
import { steadyClock } from '../options/clock.js';
import type { ResolvedSlotOptions } from '../options/slotOptions.js';
import { InstanceCounter } from '../recovery/InstanceCounter.js';
import { Breaker, type BreakerState } from '../redis/Breaker.js';
import { isRedisUnavailable, NOT_READY, redisCallError } from '../redis/failures.js';
import { RedisSlots } from '../redis/RedisSlots.js';
import type { SlotReply } from '../redis/scripts/slots.js';
import { heartbeatArgs, heartbeatScript, readBeat } from '../redis/scripts/heartbeat.js';

/** Who gave a slot: Redis, this instance's share while Redis could not answer, or `fail-open`. */
export type SlotSource = 'redis' | 'local' | 'fail-open';

/**
 * A slot this process holds, as the tier knows it: `written` once Redis holds it; `sent` once a call
 * that may put it in Redis went out (an acquire or a write whose answer did not come may still run
 * there, late): its release is then sent, written or not.
 */
type Held = { readonly key: string; readonly cost: number; written: boolean; sent: boolean };

/** What a claim may be off by once multiplied by `max`: a fraction's last bits (1/3 of 30 is 10, never 9). */
const CLAIM_SLACK = 1e-9;

/** True for a failure of Redis's availability (not a reply error, nor a bug): the fallback answers. */
function unavailable(error: unknown): boolean {
  return isResilimitError(error) ? error.code === ErrorCode.REDIS_UNAVAILABLE : isRedisUnavailable(error);
}

/**
 * The slots of a concurrency limit as this instance takes and keeps them: every Redis call through
 * one breaker (`Breaker.ts`, the rate limiter's), and, while Redis cannot answer, the mode's answer:
 * `'local'` takes slots within this instance's share of `max` ({@link share}), `'fail-open'` every
 * slot, `'fail-closed'` none.
 *
 * - A slot taken while Redis could not answer is held here, not in Redis (`written` false), and so is
 *   a release Redis did not take. When Redis answers again, {@link sync} writes them (op `w` of
 *   `lua/slots.lua`, taken even past `max`: they are held already) before this instance asks Redis for
 *   a new slot. So does a renewal that finds its slot gone from Redis while this process renewed it in
 *   time: Redis lost it (a restart, a flush, a failover), the holder did not.
 * - After the client connects again (Redis may have restarted empty), every slot held here is
 *   written again before this instance takes a new slot in Redis.
 * - With `instances: 'auto'`, heartbeats (`lua/heartbeat.lua`, under `<prefix>slots:instances`) count
 *   the instances and grant each a claim, a fraction of `max` (the claims sum to at most 1); the share
 *   is `floor(max × claim)`, so the shares sum to at most `max`. Redis's acquires leave free the claims
 *   of the instances that may be holding slots Redis has not seen (silent, or not back since this
 *   one's outage: `InstanceCounter.reservedClaim`).
 */
export class SlotTier {
  readonly breaker: Breaker;
  readonly slots: RedisSlots;
  readonly counter: InstanceCounter | undefined;
  mode: Mode;
  readonly #options: ResolvedSlotOptions;
  readonly #held = new Map<string, Held>();
  /** Cost held by this process, per key. */
  readonly #heldOf = new Map<string, number>();
  /** Releases Redis has not taken (it could not answer): sent by {@link sync}. */
  readonly #releases = new Map<string, { readonly key: string; readonly cost: number }>();
  /** Slots (costs summed) held here that Redis does not hold. */
  #unwritten = 0;
  #syncing: Promise<void> | undefined;
  /** A Redis call failed for availability since the last one Redis answered. */
  #down = false;
  /** Redis's clock minus the local one as the last reply said (ms), for the heartbeats' `since`. */
  #offset: number | undefined;
  readonly #now = steadyClock();
  /** Removes the client listener. */
  readonly #unlisten: () => void;

  constructor(options: ResolvedSlotOptions, onState: (state: BreakerState, previous: BreakerState) => void) {
    this.#options = options;
    this.mode = options.mode;
    this.breaker = new Breaker(options.breaker, onState);
    const { max, ttlMs, prefix, clock } = options;
    this.slots = new RedisSlots({
      redis: options.redis.client as RedisClient,
      max,
      ttlMs,
      prefix,
      ...(clock === undefined ? {} : { now: clock }),
    });
    this.counter = options.instances === 'auto' ? this.#count() : undefined;
    // Connected again: Redis may have lost data (a restart, a failover). The slots held here are
    // written again before this instance takes a new one there (a slot Redis still has is renewed).
    // A breaker held open now (its open period doubles) has one PING as its trial at once: an instance
    // answering locally while the others are back in Redis holds its share only as long as it must.
    let everReady = options.redis.ready;
    this.#unlisten = options.redis.on('ready', () => {
      if (everReady) this.rewriteAll();
      everReady = true;
      void this.breaker
        .trial(() => withDeadline(options.redis.ping(), options.breaker.timeoutMs))
        .then(async () => {
          if (this.breaker.accepting) await this.sync();
        });
    });
  }

  /** Slots held by this process (their costs summed), and those of them Redis does not hold. */
  get held(): { readonly slots: number; readonly unwritten: number } {
    let slots = 0;
    for (const cost of this.#heldOf.values()) slots += cost;
    return { slots, unwritten: this.#unwritten };
  }

  /**
   * The slots of a key this instance may hold while Redis cannot answer, in mode `'local'`:
   * `floor(max / instances)` for a number of instances; with `'auto'`, `floor(max × claim)` (the claim its
   * last heartbeat was granted), `floor(max / maxInstances)` before any, and 0 once its lease has ended
   * (Redis unanswered for `leaseMs`: the others may have given its share away).
   */
  share(): number {
    const { max, instances, maxInstances } = this.#options;
    const counter = this.counter;
    if (counter === undefined) return Math.floor(max / (instances as number));
    const claim = counter.claim;
    if (claim === undefined) return Math.floor(max / maxInstances);
    return counter.leased ? Math.floor(max * claim + CLAIM_SLACK) : 0;
  }

  /**
   * Takes `cost` slots of `key` for `id`: the source that gave them, or undefined (refused). Redis
   * decides when it can, once it holds every slot of this instance's; else the mode answers.
   * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` when Redis refused the script.
   */
  async take(key: string, id: string, cost: number): Promise<SlotSource | undefined> {
    if (this.#owes() && this.breaker.accepting) await this.sync();
    if (!this.#owes()) {
      const max = this.#redisMax();
      if (max < cost) return undefined; // the rest is kept for instances holding slots Redis has not seen
      try {
        const reply = await this.#fire(() => this.slots.acquire(key, id, cost, max));
        if (!reply.ok) return undefined;
        this.#add(id, key, cost, true);
        return 'redis';
      } catch (error) {
        if (!unavailable(error)) throw error;
        // Redis may run it after the deadline: released when it answers again, unless held here.
        return this.#fallback(key, id, cost, true);
      }
    }
    return this.#fallback(key, id, cost, false);
  }

  /** The mode's answer; `sent`: an acquire of `id` went out unanswered (Redis may run it late). */
  #fallback(key: string, id: string, cost: number, sent: boolean): SlotSource | undefined {
    const refused = this.mode === 'fail-closed' || (this.mode === 'local' && (this.#heldOf.get(key) ?? 0) + cost > this.share());
    if (refused) {
      if (sent) this.#releases.set(id, { key, cost });
      return undefined;
    }
    this.#add(id, key, cost, false);
    if (sent) (this.#held.get(id) as Held).sent = true;
    return this.mode === 'local' ? 'local' : 'fail-open';
  }

  /**
   * Renews slot `id`'s lease in Redis, or writes it there when Redis does not hold it. Never rejects:
   * a renewal Redis cannot answer is tried at the next one (the slot stays held here).
   */
  async keep(id: string): Promise<void> {
    const held = this.#held.get(id);
    if (held === undefined) return;
    if (!held.written) {
      if (this.breaker.accepting) await this.sync();
      return;
    }
    let reply: SlotReply;
    try {
      reply = await this.#fire(() => this.slots.renew(held.key, id, held.cost));
    } catch {
      return;
    }
    if (reply.ok || !this.#held.has(id)) return;
    // Renewed in time, yet gone: Redis lost it. Written again, past max if it must (it is held).
    this.#mark(held, false);
    await this.sync();
  }

  /**
   * Gives slot `id` back: true when this process held it. A release Redis cannot take now is sent
   * when it answers again (its lease ends by itself meanwhile, `ttlMs` at most).
   * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` when Redis refused the script.
   */
  async give(id: string): Promise<boolean> {
    const held = this.#held.get(id);
    if (held === undefined) return false;
    this.#remove(id, held);
    if (!held.written && !held.sent) return true; // Redis never had it, and never will
    try {
      await this.#fire(() => this.slots.release(held.key, id, held.cost));
    } catch (error) {
      if (!unavailable(error)) throw error;
      this.#releases.set(id, { key: held.key, cost: held.cost });
    }
    return true;
  }

  /** Forgets slot `id` (lost): its release is sent now, or when Redis answers again. */
  drop(id: string): void {
    void this.give(id).catch(() => false);
  }

  /**
   * Writes into Redis what it is missing of this instance's: the releases it did not take, then the
   * slots held while it could not answer (with a whole lease). One pass at a time; resolves when it
   * is over (a failure leaves the rest for the next).
   */
  sync(): Promise<void> {
    this.#syncing ??= this.#sync().finally(() => {
      this.#syncing = undefined;
    });
    return this.#syncing;
  }

  async #sync(): Promise<void> {
    const releases = [...this.#releases].map(async ([id, { key, cost }]) => {
      await this.#fire(() => this.slots.release(key, id, cost));
      this.#releases.delete(id);
    });
    const writes = [...this.#held].flatMap(([id, held]) =>
      held.written
        ? []
        : [
            (async () => {
              held.sent = true;
              await this.#fire(() => this.slots.write(held.key, id, held.cost));
              if (this.#held.get(id) === held) this.#mark(held, true);
            })(),
          ],
    );
    await Promise.allSettled([...releases, ...writes]);
  }

  /** Every slot held here is written again (a heartbeat found Redis lost data). */
  rewriteAll(): void {
    for (const held of this.#held.values()) this.#mark(held, false);
    if (this.breaker.accepting) void this.sync();
  }

  /** Stops the heartbeats (the count forgets this instance), the client listener and the breaker. */
  async close(): Promise<void> {
    this.#unlisten();
    await this.counter?.stop();
    this.breaker.shutdown();
  }

  #owes(): boolean {
    return this.#unwritten !== 0 || this.#releases.size !== 0;
  }

  /** `max` less the claims of the instances that may hold slots Redis has not seen. */
  #redisMax(): number {
    const { max } = this.#options;
    const counter = this.counter;
    if (counter === undefined || counter.unrecovered === 0) return max;
    return max - Math.min(max, Math.ceil(max * counter.reservedClaim - CLAIM_SLACK));
  }

  #add(id: string, key: string, cost: number, written: boolean): void {
    this.#held.set(id, { key, cost, written, sent: written });
    this.#heldOf.set(key, (this.#heldOf.get(key) ?? 0) + cost);
    if (!written) this.#unwritten += cost;
  }

  #remove(id: string, held: Held): void {
    this.#held.delete(id);
    const left = (this.#heldOf.get(held.key) ?? 0) - held.cost;
    if (left > 0) this.#heldOf.set(held.key, left);
    else this.#heldOf.delete(held.key);
    if (!held.written) this.#unwritten -= held.cost;
  }

  #mark(held: Held, written: boolean): void {
    if (held.written === written) return;
    held.written = written;
    this.#unwritten += written ? -held.cost : held.cost;
  }

  /** One Redis call in the breaker; notes whether Redis answered (the instance count hears of it). */
  async #fire(run: () => Promise<SlotReply>): Promise<SlotReply> {
    if (!this.#options.redis.ready) {
      this.#failed();
      throw NOT_READY;
    }
    const sentAt = this.#now();
    try {
      const reply = await this.breaker.fire(run);
      this.#offset = reply.nowMs - sentAt;
      if (this.#down) {
        this.#down = false;
        this.counter?.beatNow();
      }
      return reply;
    } catch (error) {
      if (unavailable(error)) this.#failed();
      throw error;
    }
  }

  #failed(): void {
    if (this.#down) return;
    this.#down = true;
    this.counter?.outage();
  }

  /** Starts the heartbeats of `instances: 'auto'` (see `InstanceCounter`). */
  #count(): InstanceCounter {
    const { prefix, heartbeatMs, leaseMs, ttlMs, redis, breaker } = this.#options;
    const key = `${prefix}slots:instances`;
    const member = nextId();
    // A beat counts 3 beats; fresh for 1.5; a silent instance's claim is held its lease plus a lease of its slots.
    const times = { ttlMs: heartbeatMs * 3, quietMs: heartbeatMs * 1.5, holdMs: leaseMs + ttlMs };
    const counter = new InstanceCounter(heartbeatMs, {
      send: (op, since, usedClaim) => {
        if (!redis.ready) return Promise.reject(NOT_READY);
        // `since` on Redis's clock, at the latest it can be (an instance that beat before it is not fresh).
        const offset = this.#offset;
        const sinceArg = since === undefined || offset === undefined ? '' : Math.ceil(since + offset + breaker.timeoutMs);
        const args = heartbeatArgs(member, times, op, sinceArg, '', usedClaim, '');
        return this.breaker.fire(() =>
          redis.run(heartbeatScript, [key], args).then(readBeat, (e: unknown) => Promise.reject(redisCallError(e))),
        );
      },
      clean: () => !this.#owes(),
      now: this.#now,
      leaseMs,
      changed: () => undefined,
      recovered: () => undefined,
      vanished: () => this.rewriteAll(),
    });
    counter.start();
    return counter;
  }
}
