import type { RedisPort } from '../client/port.js';
import { portOf } from '../client/portOf.js';
import type { RedisClient } from '../client/clientType.js';
import { integer, integerOrAuto, knownOptions, optionalBoolean, optionalFunction, optionalInteger, optionalPerf } from '../base/checks.js';
import { steadyClock } from './clock.js';
import { localClock, type LocalMs } from '../base/time.js';
import { invalidOption } from '../base/errors.js';
import { requireRuntime } from '../base/runtime.js';
import { instanceName } from './instanceName.js';

export { integer } from '../base/checks.js';
export type { BreakerOptions, ResolvedBreakerOptions } from './breakerOptions.js';
import { type BREAKER_OPTIONS, resolveBreakerOptions, type BreakerOptions, type ResolvedBreakerOptions } from './breakerOptions.js';

export {
  type HotKeyOptions,
  type LocalWindowOptions,
  MAX_ID_LENGTH,
  MAX_INT,
  MAX_KEY_LENGTH,
  MAX_PREFIX_LENGTH,
  type RedisWindowOptions,
  resolveLocalWindowOptions,
  resolveRedisWindowOptions,
  resolveWindowOptions,
  resolution,
  MAX_SLICES,
  type LimitFunction,
  type ResolvedLocalWindowOptions,
  type ResolvedRedisWindowOptions,
  type ResolvedWindowOptions,
  type WindowOptions,
} from './windowOptions.js';
import {
  defaultHeartbeatMs,
  hotKeys,
  MAX_INT,
  prefix,
  resolution,
  resolveWindowOptions,
  type HotKeyOptions,
  type LimitFunction,
  type RedisWindowOptions,
  type WindowOptions,
} from './windowOptions.js';

/**
 * The default `local.leaseMs`: how long a total outage leaves every instance on its whole share, and
 * how long a crashed instance's share stays reserved (docs/options.md, "Partial failures: leases").
 */
const DEFAULT_LEASE_MS = 600_000;

/** What answers when Redis cannot: the local window, an allow, or a deny. */
export type Mode = 'local' | 'fail-open' | 'fail-closed';
const MODES: readonly Mode[] = ['local', 'fail-open', 'fail-closed'];

/**
 * What an instance in mode `'local'` answers once its lease has ended (see `local.leaseMs`):
 * `'shrink'` the local tier at a tenth of its share, `'keep'` at its whole share, or as
 * `'fail-closed'` / `'fail-open'` would.
 */
export type AfterLease = 'shrink' | 'keep' | 'fail-closed' | 'fail-open';
const AFTER_LEASE: readonly AfterLease[] = ['shrink', 'keep', 'fail-closed', 'fail-open'];

/** The local tier: its share of the global limit and its memory bound. */
export type LocalTierOptions = {
  /** The local window's limit. When absent, `ceil(limit / instances)`. Integer 1 … 2^31 - 1. */
  limit?: number;
  /**
   * How many instances share the global limit: a number, or `'auto'` to count live limiter
   * instances (same Redis, same prefix) through heartbeats in Redis while it is healthy, keeping the
   * last count during an outage.
   * @default 'auto'
   */
  instances?: number | 'auto';
  /** Keys kept by the local window and by the deny cache (each). @default 10000 (range 1 … 2^24) */
  maxKeys?: number;
  /**
   * With `instances: 'auto'`: this process's name, unique to it (the pod's, on Kubernetes). Restarted
   * under it, a process takes back its predecessor's lease and claim at its first beat; a name that
   * another process beats under is not taken. 1 … 128 characters, no white space, not `!-~#=@` first.
   * @default none: a unique id per process (a restart counts as a new instance)
   */
  name?: string;
  /**
   * With `instances: 'auto'`: the most instances this limit runs on. An instance that has never
   * reached Redis (started while it was down) has no claim the others reserve: it answers on
   * `ceil(limit / maxInstances)`, so that up to `maxInstances` of them stay within the limit, and k
   * such instances beside the others add at most k × that to a window.
   * @default 10 (range 1 … 10^6)
   */
  maxInstances?: number;
  /**
   * With `instances: 'auto'`: how long, in ms, each heartbeat that Redis answered lets this instance
   * answer locally at its share. The other instances keep a silent instance's share reserved for its
   * lease plus its longest window (silence is not departure), so the limit holds when one instance
   * alone loses Redis; a crashed instance's share stays reserved that long (a clean `close()` frees
   * it at once, and so does a restart under the same `local.name`). At least 3 × `heartbeatMs`.
   * @default 600000, ten minutes: a Redis down for everyone that long leaves every instance on its
   *   whole share (range 3 × heartbeatMs … 2^31 - 1; see docs/options.md for the trade-offs)
   */
  leaseMs?: number;
  /**
   * What an instance in mode `'local'` answers once its lease has ended (Redis unreachable for longer
   * than `leaseMs`; also before its first beat answered): `'shrink'` answers locally at a tenth of its
   * share (rounded down; refused when that is 0), so that any number of instances cut off for any
   * length of time stay within a tenth of the limit while a Redis dead for everyone still lets some
   * traffic through; `'keep'` keeps the whole share (the limit then holds only when every instance
   * lost Redis); `'fail-closed'` / `'fail-open'` answer as those modes.
   * @default 'shrink'
   */
  afterLease?: AfterLease;
};

