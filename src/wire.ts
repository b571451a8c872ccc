import type { EventEmitter } from 'node:events';
import calculateSlot from 'cluster-key-slot';
import { Coalescer } from './Coalescer.js';
import { countInstances } from './countInstances.js';
import { DecisionPath, type Parts } from './DecisionPath.js';
import type { LimiterDecision } from './decisions.js';
import { DenyCache } from './DenyCache.js';
import type { LimiterEvents } from './events.js';
import { Fallback } from './Fallback.js';
import { Gate } from './gate.js';
import type { InstanceCounter } from './InstanceCounter.js';
import { LocalTier } from './LocalTier.js';
import type { ResolvedLimiterOptions } from './options.js';
import { PendingRefunds } from './PendingRefunds.js';
import { claimPrefix } from './prefixes.js';
import { ReadyWatch } from './ReadyWatch.js';
import { Recovery } from './Recovery.js';
import { warnIfUnsafe } from './redisClient.js';
import { redisKey } from './redisKey.js';
import { RedisTier } from './RedisTier.js';
import { Reservations } from './Reservations.js';
import { Settings } from './Settings.js';
import { Stats } from './Stats.js';
import type { LimitOptions } from './types.js';
import { Waiters } from './Waiters.js';

/** What `wire` needs of the limiter: its events, and `limit()` and `refund()` for the waiters. */
export type Front = EventEmitter<LimiterEvents> & {
  limit(key: string, options?: LimitOptions): Promise<LimiterDecision>;
  refund(key: string, id: string): Promise<unknown>;
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
  readonly watch: ReadyWatch;
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
  const deny = new DenyCache(resolved.maxKeys, resolved.clock === undefined ? perf : { now: resolved.clock });
  let instances: InstanceCounter | undefined;
  const tier: RedisTier = new RedisTier(
    resolved,
    (state, previous) => {
      if (state === 'open') stats.opened += 1;
      // This instance lost Redis: until they say they are back, the others may answer locally too.
      if (state === 'open' && previous === 'closed') instances?.outage();
      recovery.journal.track(state !== 'open');
      front.emit('stateChange', { state, previous });
      // After the listeners (they may call as the state changes): write the journal before Redis decides
      // again; half-open, its first batch is the trial, unless a PING on a sign of life is (see Breaker.trial).
      if (state === 'closed' || (state === 'half-open' && !tier.breaker.trying)) recovery.catchUp();
      if (state === 'closed') instances?.beatNow();
    },
    (lost) => {
      if (tier.state === 'closed') instances?.outage(); // a disconnection the breaker did not see
      recovery.onReconnect(lost);
    },
    (limit) => settings.reserveOf(limit),
  );
  const settings = new Settings(resolved, tier.window, local, deny, () => instances);
  const stats = new Stats(front, perf, settings);
  const refunds = new PendingRefunds(tier, resolved.maxPending, resolved.maxPendingBytes);
  const recovery: Recovery = new Recovery(
    resolved,
    tier,
    local,
    settings,
    closed,
    {
      reconciled: (result) => front.emit('reconciled', result),
      dropped: (calls, total) => front.emit('dropped', { calls, total }),
      caughtUp: () => instances?.beatNow(),
    },
    refunds,
  );
  const coalescer = new Coalescer(
    (calls) => tier.send(calls),
    tier.isCluster ? (call) => calculateSlot(redisKey(prefix, call.key)) : undefined,
  );
  const reserved = new Reservations();
  const gate = new Gate(tier, recovery, coalescer, { ...resolved, timeoutMs: resolved.breaker.timeoutMs }, perf);
  const fallback = new Fallback(settings, local, reserved, recovery, tier.breaker, now, resolved.reconcile, resolved.blockMs);
  const parts: Parts = { now, tier, gate, coalescer, coalesce: resolved.coalesce, local, deny, reserved, recovery, fallback };
  const waiters = new Waiters((key, o) => front.limit(key, o), (key) => settings.limitOf(key), (key, id) => front.refund(key, id), resolved);
  const watch = new ReadyWatch(tier, resolved, (info) => front.emit('notReady', info));
  const path = new DecisionPath((error) => {
    if (front.listenerCount('redisReplyError') > 0) front.emit('redisReplyError', error);
  });
  if (resolved.instances === 'auto') {
    instances = countInstances(tier, recovery, deny, local, settings, resolved, (n) => {
      settings.applyLocalLimit();
      front.emit('instances', n);
    });
  }
  return { settings, tier, recovery, path, parts, stats, instances, releasePrefix, watch, waiters };
}
