import type { EventEmitter } from 'node:events';
import calculateSlot from 'cluster-key-slot';
import { Coalescer } from '../path/Coalescer.js';
import { countInstances } from './countInstances.js';
import { DecisionPath, type Parts } from '../path/DecisionPath.js';
import type { LimiterDecision } from '../path/decisions.js';
import { DataWatch, type DataLoss } from '../recovery/DataWatch.js';
import { DenyCache } from '../path/DenyCache.js';
import type { LimiterEvents } from './events.js';
import { Fallback } from '../path/Fallback.js';
import { Gate } from '../path/Gate.js';
import { HotKeys } from '../path/HotKeys.js';
import type { InstanceCounter } from '../recovery/InstanceCounter.js';
import { LocalTier } from '../local/LocalTier.js';
import type { ResolvedLimiterOptions } from '../options/options.js';
import { PendingRefunds } from '../recovery/PendingRefunds.js';
import { CapacityWatch } from '../path/capacity.js';
import { claimPrefix } from './prefixes.js';
import { ReadyWatch } from '../client/ReadyWatch.js';
import { CLOSE_DEADLINES, CLOSE_MAX_MS, Recovery } from '../recovery/Recovery.js';
import { refund } from './refund.js';
import { warnIfUnsafe } from '../client/redisClient.js';
import { redisKey } from '../redis/redisKey.js';
import { RedisTier } from '../redis/RedisTier.js';
import { Reservations } from '../path/Reservations.js';
import { Settings } from '../path/Settings.js';
import { Stats } from './Stats.js';
import type { LimitOptions } from '../types.js';
import { Waiters } from './Waiters.js';
import { sendDecisions } from '../path/sendDecisions.js';

/** What `wire` needs of the limiter: its events, and `limit()` for the waiters. */
export type Front = EventEmitter<LimiterEvents> & {
  limit(key: string, options?: LimitOptions): Promise<LimiterDecision>;
};

/** The parts of one limiter, wired together: what `ResilientLimiter` holds. */
export type Wiring = {
  readonly settings: Settings;
  readonly tier: RedisTier;
  readonly recovery: Recovery;
  readonly path: DecisionPath;
  readonly parts: Parts;
  readonly stats: Stats;
  readonly instances: InstanceCounter | undefined;
  readonly releasePrefix: () => void;
  /** The client's readiness (`notReady`) and data-loss watches, stopped together by `close()`. */
  readonly watch: Pick<ReadyWatch, 'stop' | 'notReadyForMs'>;
  readonly waiters: Waiters;
};

/**
 * Makes the parts of a limiter and wires them to each other and to its events (`front`): what the
 * breaker's state changes, a reconnect, the instance count and a reply error set going. `closed`
 * tells whether the limiter is closed (the journal is then dropped, not kept).
 */
