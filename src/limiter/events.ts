import type { BreakerState } from '../redis/Breaker.js';
import type { CapacityChange } from '../path/capacity.js';
import type { DataLoss } from '../recovery/DataWatch.js';
import type { ShadowedDecision } from '../path/decisions.js';
import type { ResilimitError } from '../base/errors.js';
import type { Mode } from '../options/options.js';
import type { NotReady } from '../client/ReadyWatch.js';
import type { ReconcileResult } from '../recovery/Journal.js';

/** The events of {@link ResilientLimiter}. */
export type LimiterEvents = {
  /** The breaker changed state. */
  stateChange: [change: { state: BreakerState; previous: BreakerState }];
  /** `setMode()` changed the mode. */
  modeChange: [change: { mode: Mode; previous: Mode }];
  /** A reconciliation pass ended (`remaining` > 0 when Redis failed again during it). */
  reconciled: [result: ReconcileResult];
  /** Redis answered with an error about the request (not counted by the breaker); the call was answered by the fallback. */
  redisReplyError: [error: ResilimitError];
  /**
   * The journal dropped calls admitted locally that Redis will never see, so the window after recovery
   * may admit that many more. `reason`: `'full'`, past `maxPending` or `maxPendingBytes` (the oldest
   * first; `calls` since the last event, at most one per event-loop turn); `'closed'`, those Redis had
   * not taken when `close()` ended (it gives Redis 4 × `breaker.timeoutMs` (at most 5 s); with the process warning
   * `RESILIMIT_JOURNAL_DROPPED`). `total` since creation (`stats().reconcile.dropped`).
   */
  dropped: [info: { calls: number; total: number; reason: 'full' | 'closed' }];
  /**
   * Redis lost the limiter's data. `'flushed'` (`instances: 'auto'` only): a heartbeat found the
   * instance count's set gone (a `FLUSHALL`, `FLUSHDB`, a restart, or every instance silent past its
   * hold; on a Cluster, the master holding `<prefix>instances`): the limiter writes its warm windows
   * back into Redis, as after a restart (twice after a restart: harmless), answering locally (reason
   * `'reconciling'`) until that is done. `'evicted'`: Redis evicted keys under its memory limit, with
   * how many since the last read (see the warning `RESILIMIT_EVICTION_POLICY`); no re-seed (it would
   * evict other keys), but a key whose calls the warm window holds is answered locally meanwhile.
   */
  dataLost: [loss: DataLoss];
  /** The count of live instances changed (`instances: 'auto'`). */
  instances: [count: number];
  /**
   * This instance answers on less than its share while Redis does not decide (mode `'local'`): its
   * lease ended, it has never reached Redis, or its share is 0. Once when it starts (again after
   * capacity was back), with the process warning `RESILIMIT_REDUCED_CAPACITY`: from how many permits
   * a window to how many, why, and until what. Its decisions carry the reason (`'lease-ended'`,
   * `'no-lease'`, `'no-share'`), and its refusals `reducedCapacity`.
   */
  capacity: [change: CapacityChange];
  /**
   * The client has not been ready since the limiter was made (a wrong address or password, a
   * `lazyConnect` client never connected): every call is answered by the fallback (reason
   * `'not-ready'`) while the breaker stays closed. First 5 s after the limiter was made, then every
   * 60 s while it stays so, with the process warning `RESILIMIT_REDIS_NOT_READY`. `forMs` since the
   * limiter was made, `status` the client's.
   */
  notReady: [info: NotReady];
  /**
   * Shadow mode admitted a call the limit would have refused: `decision` has `shadowRejected: true`
   * and the refusal's fields. Emitted inside the call (of `limit()`, or once per refusing limit of
   * `limitAll()`), only when there are listeners.
   */
  shadowRejected: [info: { key: string; cost: number; decision: ShadowedDecision }];
};