/** Options of `ResilientLimiter`. */
export type ResilientLimiterOptions = Omit<WindowOptions, 'limit'> & {
  /**
   * Permits allowed in any window of `windowMs`: an integer from 1 to 2^31 - 1, or a function of the
   * key that returns one, called at every call (per-key limits: tiers, per-customer overrides; or a
   * limit that changes at run time, e.g. {@link adaptiveLimit}). Required.
   */
  limit: number | LimitFunction;
  /** A client of ioredis (ideally from `createRedisClient()`), iovalkey, node-redis or Valkey GLIDE; single server or Cluster (docs/clients.md). Never closed by resilimit. */
  redis: RedisClient;
  /** Prefix of every Redis key; one prefix per limiter. @default 'resilimit:' */
  prefix?: string;
  /** What answers when Redis cannot. @default 'local' */
  mode?: Mode;
  /**
   * A call refused for want of permits blocks its key for this long, in ms, on every instance (held
   * in Redis; while Redis cannot answer, by the local tier of the instance that refused): every call
   * of the key is refused until then, with `retryAfterMs` counting the block. Calls refused while it is
   * blocked do not lengthen it. See also `block(key, ms)`. 0: no penalty.
   * @default 0 (range 0 … 2^31 - 1)
   */
  blockMs?: number;
  /**
   * Counts calls in Redis by time slices of this many ms instead of one by one: memory and Redis work
   * per key bounded by the slices, whatever the limit. Never over the limit in any window; a call may
   * be refused up to one slice early. Not with a caller's `id`; `limitAll()`'s windows are counted by slices too. See
   * {@link RedisWindowOptions.resolutionMs} and docs/resolution.md.
   * @default undefined (the exact log)
   */
  resolutionMs?: RedisWindowOptions['resolutionMs'];
  /**
   * Hot keys: a key this process calls often takes permits ahead in Redis (a lease, counted there
   * until its validity ends plus the window), admits its calls on them without a Redis call, and gives
   * back what it did not use. Never over the limit (when Redis loses data, a lease held admits its
   * unused part until that is seen); a call may be refused up to `validityMs` early, and while other
   * processes hold leased permits unused. Calls with a caller's `id` are decided one by one. The exact
   * log only (`resolutionMs` absent or `'auto'`). `true`: the defaults. See docs/resolution.md.
   * @default false
   */
  hotKeys?: boolean | HotKeyOptions;
  /**
   * Shadow mode, to roll out a new limit safely (as Envoy's `shadow_mode`): every call is decided and
   * counted as usual, but never refused. A call the limit would refuse (Redis's refusal, the deny
   * cache's, the local window's, or `'fail-closed'`'s) is admitted with `shadowRejected: true` and the
   * refusal's other fields, and consumes no permit: the windows hold what the limit would admit if it
   * were enforced. Counted in `stats().shadowRejected`, the `shadowRejected` event and the metrics.
   * `setShadow()` switches it at run time.
   * @default false
   */
  shadow?: boolean;
  /** The local tier. */
  local?: LocalTierOptions;
  /** The breaker. */
  breaker?: BreakerOptions;
  /**
   * Decisions waiting on Redis at once: sent (timed-out calls still running count too) or queued
   * for this turn's coalesced call. Past it, calls are answered by the fallback at once with reason
   * `'saturated'`.
   * @default 1000 (range 1 … 1,000,000)
   */
  maxInFlight?: number;
  /**
   * When Redis has not answered for this long, in ms, while calls are outstanding (from the later of
   * the oldest outstanding call and the last reply, as far as this process can vouch for it: time the
   * application kept the event loop busy does not count, see `PollWatch`), new calls go to the
   * fallback at once with reason `'slow'`, so that a frozen Redis stops receiving calls well before
   * the deadline. `'auto'`: 4 × the average latency of recent calls, at least 5 ms, at most `timeoutMs`.
   * @default 'auto'
   */
  slowCallMs?: number | 'auto';
  /**
   * The most calls of `acquire()` waiting at once, all keys together (a few hundred bytes of memory each).
   * Past it, `acquire()` rejects with `ERR_RESILIMIT_TOO_MANY_WAITERS` at once.
   * @default 10000 (range 1 … 1,000,000)
   */
  maxWaiters?: number;
  /**
   * A clock in ms since the epoch for every tier. When given, it replaces Redis's `TIME` too (tests,
   * or deployments that trust their clients' clocks); when absent, Redis decides with its own clock
   * and the local tier with a steady one: `Date.now()` at construction plus `performance.now()`
   * elapsed since, which a step of the wall clock does not move. Below 9 × 10^13 (Redis refuses
   * larger values: a reply error naming `nowMs`, and the mode answers).
   */
  clock?: () => number;
  /**
   * A monotonic clock in ms, `{ now() }` (as lru-cache's `perf`), that times every gate and every
   * duration: the stall, slow and saturation gates, the average Redis latency, the retry of keys held
   * by the journal, and how far the clock-offset bounds widen. Inject one in tests so that nothing
   * sleeps. The breaker's own deadline and open period are timers and do not read it, nor does the
   * event loop's idle time, which counts as Redis's silence (it is the loop's own measure).
   * @default performance (from node:perf_hooks)
   */
  perf?: { now(): number };
  /**
   * How often, in ms, an `instances: 'auto'` limiter beats; an instance silent for 1.5 beats has its share reserved, and stays counted until its lease and its window have passed (`local.leaseMs`). Longer than `windowMs / 12`, one instance cut off may add its share to the others' windows for about three beats.
   * @default `windowMs / 12` within 100 … 1,000 (range 100 … 60,000)
   */
  heartbeatMs?: number;
  /**
   * The most locally admitted calls kept for reconciliation; the oldest are dropped past it. Refunds
   * kept for Redis while it cannot answer have a bound of their own of the same size (and of
   * `maxPendingBytes`). @default 100000
   */
  maxPending?: number;
  /**
   * The most bytes of heap the calls kept for reconciliation may take, as estimated per call (128,
   * plus 2 per character of its key and of its `id`); the oldest are dropped past it, as past
   * `maxPending`. Integer 4,096 (room for the longest call) … 2^53 − 1. See docs/options.md, tuning.
   * @default 67108864 (64 MiB)
   */
  maxPendingBytes?: number;
  /**
   * Coalesce the calls made in one event-loop turn into script calls of at most 16 calls each (per
   * hash slot on a Cluster): fewer round trips and commands under load, while several script calls
   * in flight keep Redis and this process busy at the same time (see docs/benchmarks.md), at
   * the cost of one `process.nextTick` a turn. One caller at a time (the last turn sent one call,
   * none is out) sends its call at once, without the tick.
   * @default true
   */
  coalesce?: boolean;
  /**
   * Write the calls the local window admitted during an outage into Redis once it answers again.
   * Turning it off lets the window after recovery grant a full limit on top of them.
   * @default true
   */
  reconcile?: boolean;
};

