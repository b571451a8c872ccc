import type { Settings } from './Settings.js';
import type { LocalTier } from '../local/LocalTier.js';
import type { Recovery } from '../recovery/Recovery.js';
import type { ClockOffset } from '../redis/ClockOffset.js';
import type { RedisTier } from '../redis/RedisTier.js';
import type { LocalMs } from '../base/time.js';
import type { DecisionReason } from '../types.js';
import type { GeneratedId, SentId } from '../base/call.js';
import type { BatchOutcome } from '../redis/RedisWindow.js';
import type { LeaseDecision } from '../redis/scripts/lease.js';
import type { Coalescer, QueuedCall } from './Coalescer.js';
import type { LimiterDecision } from './decisions.js';
import type { DenyCache } from './DenyCache.js';
import type { Fallback } from './Fallback.js';
import type { Gate } from './Gate.js';
import type { Reservations } from './Reservations.js';

/** The parts the decision path and its calls use, wired once by `wire`. */
export type Parts = {
  /** The local clock (the `clock` option, or a steady one that a wall-clock step does not move). */
  readonly now: () => LocalMs;
  /** The settings in force: the mode, shadow mode, the kill switch, the shares. */
  readonly settings: Settings;
  readonly tier: RedisTier;
  /** Redis's clock against the local one (the tier's, learnt from every round trip). */
  readonly offset: ClockOffset;
  readonly gate: Gate;
  readonly coalescer: Coalescer;
  readonly local: LocalTier;
  readonly deny: DenyCache;
  readonly reserved: Reservations;
  readonly recovery: Recovery;
  readonly fallback: Fallback;
  /** Leases of hot keys (the `hotKeys` option: `HotKeys`), or undefined without it. */
  readonly hotKeys: Leases | undefined;
};

/** A call that asks for a hot key's lease (`LeaseCall`): what `HotKeys.take` needs of it. */
export type LeaseTaker = QueuedCall & { readonly callId: SentId };

/** What the decision path, `refund()`, `reset()`, `block()` and `close()` ask of hot keys (`HotKeys`, see there). */
export interface Leases {
  /** A call with the generated id `seq`: admitted on the key's lease, a lease to wait for, `'take'` one, or undefined (the usual path). */
  use(key: string, cost: number, seq: GeneratedId, limit: number, now: LocalMs): LimiterDecision | Promise<unknown> | 'take' | undefined;
  /** Asks Redis for a lease for `call`: its decision. */
  take(call: LeaseTaker): Promise<BatchOutcome[]>;
  /** The lease `call` asked for was decided (or not: undefined): kept when granted; the key's waiting calls let go. */
  taken(call: LeaseTaker, decision: LeaseDecision | undefined): void;
  /** Whether the call of `key` with the generated id `seq` was admitted on its live lease, on one that ended, or on none. */
  leaseOf(key: string, seq: GeneratedId): 'live' | 'ended' | undefined;
  /** Gives `cost` permits of a refunded call back to the key's live lease. */
  refund(key: string, cost: number): void;
  /** Ends the key's lease, its unused permits given back. */
  giveBack(key: string): void;
  /** Ends the key's lease, giving nothing back (Redis's window of the key is gone). */
  forget(key: string): void;
  /** Redis lost data: forgets every lease. */
  dropAll(): void;
  /** Ends every lease, the unused permits given back. */
  close(): Promise<void>;
}

/**
 * One call on its way to Redis: what differs between `limit()` (`OneCall`), `limitAll()`
 * (`AllCall`) and `peek()` (`PeekCall`). `R` is Redis's reply, `D` the decision.
 */
export interface PathCall<R, D> {
  /** Reserves its permits while it waits on Redis (`sign` 1), or releases them (-1). */
  reserve(sign: 1 | -1): void;
  /** Asks Redis; rejects when Redis did not decide (the rejection says why). */
  ask(): Promise<R>;
  /**
   * Redis answered: record what it admitted in the warm window, or remember what it refused; the
   * decision. Throws, as `ask` rejects, when the reply holds no decision for this call (its key
   * holds another type while the other calls of its script call were decided).
   */
  settle(reply: R): D;
  /** The answer by mode when Redis did not decide, for `reason`. */
  fallback(reason: DecisionReason): D;
}
