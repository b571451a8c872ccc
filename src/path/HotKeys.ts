import { randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { giveLease, takeLease } from '../base/internal.js';
import type { BatchOutcome } from '../redis/RedisWindow.js';
import type { LeaseDecision } from '../redis/scripts/lease.js';
import type { DecisionReason } from '../types.js';
import type { LocalMs } from '../base/time.js';
import type { GeneratedId } from '../base/call.js';
import { leaseDecision, type LimiterDecision } from './decisions.js';
import { OneCall } from './OneCall.js';
import type { Leases, LeaseTaker, Parts } from './parts.js';
import { sendDecisions } from './sendDecisions.js';

/** Calls of a key in one validity period from which it takes leases: below, a lease would cost about as many Redis calls as it saves. */
const HOT_CALLS = 4;
/** Permits the first lease of a key asks for; the next ask what the last one's rate uses in a period (see `#end`). */
const FIRST_WANT = 16;
/** A lease asks at most this many times the permits of the one before (a burst grows leases fast, not at once). */
const GROWTH = 4;

/** Permits of one key taken ahead in Redis (`lua/lease.lua`): counted there until `until` plus the window, whoever uses them. */
type Lease = {
  readonly id: string;
  readonly granted: number;
  /** Permits not used yet. */
  left: number;
  /** Local time it was sent at: Redis granted it no earlier. */
  readonly sentAt: number;
  /** Calls are admitted on it while the local clock is below this: sentAt + validity, at most Redis's end of the lease. */
  readonly until: number;
  /** The generated id of the first call admitted on it: the key's later calls (higher ids) are on it while it lasts. */
  readonly fromSeq: number;
  /** The generated id of the last call admitted on it. */
  lastSeq: number;
  /** Ends it at its validity when the key is not called again (a real clock only: an injected one is the caller's to move). */
  timer: NodeJS.Timeout | undefined;
  /** Permits Redis had free beyond it when it granted it (for `remaining`). */
  readonly free: number;
  /** When Redis's window of the key empties, as Redis told (its newest member's time plus the window). */
  readonly resetAtMs: number;
};

/** The generated ids of the calls of a lease that ended, kept while its permits may be in the window (for `refund()`). */
type Ended = { readonly from: number; readonly to: number; readonly until: number };

/** What this process knows of one key: its lease, the take in flight, how hot it is, and its ended leases' calls. */
type HotKey = {
  lease: Lease | undefined;
  pending: Promise<unknown> | undefined;
  calls: number;
  since: number;
  want: number;
  ended: Ended[];
};

/** A lease asked for: the key's state, the lease's id, when it was sent (local clock), and what lets its waiting calls go. */
type Asked = { readonly state: HotKey; readonly leaseId: string; sentAt: number; readonly done: () => void };

/** What hot keys need of the limiter's parts. */
type HotParts = Omit<Parts, 'hotKeys'>;

/**
 * Hot keys (the `hotKeys` option): a key this process calls at least {@link HOT_CALLS} times in a
 * validity period takes a lease of permits ahead in Redis, scored at the lease's end, so that each
 * call admitted on it counts in Redis at least until its own time plus the window: never over the
 * limit. Redis grants at most the free permits divided by twice the instance count beyond the call's
 * cost (so a lease shrinks to the call alone as the key fills, and no holder starves the others). The
 * calls it admits are recorded in the warm window (the local tier knows this instance's traffic), and
 * the permits left when it ends (used up, past its validity, the key evicted, `close()`) are given back.
 * Only calls with a generated id (a caller's `id` names its call in Redis: decided one by one).
 *
 * It owns the keys' leases (bounded by `maxKeys`, an evicted key's lease given back) and the give-backs
 * in flight, which `close()` waits for.
 */
export class HotKeys implements Leases {
  readonly #keys: LRUCache<string, HotKey>;
  /** Lease ids: this process's random prefix and a counter (never a '*': the script's member names use it). */
  readonly #prefix = `${randomBytes(6).toString('base64url')}.`;
  #seq = 0;
  readonly #giving = new Set<Promise<void>>();
  /** The lease each call in flight asked for, until {@link taken}. */
  readonly #asked = new Map<LeaseTaker, Asked>();
  #closed = false;

  constructor(
    readonly parts: HotParts,
    /** `timers`: end a lease at its validity by a timer (a real clock; with an injected one, at the key's next call). */
    readonly options: Readonly<{ validityMs: number; maxPermits: number; timers: boolean }>,
    maxKeys: number,
  ) {
    this.#keys = new LRUCache<string, HotKey>({
      max: maxKeys,
      dispose: (state, key, reason) => {
        if (reason === 'evict' && state.lease !== undefined) this.#end(key, state, this.parts.now());
      },
    });
  }

  /**
   * A call of `key` of `cost` with the generated id `seq` at `now`: its admission on the key's lease
   * (recorded in the warm window), a promise to wait on before asking again (a lease of the key is
   * being taken), `'take'` (the key is hot: the call asks Redis for a lease, {@link LeaseCall}), or
   * undefined (the usual path).
   */
  use(key: string, cost: number, seq: GeneratedId, limit: number, now: LocalMs): LimiterDecision | Promise<unknown> | 'take' | undefined {
    let state = this.#keys.get(key);
    if (state === undefined) {
      if (this.#closed) return undefined;
      state = { lease: undefined, pending: undefined, calls: 0, since: now, want: FIRST_WANT, ended: [] };
      this.#keys.set(key, state);
    }
    const { lease } = state;
    if (lease !== undefined) {
      if (now < lease.until && lease.left >= cost) {
        lease.left -= cost;
        lease.lastSeq = seq;
        this.parts.local.main.record(key, now, cost, seq);
        return leaseDecision(limit, lease.left + lease.free, lease.resetAtMs, seq);
      }
      this.#end(key, state, now);
    }
    if (state.pending !== undefined) return state.pending;
    if (now - state.since >= this.options.validityMs) {
      state.since = now;
      state.calls = 0;
    }
    state.calls += 1;
    return state.calls >= HOT_CALLS && !this.#closed ? 'take' : undefined;
  }

  /**
   * Asks Redis for a lease for `call` (its `ask()`): the call's decision, with the permits granted. It
   * leaves with this turn's batches, in their order (`Coalescer.ask`): the warm window's check that
   * Redis holds this instance's calls (`OneCall.settle`) needs every call settled before those Redis
   * decided after it, and before the calls admitted on their leases. The lease is kept, and the calls
   * waiting for it let go, by {@link taken}.
   */
  take(call: LeaseTaker): Promise<BatchOutcome[]> {
    const state = this.#keys.get(call.key);
    if (state === undefined) return this.parts.coalescer.ask(call); // evicted meanwhile: the usual call
    const { tier, settings } = this.parts;
    const { validityMs, maxPermits } = this.options;
    const leaseId = this.#prefix + (this.#seq++).toString(36);
    // As a batch's calls: the permits left free for instances that may be answering locally are not leased.
    const effective = Math.max(call.limit - tier.reserve(call.limit), call.cost, 1);
    const ask = { call, want: Math.min(state.want, maxPermits), validityMs, divisor: 2 * settings.instances, leaseId, effective };
    const pending = Promise.withResolvers<void>();
    state.pending = pending.promise;
    const asked: Asked = { state, leaseId, sentAt: 0, done: pending.resolve };
    this.#asked.set(call, asked);
    return this.parts.coalescer.ask(call, () =>
      sendDecisions(tier, [call], (notAfter, sentNow) => {
        asked.sentAt = sentNow;
        return tier.window[takeLease](ask, notAfter);
      }),
    );
  }

  /**
   * The lease `call` asked for was decided (`decision`: admitted or refused) or not (undefined: Redis
   * did not answer): kept when granted, and the key's waiting calls let go. Once per call.
   */
  taken(call: LeaseTaker, decision: LeaseDecision | undefined): void {
    const asked = this.#asked.get(call);
    if (asked === undefined) return;
    this.#asked.delete(call);
    const { state, leaseId, sentAt, done } = asked;
    if (state.pending !== undefined) state.pending = undefined;
    done();
    const granted = decision?.allowed === true ? decision.granted : 0;
    if (granted < call.cost) return;
    if (this.#keys.get(call.key) !== state || this.#closed || state.lease !== undefined) {
      if (granted > call.cost) this.#giveBack(call.key, leaseId, granted, granted - call.cost);
      return;
    }
    const lease: Lease = {
      id: leaseId,
      granted,
      left: granted - call.cost,
      sentAt,
      until: sentAt + this.options.validityMs,
      fromSeq: call.callId as number,
      lastSeq: call.callId as number,
      free: Math.max(0, call.limit - (decision as LeaseDecision).used),
      resetAtMs: (decision as LeaseDecision).resetAtMs,
      timer: undefined,
    };
    state.lease = lease;
    if (this.options.timers) {
      lease.timer = setTimeout(() => {
        if (state.lease === lease && this.#keys.get(call.key) === state) this.#end(call.key, state, this.parts.now());
      }, this.options.validityMs);
      lease.timer.unref();
    }
  }

  /** Whether the call of `key` with the generated id `seq` was admitted on its live lease, on one that ended (still in the window), or on none. */
  leaseOf(key: string, seq: GeneratedId): 'live' | 'ended' | undefined {
    const state = this.#keys.get(key);
    if (state === undefined) return undefined;
    if (state.lease !== undefined && seq >= state.lease.fromSeq) return 'live';
    return state.ended.some((e) => seq >= e.from && seq <= e.to) ? 'ended' : undefined;
  }

  /** Gives `cost` permits of a refunded call back to the key's live lease (see {@link leaseOf}). */
  refund(key: string, cost: number): void {
    const lease = this.#keys.get(key)?.lease;
    if (lease !== undefined) lease.left += cost;
  }

  /** Ends the key's lease at once, its unused permits given back (`block()`: they count for after the block). */
  giveBack(key: string): void {
    const state = this.#keys.get(key);
    if (state?.lease !== undefined) this.#end(key, state, this.parts.now());
    this.#keys.delete(key);
  }

  /** Ends the key's lease at once, giving nothing back (`reset()`: Redis's window of the key is gone, the lease with it). */
  forget(key: string): void {
    clearTimeout(this.#keys.get(key)?.lease?.timer);
    this.#keys.delete(key);
  }

  /**
   * Redis lost data (a flush, a restart without it, an eviction): every lease may be gone from it, and
   * calls admitted on one would count nowhere. Forgets them all, giving nothing back.
   */
  dropAll(): void {
    for (const state of this.#keys.values()) clearTimeout(state.lease?.timer);
    this.#keys.clear();
  }

  /** Ends every lease, giving back what is left, and waits for the give-backs (each within the breaker's deadline). */
  async close(): Promise<void> {
    this.#closed = true;
    const now = this.parts.now();
    for (const [key, state] of this.#keys.entries()) if (state.lease !== undefined) this.#end(key, state, now);
    this.#keys.clear();
    await Promise.all(this.#giving);
  }

  /** Ends the key's lease at `now`: the next lease asks for what this one's rate used in a period; the unused permits go back. */
  #end(key: string, state: HotKey, now: number): void {
    const lease = state.lease as Lease;
    state.lease = undefined;
    clearTimeout(lease.timer);
    // Its calls, for refund(): kept while the lease's permits may be in the window.
    state.ended = state.ended.filter((e) => e.until > now);
    state.ended.push({ from: lease.fromSeq, to: lease.lastSeq, until: now + this.parts.settings.windowMs + this.options.validityMs });
    const { validityMs, maxPermits } = this.options;
    const used = lease.granted - lease.left;
    const elapsed = Math.max(1, Math.min(validityMs, now - lease.sentAt));
    state.want = Math.max(1, Math.min(maxPermits, GROWTH * lease.granted, Math.ceil((1.25 * used * validityMs) / elapsed)));
    // Still hot when the lease was: the next call takes the next lease at once.
    state.since = now;
    state.calls = used >= HOT_CALLS ? HOT_CALLS - 1 : 0;
    if (lease.left > 0) this.#giveBack(key, lease.id, lease.granted, lease.left);
  }

  /** Gives back `unused` permits of a lease in Redis, inside the breaker; failing that, they stay counted until they leave. */
  #giveBack(key: string, leaseId: string, granted: number, unused: number): void {
    const { tier } = this.parts;
    const given = tier
      .call(0, () => tier.window[giveLease](key, leaseId, granted, unused))
      .then(
        () => undefined,
        () => undefined,
      );
    this.#giving.add(given);
    void given.then(() => this.#giving.delete(given));
  }
}

/** A call of `limit()` on a hot key that asks Redis for a lease ({@link HotKeys.take}); decided and settled as any call, the lease kept first. */
export class LeaseCall extends OneCall {
  override ask(): Promise<BatchOutcome[]> {
    return (this.parts.hotKeys as Leases).take(this);
  }

  /**
   * Settles as the call alone: the warm window learns Redis's count without the lease's permits beyond
   * this call (they are not used yet: counted as others', they would shrink this instance's share in an
   * outage, and hide calls Redis lost). The lease is kept only when Redis's answer was trusted (not
   * `'reconciling'`: Redis lost this instance's calls, and may lose the lease).
   */
  override settle(reply: BatchOutcome[]): LimiterDecision {
    const outcome = reply[0];
    const lease = outcome instanceof Error ? undefined : (outcome as LeaseDecision);
    const beyond = lease === undefined || !lease.allowed ? 0 : lease.granted - this.cost;
    const decision = super.settle(beyond === 0 ? reply : [{ ...(lease as LeaseDecision), used: (lease as LeaseDecision).used - beyond }]);
    (this.parts.hotKeys as Leases).taken(this, decision.reason === 'decided' ? lease : undefined);
    return decision;
  }

  override fallback(reason: DecisionReason): LimiterDecision {
    (this.parts.hotKeys as Leases).taken(this, undefined);
    return super.fallback(reason);
  }
}