/** {@link BreakerOptions} with every default filled in. */

export type ResolvedLimiterOptions = Readonly<{
  redis: RedisPort;
  prefix: string;
  /**
   * The limit when `limit` is a number; with a function, MAX_INT, a bound no call reaches (every call
   * carries the function's value for its key: see `Settings.limitOf`).
   */
  limit: number;
  limitFn: LimitFunction | undefined;
  windowMs: number;
  mode: Mode;
  blockMs: number;
  resolutionMs: number | undefined;
  hotKeys: Readonly<Required<HotKeyOptions>> | undefined;
  shadow: boolean;
  localLimit: number | undefined;
  instances: number | 'auto';
  maxKeys: number;
  /** `local.name`; undefined: a unique id per process. */
  name: string | undefined;
  maxInstances: number;
  leaseMs: number;
  afterLease: AfterLease;
  breaker: ResolvedBreakerOptions;
  maxInFlight: number;
  maxWaiters: number;
  slowCallMs: number | 'auto';
  clock: (() => number) | undefined;
  /** Every local time (windows, journal, decisions): `clock`, or the steady clock (`steadyClock()`). */
  /** The local clock: `clock`, or a steady one. */
  now: () => LocalMs;
  perf: { now(): number };
  heartbeatMs: number;
  maxPending: number;
  maxPendingBytes: number;
  reconcile: boolean;
  coalesce: boolean;
}>;

/** Checks a mode. */
export function mode(name: string, value: unknown): Mode {
  if (!MODES.includes(value as Mode)) throw invalidOption(name, "one of 'local', 'fail-open', 'fail-closed'", value);
  return value as Mode;
}