export function wire(front: Front, resolved: ResolvedLimiterOptions, closed: () => boolean): Wiring {
  const { prefix, perf, now } = resolved;
  warnIfUnsafe(resolved.redis);
  const releasePrefix = claimPrefix(resolved.redis, prefix);
  const count = resolved.instances === 'auto' ? 1 : resolved.instances;
  const local = new LocalTier(resolved.localLimit ?? Math.ceil(resolved.limit / count), resolved.windowMs, resolved.maxKeys, now);
  // Denials wait out Redis's retryAfterMs: on the monotonic clock, or on an injected one (it is Redis's then).
  const deny = new DenyCache(
    resolved.maxKeys,
    resolved.clock === undefined ? perf : { now: resolved.clock },
    () => tier.state === 'closed' && tier.ready,
  );
  let instances: InstanceCounter | undefined;
  let suspectedAt = Number.NEGATIVE_INFINITY;
  const tier: RedisTier = new RedisTier(
    resolved,
    (state, previous) => {
      if (state === 'open') stats.opened += 1;
      // This instance lost Redis: until they say they are back, the others may answer locally too.
      if (state === 'open' && previous === 'closed') instances?.outage();
      if (state === 'open') recovery.journal.untrack();
      else recovery.journal.track();
      front.emit('stateChange', { state, previous });
      // After the listeners (they may call as the state changes): write the journal before Redis decides
      // again; half-open, its first batch is the trial, unless a PING on a sign of life is (see Breaker.trial).
      if (state === 'closed' || (state === 'half-open' && !tier.breaker.trying)) recovery.catchUp();
      if (state === 'closed') instances?.beatNow();
    },
    (lost) => {
      if (tier.state === 'closed') instances?.outage(); // a disconnection the breaker did not see
      // Another server, or one that lost its data: the leases of hot keys may be gone with it.
      void lost.then(
        (yes) => (yes ? parts.hotKeys?.dropAll() : undefined),
        () => parts.hotKeys?.dropAll(),
      );
      recovery.onReconnect(lost);
    },
    (limit) => settings.reserveOf(limit),
  );
  const settings = new Settings(resolved, tier.window, local, deny, () => instances);
  const stats = new Stats(front, perf);
  const refunds = new PendingRefunds(tier, resolved.maxPending, resolved.maxPendingBytes);
  const recovery: Recovery = new Recovery(resolved, {
    tier,
    local,
    settings,
    closed,
    report: {
      reconciled: (result) => front.emit('reconciled', result),
      dropped: (calls, total, reason) => {
        if (reason === 'closed') warnDropped(prefix, calls, resolved.breaker.timeoutMs);
        front.emit('dropped', { calls, total, reason });
      },
      caughtUp: () => instances?.beatNow(),
      // The beat tells whether the heartbeat set vanished too; at most one every fifth of a period.
      suspected: () => {
        const at = perf.now();
        if (at - suspectedAt < resolved.heartbeatMs / 5) return;
        suspectedAt = at;
        instances?.beatNow();
      },
    },
    refunds,
  });
  const coalescer = new Coalescer(
    (calls) => sendDecisions(tier, calls),
    tier.isCluster ? (call) => calculateSlot(redisKey(prefix, call.key)) : undefined,
    // Half-open lets one Redis call through: a call alone, so that only its caller waits on the trial.
    resolved.coalesce ? () => tier.state === 'closed' : () => false,
    () => tier.ledger.callsInFlight,
  );
  const reserved = new Reservations();
  const gate = new Gate(tier, recovery, coalescer, { ...resolved, timeoutMs: resolved.breaker.timeoutMs }, perf);
  const fallback = new Fallback({
    settings,
    local,
    reserved,
    recovery,
    breaker: tier.breaker,
    now,
    reconcile: resolved.reconcile,
    blockMs: resolved.blockMs,
    capacity: new CapacityWatch(resolved.prefix, (change) => front.emit('capacity', change)),
  });
  const parts: { -readonly [K in keyof Parts]: Parts[K] } = {
    ...{ now, settings, tier, offset: tier.offset, gate, coalescer, local, deny, reserved, recovery, fallback },
    hotKeys: undefined,
  };
  if (resolved.hotKeys !== undefined) {
    parts.hotKeys = new HotKeys(parts, { ...resolved.hotKeys, timers: resolved.clock === undefined }, resolved.maxKeys);
  }
  // Refunds go round the front door, which refuses them once the limiter is closed: close() gives back
  // what was admitted for the waiters it rejected.
  const waiters = new Waiters(
    (key, o) => front.limit(key, o),
    (key) => settings.limitOf(key),
    (key, id) => refund(parts, key, id),
    resolved,
    tier.window.model,
  );
  const watch = new ReadyWatch(tier, { ...resolved, answering: () => settings.answering(now()) }, (info) => front.emit('notReady', info));
  const path = new DecisionPath(parts, (error) => {
    if (front.listenerCount('redisReplyError') > 0) front.emit('redisReplyError', error);
  });
  // Redis lost data without a reconnect. Flushed: re-seed it from the warm windows, as after a restart
  // (calls are answered locally, reason 'reconciling', until that is done). Evicted: not re-seeded, as
  // that would evict other keys of a Redis out of memory; a key whose calls the warm window holds is
  // answered locally while Redis holds fewer of them (`OneCall.settle`).
  const lost = (loss: DataLoss): void => {
    if (closed()) return;
    parts.hotKeys?.dropAll(); // flushed or evicted: a lease may be gone, and calls on it would count nowhere
    if (loss.reason === 'flushed') recovery.onReconnect(Promise.resolve(true));
    front.emit('dataLost', loss);
  };
  const data = new DataWatch(resolved.redis, resolved.heartbeatMs, lost, perf);
  if (resolved.instances === 'auto') {
    instances = countInstances(
      tier,
      recovery,
      deny,
      local,
      settings,
      resolved,
      (n) => {
        settings.applyLocalLimit();
        front.emit('instances', n);
      },
      () => lost({ reason: 'flushed' }),
    );
    settings.applyLocalLimit(); // no claim yet: the share of an instance that has never reached Redis
  }
  const watches = {
    get notReadyForMs(): number {
      return watch.notReadyForMs;
    },
    stop(): void {
      watch.stop();
      data.stop();
    },
  };
  return { settings, tier, recovery, path, parts, stats, instances, releasePrefix, watch: watches, waiters };
}

/** The warning of calls answered locally that Redis had not taken when the limiter closed: never lost unsaid. */
function warnDropped(prefix: string, calls: number, timeoutMs: number): void {
  const waitMs = Math.min(CLOSE_DEADLINES * timeoutMs, CLOSE_MAX_MS);
  process.emitWarning(
    `The limiter with prefix ${JSON.stringify(prefix)} closed with ${calls} call${calls === 1 ? '' : 's'} answered locally ` +
      `that Redis had not taken (close() waits up to ${waitMs} ms, ${CLOSE_DEADLINES} × breaker.timeoutMs at most ${CLOSE_MAX_MS} ms, for a Redis once ready): ` +
      "Redis's windows may admit that many more calls of their keys until those calls would have left them.",
    { type: 'ResilimitWarning', code: 'RESILIMIT_JOURNAL_DROPPED' },
  );
}