/** Every option's name, checked both ways against the types: a name added to one must be added to the other. */
const LIMITER_OPTIONS = [
  ...[
    'redis',
    'prefix',
    'limit',
    'windowMs',
    'mode',
    'blockMs',
    'resolutionMs',
    'hotKeys',
    'local',
    'breaker',
    'maxInFlight',
    'slowCallMs',
  ],
  ...['clock', 'perf'],
  ...['heartbeatMs', 'maxPending', 'maxPendingBytes', 'reconcile', 'coalesce', 'maxWaiters', 'shadow'],
] as const satisfies readonly (keyof ResilientLimiterOptions)[];
const LOCAL_OPTIONS = [
  'limit',
  'instances',
  'maxKeys',
  'name',
  'maxInstances',
  'leaseMs',
  'afterLease',
] as const satisfies readonly (keyof LocalTierOptions)[];
type All<Names, Keys> = [Exclude<Keys, Names>] extends [never] ? true : { missing: Exclude<Keys, Names> };
export const OPTION_NAMES_COMPLETE: [
  All<(typeof LIMITER_OPTIONS)[number], keyof ResilientLimiterOptions>,
  All<(typeof LOCAL_OPTIONS)[number], keyof LocalTierOptions>,
  All<(typeof BREAKER_OPTIONS)[number], keyof BreakerOptions>,
] = [true, true, true];

/** Validates {@link ResilientLimiterOptions} and returns a frozen copy with defaults filled in. */
export function resolveLimiterOptions(raw: unknown): ResolvedLimiterOptions {
  requireRuntime();
  const options = knownOptions('ResilientLimiter', raw, LIMITER_OPTIONS);
  const local = knownOptions('ResilientLimiter', options['local'], LOCAL_OPTIONS, { path: 'local.', optional: true });
  const breaker = resolveBreakerOptions('ResilientLimiter', options['breaker']);
  // A limit function is not called here: it takes a key, and none is known yet.
  const limitFn = typeof options['limit'] === 'function' ? (options['limit'] as LimitFunction) : undefined;
  const window = resolveWindowOptions(limitFn === undefined ? options : { ...options, limit: MAX_INT });
  const { timeoutMs } = breaker;
  const clock = optionalFunction('clock', options['clock']);
  const heartbeatMs = optionalInteger('heartbeatMs', options['heartbeatMs'], 100, 60_000, defaultHeartbeatMs(window.windowMs));
  const afterLease = local['afterLease'] ?? 'shrink';
  const slices = resolution(options['resolutionMs'], window.windowMs, limitFn === undefined ? window.limit : undefined);
  const hot = hotKeys(options['hotKeys'], window.windowMs, options['resolutionMs']);
  if (!AFTER_LEASE.includes(afterLease as AfterLease))
    throw invalidOption('local.afterLease', "one of 'shrink', 'keep', 'fail-closed', 'fail-open'", afterLease);
  return Object.freeze({
    ...window,
    limitFn,
    redis: portOf(options['redis']),
    prefix: prefix(options['prefix']),
    mode: options['mode'] === undefined ? 'local' : mode('mode', options['mode']),
    blockMs: optionalInteger('blockMs', options['blockMs'], 0, MAX_INT, 0),
    // Leases are members of the exact log: with them, 'auto' is the exact log (a number is refused by hotKeys()).
    resolutionMs: hot === undefined ? slices : undefined,
    hotKeys: hot,
    shadow: optionalBoolean('shadow', options['shadow'], false),
    localLimit: local['limit'] === undefined ? undefined : integer('local.limit', local['limit'], 1, MAX_INT),
    instances: integerOrAuto('local.instances', local['instances'], 1_000_000),
    maxKeys: optionalInteger('local.maxKeys', local['maxKeys'], 1, 2 ** 24, 10_000),
    name: instanceName(local['name']),
    maxInstances: optionalInteger('local.maxInstances', local['maxInstances'], 1, 1_000_000, 10),
    leaseMs: optionalInteger('local.leaseMs', local['leaseMs'], heartbeatMs * 3, MAX_INT, Math.max(DEFAULT_LEASE_MS, heartbeatMs * 3)),
    afterLease: afterLease as AfterLease,
    breaker,
    maxInFlight: optionalInteger('maxInFlight', options['maxInFlight'], 1, 1_000_000, 1000),
    maxWaiters: optionalInteger('maxWaiters', options['maxWaiters'], 1, 1_000_000, 10_000),
    slowCallMs: integerOrAuto('slowCallMs', options['slowCallMs'], timeoutMs, `breaker.timeoutMs (${timeoutMs})`),
    clock,
    now: localClock(clock ?? steadyClock()),
    perf: optionalPerf(options['perf']),
    heartbeatMs,
    maxPending: optionalInteger('maxPending', options['maxPending'], 1, 10_000_000, 100_000),
    maxPendingBytes: optionalInteger('maxPendingBytes', options['maxPendingBytes'], 4096, Number.MAX_SAFE_INTEGER, 64 * 2 ** 20),
    reconcile: optionalBoolean('reconcile', options['reconcile'], true),
    coalesce: optionalBoolean('coalesce', options['coalesce'], true),
  });
}
