import { channel } from 'node:diagnostics_channel';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { Breaker, isOpenRejection, isTimeout, type BreakerState } from './breaker.js';
import { DenyCache } from './DenyCache.js';
import { ErrorCode, invalidOption, isResilimitError, ResilimitError } from './errors.js';
import { ClockOffset } from './ClockOffset.js';
import { checkCost, checkId, checkKey, idOf, nextId, nextSeq } from './input.js';
import { wrap, type WrapOptions } from './wrap.js';
import { InstanceCounter } from './InstanceCounter.js';
import { configure, decide, decideBatch, inspect } from './internal.js';
import {
  allKey,
  checkItems,
  combine,
  itemId,
  readReply,
  scriptArgs,
  type CheckedItem,
  type GroupReply,
  type LimitAllDecision,
  type LimitAllItem,
} from './limitAll.js';
import { LocalWindow } from './LocalWindow.js';
import {
  integer,
  checkLimitValue,
  limitValue,
  MAX_INT,
  mode as checkMode,
  resolveLimiterOptions,
  type Mode,
  type ResilientLimiterOptions,
  type ResolvedLimiterOptions,
} from './options.js';
import { Reconciler, type PendingCall, type ReconcileResult } from './Reconciler.js';
import { bySlot, redisKey } from './redisKey.js';
import { redisCallError } from './failures.js';
import { warnIfUnsafe } from './redisClient.js';
import { RedisWindow, type BatchCall, type RedisDecision } from './RedisWindow.js';
import { evalScript, loadScript, runScript, staleReplyNowMs } from './script.js';
import type { Decision, DecisionReason, DecisionSource, LimitOptions } from './types.js';

const reconcileScript = loadScript('reconcile');
const heartbeatScript = loadScript('heartbeat');
const limitAllScript = loadScript('limit-all');

/** After a failed reconciliation pass, how long calls of keys held by the journal wait to start another, in ms. */
const HELD_RETRY_MS = 50;

/** The most window lengths one limiter's `limitAll()` may use (each has its own local window). */
const MAX_WINDOWS = 64;

/** A decision of {@link ResilientLimiter}: it always says why it was made where it was. */
export type LimiterDecision = Decision & { reason: DecisionReason };

/** Counters since the limiter was created; read with {@link ResilientLimiter.stats}. */
export type LimiterStats = {
  state: BreakerState;
  mode: Mode;
  enabled: boolean;
  limit: number;
  windowMs: number;
  /** The local window's limit: `local.limit`, or `ceil(limit / instances)`. */
  localLimit: number;
  instances: number;
  decisions: number;
  allowed: number;
  bySource: Record<DecisionSource, number>;
  byReason: Record<DecisionReason, number>;
  /** Decisions waiting on Redis now: sent (timed-out calls still running included) or queued to be. */
  inFlight: number;
  /** Average latency of recent successful Redis calls, ms. */
  redisLatencyMs: number;
  /** The slow-call threshold in force, ms. */
  slowCallMs: number;
  /** Times the breaker opened. */
  opened: number;
  reconcile: { pending: number; written: number; expired: number; present: number; dropped: number };
};

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
  /** The count of live instances changed (`instances: 'auto'`). */
  instances: [count: number];
};

/**
 * Published on the `resilimit:decision` diagnostics channel for every decision (free without
 * subscribers). `durationMs` is the time `limit()` took, measured only when the channel had
 * subscribers as the call began (0 otherwise).
 */
export type DecisionMessage = { limiter: ResilientLimiter; key: string; cost: number; decision: LimiterDecision; durationMs: number };

const decisionChannel = channel('resilimit:decision');

const REASONS: readonly DecisionReason[] = [
  'decided',
  'breaker-open',
  'timeout',
  'redis-error',
  'redis-reply-error',
  'not-ready',
  'saturated',
  'slow',
  'deny-cache',
  'reconciling',
  'disabled',
];

const NOT_READY = new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, 'The Redis client is not ready');

/**
 * The most calls one coalesced script call carries. Measured at 64 concurrent calls: 16 to 32 gave
 * about 1.2x the decisions/s of one script call for the whole turn (64), which leaves Redis idle
 * while this process reads the replies and this process idle while Redis runs the script.
 */
const MAX_BATCH = 16;

type QueuedCall = BatchCall & {
  now: number;
  resolve: (decision: RedisDecision) => void;
  reject: (error: unknown) => void;
};

/** A local tier's decision as the limiter answers it. A literal, not a spread: this is the whole path while Redis is down. */
function localDecision(d: Decision, reason: DecisionReason): LimiterDecision {
  return {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    retryAfterMs: d.retryAfterMs,
    resetAtMs: d.resetAtMs,
    source: 'local',
    reason,
  };
}

/**
 * A rate limiter for request paths: an exact sliding window in Redis behind a circuit breaker, with a
 * warm local window that answers while Redis cannot, and reconciliation once it can again.
 *
 * `limit()` never throws because of Redis and never waits for it much longer than
 * `breaker.timeoutMs`; misuse (a bad key or cost, use after `close()`) throws a coded error.
 *
 * @example
 * const limiter = new ResilientLimiter({ redis: createRedisClient(url), limit: 100, windowMs: 60_000 });
 * const decision = await limiter.limit(`user:${userId}`);
 * if (!decision.allowed) return reply429(decision.retryAfterMs);
 */
export class ResilientLimiter extends EventEmitter<LimiterEvents> {
  readonly #options: ResolvedLimiterOptions;
  readonly #redis: RedisWindow;
  readonly #local: LocalWindow;
  readonly #deny: DenyCache;
  readonly #breaker: Breaker;
  readonly #reconciler: Reconciler;
  readonly #instances: InstanceCounter | undefined;
  readonly #now: () => number;
  #limit: number;
  /** The `limit` option when it is a function: evaluated at every call. */
  #limitFn: (() => number) | undefined;
  #windowMs: number;
  #mode: Mode;
  #enabled = true;
  #closed = false;
  #closing: Promise<void> | undefined;
  #catchingUp: Promise<void> | undefined;
  /** The client has been ready at least once: until then calls are not sent (reason `not-ready`). */
  #everReady = false;

  // Outstanding Redis calls: start times (performance.now) in call order, so the first is the oldest.
  readonly #outstanding = new Map<number, number>();
  #sequence = 0;
  /**
   * Permits of calls waiting on Redis (until their call settles, a deadline included), by window:
   * the key for `limit()`, its journal group (key and window) for `limitAll()`, as `groupOf` names them.
   */
  readonly #pending = new Map<string, number>();
  /** When a reconciliation pass last failed (performance.now): calls of held keys retry after HELD_RETRY_MS. */
  #passFailedAt = Number.NEGATIVE_INFINITY;
  /** `limitAll()`: one local window per window length. */
  readonly #localByWindow = new Map<number, LocalWindow>();
  /** Decisions in Redis calls not yet answered (timed-out ones still running included). */
  #outstandingDecisions = 0;
  #queued: QueuedCall[] = [];
  #unsettled = 0;
  #whenSettled: (() => void) | undefined;
  #latencyMs = 1;
  /** When the last Redis call settled (performance.now). */
  #lastReplyAt = 0;
  #turnStartedAt: number | undefined;
  /** Bounds on Redis's clock minus the local clock, from the decisions' round trips (unused with an injected clock). */
  readonly #offset = new ClockOffset();
  #reconciling: Promise<void> | undefined;
  #opened = 0;
  readonly #byReason = Object.fromEntries(REASONS.map((r) => [r, 0])) as Record<DecisionReason, number>;
  readonly #bySource: Record<DecisionSource, number> = { redis: 0, local: 0, 'fail-open': 0, 'fail-closed': 0, disabled: 0 };
  #allowed = 0;
  readonly #reconciled = { written: 0, expired: 0, present: 0 };

  /** @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a missing or out-of-range option. */
  constructor(options: ResilientLimiterOptions) {
    super();
    const resolved = resolveLimiterOptions(options);
    this.#options = resolved;
    this.#limit = resolved.limit;
    this.#limitFn = resolved.limitFn;
    this.#windowMs = resolved.windowMs;
    this.#mode = resolved.mode;
    this.#now = resolved.clock ?? Date.now;
    warnIfUnsafe(resolved.redis);
    this.#everReady = resolved.redis.status === 'ready';
    resolved.redis.on('ready', this.#onReady);
    // A Cluster client stays 'ready' while one master dies and comes back empty: ioredis drops the
    // node ('-node') and adds it again ('+node') once it answers. Re-seed when such a node is ready.
    if (this.#isCluster) resolved.redis.on('+node', this.#onNode);
    this.#redis = new RedisWindow({
      redis: resolved.redis,
      prefix: resolved.prefix,
      limit: resolved.limit,
      windowMs: resolved.windowMs,
      ...(resolved.clock === undefined ? {} : { now: resolved.clock }),
    });
    const instances = resolved.instances === 'auto' ? 1 : resolved.instances;
    this.#local = new LocalWindow({
      limit: resolved.localLimit ?? Math.ceil(resolved.limit / instances),
      windowMs: resolved.windowMs,
      maxKeys: resolved.maxKeys,
      now: this.#now,
    });
    this.#deny = new DenyCache(resolved.maxKeys);
    this.#reconciler = new Reconciler(resolved.maxPending);
    this.#breaker = new Breaker(resolved.breaker, (state, previous) => {
      if (state === 'open') this.#opened += 1;
      this.#reconciler.track(state !== 'open');
      this.emit('stateChange', { state, previous });
      // Back from an outage with calls to write: write them before Redis decides again (when
      // half-open, the first batch is the trial).
      if (state !== 'open') this.#catchUp();
    });
    if (resolved.instances === 'auto') {
      const key = `${resolved.prefix}instances`;
      const member = checkId(undefined);
      const ttlMs = resolved.heartbeatMs * 3;
      this.#instances = new InstanceCounter(
        resolved.heartbeatMs,
        (leave) => {
          if (!this.#breaker.accepting || resolved.redis.status !== 'ready') return Promise.reject(NOT_READY);
          return this.#breaker.fire(() =>
            runScript(resolved.redis, heartbeatScript, [key], [member, ttlMs, leave ? '1' : '0']).then(
              (count) => count as number,
              (error: unknown) => Promise.reject(redisCallError(error)),
            ),
          );
        },
        (count) => {
          this.#applyLocalLimit();
          this.emit('instances', count);
        },
      );
      this.#instances.start();
    }
  }

  get #isCluster(): boolean {
    return (this.#options.redis as { isCluster?: boolean }).isCluster === true;
  }

  /** The breaker's state: `closed` (Redis decides), `open` (the fallback answers), `half-open` (one trial). */
  get state(): BreakerState {
    return this.#breaker.state;
  }

  /** The mode in force: what answers when Redis cannot. */
  get mode(): Mode {
    return this.#mode;
  }

  /** False while the kill switch is on (`setEnabled(false)`). */
  get enabled(): boolean {
    return this.#enabled;
  }

  /**
   * Decides one call of `key` and consumes its cost when admitted. Resolves with a decision whatever
   * Redis does; see `source` and `reason` for who decided and why.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_COST`,
   *   `ERR_RESILIMIT_INVALID_ID` (rejections of the returned promise), `ERR_RESILIMIT_CLOSED` after `close()`.
   */
  async limit(key: string, options?: LimitOptions): Promise<LimiterDecision> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'limit() was called after close()');
    const started = decisionChannel.hasSubscribers ? performance.now() : 0;
    if (this.#limitFn !== undefined) this.#followLimit(this.#limitFn);
    checkKey(key);
    const cost = checkCost(options?.cost, this.#limit);
    // A generated id is a counter value (see nextSeq): made into a string only for a call that goes
    // to Redis, where a late run must be recognisable; a call answered locally keeps the number.
    const given = options?.id !== undefined;
    const id = given ? checkId(options.id) : undefined;
    if (!this.#enabled) return this.#publish(key, cost, this.#fixed(true, 'disabled', 'disabled', this.#now()), started);
    const now = this.#now();
    const denial = this.#deny.check(key, cost, now);
    if (denial !== undefined) {
      return this.#publish(key, cost, {
        allowed: false,
        limit: this.#limit,
        remaining: denial.remaining,
        retryAfterMs: denial.until - now,
        resetAtMs: denial.resetAtMs,
        source: 'local',
        reason: 'deny-cache',
      }, started);
    }
    const diverted = this.#gate() ?? this.#held(key);
    if (diverted !== undefined) return this.#publish(key, cost, this.#fallback(key, cost, id, given, diverted), started);
    const seq = given ? 0 : nextSeq();
    return this.#publish(key, cost, await this.#fromRedis(key, cost, id ?? idOf(seq), given, now, seq), started);
  }

  /**
   * Decides several limits together, all or nothing: either every limit admits the call and all are
   * consumed, or none is (e.g. per user, per route and global at once). Each `{ key, limit,
   * windowMs, cost? }` is its own exact sliding window (its Redis key carries the window length, so
   * it never shares a window with `limit()`). On a single Redis, or when the keys share a hash slot,
   * one script call decides them atomically. On a Cluster with keys on several slots, the slots are
   * decided one after another (in slot order); if one refuses, the permits taken on the earlier
   * ones are given back. Meanwhile other calls may see them as used: under contention it can refuse
   * more than an atomic decision would, never admit more. When Redis cannot answer, the mode decides
   * (in `'local'`, all or nothing on local windows of each limit's share, journalled for
   * reconciliation).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for bad limits (naming the item and the
   *   field), `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_INVALID_ID`, `ERR_RESILIMIT_CLOSED`.
   * @example
   * const d = await limiter.limitAll([
   *   { key: `user:${userId}`, limit: 100, windowMs: 60_000 },
   *   { key: 'global', limit: 10_000, windowMs: 1_000 },
   * ]);
   * if (!d.allowed) reply429(d.retryAfterMs);
   */
  async limitAll(limits: readonly LimitAllItem[], options?: { id?: string }): Promise<LimitAllDecision> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'limitAll() was called after close()');
    const started = decisionChannel.hasSubscribers ? performance.now() : 0;
    const items = checkItems(limits, this.#options.prefix);
    const given = options?.id !== undefined;
    const id = given ? checkId(options.id) : undefined;
    for (const item of items) this.#localFor(item.windowMs);
    let result: LimitAllDecision;
    if (!this.#enabled) {
      const now = this.#now();
      result = combine(items.map((item) => this.#fixed(true, 'disabled', 'disabled', now, item.limit)), 'disabled', 'disabled');
    } else {
      let diverted = this.#gate();
      for (let i = 0; diverted === undefined && i < items.length; i += 1) {
        diverted = this.#held((items[i] as CheckedItem).group);
      }
      result =
        diverted === undefined
          ? await this.#allFromRedis(items, id ?? nextId(), given)
          : this.#fallbackAll(items, id, given, diverted);
    }
    items.forEach((item, i) => this.#publish(item.key, item.cost, result.decisions[i] as LimiterDecision, started));
    return result;
  }

  /** The local window of one of `limitAll()`'s window lengths. */
  #localFor(windowMs: number): LocalWindow {
    let window = this.#localByWindow.get(windowMs);
    if (window === undefined) {
      if (this.#localByWindow.size >= MAX_WINDOWS) {
        throw new ResilimitError(
          ErrorCode.INVALID_OPTION,
          `limitAll() on one limiter takes at most ${MAX_WINDOWS} different windowMs values (each has its own local window); got a ${MAX_WINDOWS + 1}th: ${windowMs}`,
        );
      }
      window = new LocalWindow({ limit: MAX_INT, windowMs, maxKeys: this.#options.maxKeys, now: this.#now });
      this.#localByWindow.set(windowMs, window);
    }
    return window;
  }

  async #allFromRedis(items: readonly CheckedItem[], id: string, given: boolean): Promise<LimitAllDecision> {
    const now = this.#now();
    for (const item of items) this.#reserve(item.group, item.cost);
    let pending = true;
    const release = (): void => {
      if (!pending) return;
      pending = false;
      for (const item of items) this.#reserve(item.group, -item.cost);
    };
    const groups = this.#isCluster ? bySlot(items, (item) => item.redisKey) : [items];
    const taken: (readonly CheckedItem[])[] = [];
    const giveBack = async (): Promise<void> => {
      // Best effort: a give that fails leaves those permits used (over-counting, never under).
      for (const group of taken.splice(0)) await this.#runAll('give', group, id, now).catch(() => undefined);
    };
    try {
      const replies = new Map<CheckedItem, GroupReply['items'][number]>();
      let refused = false;
      let nowMs = now;
      for (const group of groups) {
        // After a refusal nothing more is taken: the other slots are only asked how they stand.
        const reply = (await this.#runAll(refused ? 'check' : 'take', group, id, now)) as GroupReply;
        nowMs = reply.nowMs;
        group.forEach((item, i) => replies.set(item, reply.items[i] as GroupReply['items'][number]));
        if (!refused) {
          if (reply.admitted) taken.push(group);
          else refused = true;
        }
      }
      const givenBack = new Set(refused ? taken.flat() : []);
      if (refused) await giveBack();
      release();
      const decisions = items.map((item): LimiterDecision => {
        const r = replies.get(item) as GroupReply['items'][number];
        const back = givenBack.has(item) && !r.duplicate;
        return {
          allowed: r.fits,
          limit: item.limit,
          remaining: back ? Math.min(r.remaining + item.cost, item.limit) : r.remaining,
          retryAfterMs: r.retryAfterMs,
          resetAtMs: r.resetAtMs,
          source: 'redis',
          reason: 'decided',
        };
      });
      if (!refused) {
        // Warm standby, as for limit(): the local windows hold the calls Redis admitted.
        const at = nowMs - this.#offset.low(false); // learnt from this very round trip: no drift to allow for
        items.forEach((item) => {
          const r = replies.get(item) as GroupReply['items'][number];
          if (!r.duplicate) this.#localFor(item.windowMs).record(item.key, at, item.cost, itemId(id, item), given);
        });
      }
      if (this.#reconciler.size > 0) this.#scheduleReconcile();
      return combine(decisions, 'redis', 'decided');
    } catch (error) {
      await giveBack();
      release();
      return this.#fallbackAll(items, id, given, this.#reasonFor(error));
    } finally {
      release();
    }
  }

  /** One limit-all script call inside the breaker, tracked while outstanding like a decision. */
  #runAll(op: 'take' | 'give' | 'check', group: readonly CheckedItem[], id: string, now: number): Promise<GroupReply | unknown> {
    const { redis, clock } = this.#options;
    // A late give-back only removes what its take added: no staleness guard.
    const notAfter = op === 'give' ? undefined : this.#notAfter(now);
    return this.#fire(group.length, () => {
      const args = scriptArgs(op, group, id, clock === undefined ? '' : Math.floor(clock()), notAfter === undefined ? '' : Math.ceil(notAfter));
      const sentNow = this.#now();
      return runScript(redis, limitAllScript, group.map((item) => item.redisKey), args)
        .then(
          (reply) => {
            if (op === 'give') return reply;
            const read = readReply(limitAllScript, reply, group.length);
            this.#learnOffset(sentNow, read.nowMs);
            return read;
          },
          (error: unknown) => Promise.reject(redisCallError(error)),
        )
        .catch((error: unknown) => this.#learnFromStale(error, sentNow));
    });
  }

  /**
   * The staleness guard of a Redis call whose oldest decision was asked at `now` (local clock): on
   * Redis's clock (with the least offset the round trips allow), a little inside the deadline.
   * Undefined with an injected clock (Redis cannot check it) or before the offset is known. The
   * bound is not widened for the time since the last round trip: after a long outage that would put
   * the deadline of the first calls in the past, and they would find Redis no use.
   */
  #notAfter(now: number): number | undefined {
    const { timeoutMs } = this.#options.breaker;
    return this.#options.clock === undefined && this.#offset.known
      ? now + this.#offset.low(false) + Math.max(timeoutMs - 2, timeoutMs / 2)
      : undefined;
  }

  /** Learns the clock offset from a round trip sent at `sentNow` (local clock) that read Redis's clock at `redisNowMs`. */
  #learnOffset(sentNow: number, redisNowMs: number): void {
    if (this.#options.clock === undefined) this.#offset.sample(sentNow, redisNowMs, this.#now());
  }

  /**
   * Rethrows `error`, after learning the offset from it when it is a stale reply: Redis's clock may
   * have stepped past the deadlines (a failover to a host whose clock is ahead), and without this
   * every later call would be stale too.
   */
  #learnFromStale(error: unknown, sentNow: number): never {
    const redisNowMs = staleReplyNowMs(error);
    if (redisNowMs !== undefined) this.#learnOffset(sentNow, redisNowMs);
    throw error;
  }

  /**
   * Runs one Redis call inside the breaker, counted as `decisions` decisions outstanding until it
   * settles (a late one included): the stall, slow and saturation gates read them.
   */
  #fire<T>(decisions: number, run: () => Promise<T>): Promise<T> {
    return this.#breaker.fire(() => {
      if (this.#options.redis.status !== 'ready') return Promise.reject(NOT_READY);
      const sequence = ++this.#sequence;
      this.#outstanding.set(sequence, performance.now());
      this.#outstandingDecisions += decisions;
      const done = (): void => {
        this.#outstanding.delete(sequence);
        this.#outstandingDecisions -= decisions;
        this.#lastReplyAt = performance.now();
      };
      const call = run();
      call.then(done, done);
      return call;
    }) as Promise<T>;
  }

  /** `limitAll()` when Redis does not decide, by mode. */
  #fallbackAll(items: readonly CheckedItem[], id: string | undefined, given: boolean, reason: DecisionReason): LimitAllDecision {
    const now = this.#now();
    if (this.#mode !== 'local') {
      const allowed = this.#mode === 'fail-open';
      const source = this.#mode;
      return combine(items.map((item) => this.#fixed(allowed, source, reason, now, item.limit)), source, reason);
    }
    const instances = this.#instances?.count ?? this.#instancesSet();
    const share = (item: CheckedItem): number => Math.ceil(item.limit / instances);
    // A journalled call has an id even when the caller gave none, kept by the local windows (see #fallback).
    const journalled = this.#journals(reason);
    const callId = id ?? (journalled ? nextId() : undefined);
    const idFor = (item: CheckedItem): string | undefined => (callId === undefined ? undefined : itemId(callId, item));
    // First every window is asked (the same key twice counts its earlier costs), then all consume, or none.
    const before = new Map<string, number>();
    const views = items.map((item) => {
      const earlier = before.get(item.group) ?? 0;
      before.set(item.group, earlier + item.cost);
      const reserved = (this.#pending.get(item.group) ?? 0) + earlier;
      return this.#localFor(item.windowMs)[inspect](item.key, item.cost, idFor(item), now, given, reserved, share(item));
    });
    let decisions = views;
    if (views.every((d) => d.allowed)) {
      decisions = items.map((item) => {
        const itemCallId = idFor(item);
        const d = this.#localFor(item.windowMs)[decide](item.key, item.cost, itemCallId, now, given, this.#pending.get(item.group) ?? 0, share(item));
        if (d.allowed && journalled && itemCallId !== undefined) {
          this.#reconciler.add({ key: item.key, at: now, cost: item.cost, id: itemCallId, windowMs: item.windowMs });
        }
        return d;
      });
    }
    return combine(
      decisions.map((d) => localDecision(d, reason)),
      'local',
      reason,
    );
  }

  /**
   * Tells what a call of cost 1 to `key` would get now, consuming nothing: Redis's answer when it
   * can give one (`source: 'redis'`), else the answer of the mode, as `limit()` would give it (in
   * `'local'`, the local window's, with the reason). The deny cache is not consulted; no decision
   * is published; a Redis call that fails counts for the breaker like any other.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_CLOSED` after `close()`
   *   (rejections of the returned promise).
   */
  async peek(key: string): Promise<LimiterDecision> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'peek() was called after close()');
    if (this.#limitFn !== undefined) this.#followLimit(this.#limitFn);
    checkKey(key);
    if (!this.#enabled) return this.#fixed(true, 'disabled', 'disabled', this.#now());
    const diverted = this.#gate() ?? this.#held(key);
    if (diverted !== undefined) return this.#peekFallback(key, diverted);
    try {
      const d = (await this.#send([{ key, cost: 0, id: '' }], this.#now()))[0] as RedisDecision;
      const { allowed, limit, remaining, retryAfterMs, resetAtMs } = d;
      return { allowed, limit, remaining, retryAfterMs, resetAtMs, source: 'redis', reason: 'decided' };
    } catch (error) {
      return this.#peekFallback(key, this.#reasonFor(error));
    }
  }

  /** `peek()` when Redis does not answer, by mode. */
  #peekFallback(key: string, reason: DecisionReason): LimiterDecision {
    const now = this.#now();
    const fixed = this.#byFailMode(reason, now);
    if (fixed !== undefined) return fixed;
    const pending = this.#pending.get(key) ?? 0;
    return localDecision(this.#local[inspect](key, 1, undefined, now, false, pending, this.#local.options.limit), reason);
  }

  /**
   * Forgets every permit `key` used, in both tiers (e.g. the failed attempts of a login that then
   * succeeded): the local window and the deny cache at once, the key's calls waiting in the journal
   * (they will not be written back), then Redis's window (one call through the breaker). Calls of
   * the key that are on their way to Redis meanwhile may still count. This is the window of
   * `limit()`; the windows of `limitAll()` are keys of their own.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_KEY`, `ERR_RESILIMIT_CLOSED` after `close()`; and
   *   `ERR_RESILIMIT_REDIS_UNAVAILABLE` (or `ERR_RESILIMIT_REDIS_REPLY`) when Redis did not forget the key:
   *   the local tiers are reset all the same, and Redis keeps counting the key's calls until they leave
   *   its window (rejections of the returned promise).
   */
  async reset(key: string): Promise<void> {
    if (this.#closed) throw new ResilimitError(ErrorCode.CLOSED, 'reset() was called after close()');
    checkKey(key);
    this.#local.reset(key);
    this.#deny.delete(key);
    this.#reconciler.forget(key);
    try {
      await this.#fire(0, () => this.#redis.reset(key));
    } catch (error) {
      if (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY) throw error;
      const why = isOpenRejection(error)
        ? 'the breaker is open'
        : isTimeout(error)
          ? `no answer within ${this.#options.breaker.timeoutMs} ms`
          : error instanceof Error
            ? error.message
            : String(error);
      throw new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, `reset() could not reach Redis (${why}): only the local tiers forgot the key`, {
        cause: error,
      });
    }
  }

  /**
   * Returns `fn` limited by this limiter: see {@link wrap} (a rejected call returns
   * `onLimited(decision, …args)` or rejects with a `RateLimitedError`).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` when `fn` or an option is not a function.
   * @example
   * const send = limiter.wrap(sendMail, { key: (to: string) => `mail:${to}` });
   */
  wrap<This, Args extends unknown[], R>(
    fn: (this: This, ...args: Args) => R | Promise<R>,
    options: WrapOptions<This, Args, R, LimiterDecision>,
  ): (this: This, ...args: Args) => Promise<Awaited<R>> {
    return wrap(this, fn, options);
  }

  /**
   * The client connected again: Redis may have lost data (a restart, a failover to a replica that
   * missed the last writes). Re-seed it from the local window, which holds this instance's calls of
   * the current window with their ids (re-adding a call Redis still has changes nothing), and answer
   * locally until that is done, so that an emptied Redis does not grant a fresh limit meanwhile.
   */
  readonly #onReady = (): void => {
    if (!this.#everReady) {
      this.#everReady = true;
      return;
    }
    if (this.#closed) return;
    this.#reseed();
    this.#catchUp();
  };

  /** A node joined a Cluster client's pool after start-up: it may be a master back without its data. */
  readonly #onNode = (node: { once(event: 'ready', listener: () => void): unknown }): void => {
    if (!this.#everReady || this.#closed) return;
    node.once('ready', () => {
      if (this.#closed) return;
      this.#reseed();
      this.#catchUp();
    });
  };

  /** Puts every call of the warm windows that Redis admitted (they carry ids) into the journal. */
  #reseed(): void {
    for (const call of this.#local.calls()) this.#reconciler.add(call);
    for (const [windowMs, window] of this.#localByWindow) {
      for (const call of window.calls()) this.#reconciler.add({ ...call, windowMs });
    }
  }

  /**
   * Writes the journal into Redis before Redis decides again: until one pass is done, calls are
   * answered locally with reason `'reconciling'`, so a Redis that missed those calls (they were
   * admitted during an outage, or it lost data) cannot grant a fresh limit on top of them.
   */
  #catchUp(): void {
    if (this.#reconciler.size === 0 || this.#closed || this.#catchingUp !== undefined) return;
    this.#catchingUp = this.#catchUpPasses().finally(() => {
      this.#catchingUp = undefined;
    });
  }

  async #catchUpPasses(): Promise<void> {
    // Calls answered locally during a pass join the journal: a few more short passes take them too.
    for (let pass = 0; pass < 4 && this.#reconciler.size > 0 && !this.#closed; pass += 1) {
      const written = this.#reconciled.written + this.#reconciled.present + this.#reconciled.expired;
      await this.#pass();
      const progressed = this.#reconciled.written + this.#reconciled.present + this.#reconciled.expired > written;
      if (!progressed || this.#breaker.state !== 'closed') return; // failed: the rest waits for Redis
    }
  }

  /**
   * `'reconciling'` while calls of this journal group (a key) are not yet sent to Redis: Redis must
   * not decide the key without them (a pass may have stopped early, or a master be down). A pass
   * is started when none runs: it sends the calls at once when it can, and this call goes after them.
   */
  #held(group: string): DecisionReason | undefined {
    // A client that is not connected fails the call anyway (and the breaker counts it): no hold.
    if (!this.#reconciler.holds(group) || this.#options.redis.status !== 'ready') return undefined;
    if (this.#reconciling === undefined && performance.now() - this.#passFailedAt >= HELD_RETRY_MS) {
      this.#scheduleReconcile();
      if (!this.#reconciler.holds(group)) return undefined;
    }
    return 'reconciling';
  }

  /** Why a call must not go to Redis now, or undefined when it may. */
  #gate(): DecisionReason | undefined {
    if (this.#catchingUp !== undefined) return 'reconciling';
    const state = this.#breaker.state;
    if (state === 'open') return 'breaker-open';
    if (state === 'half-open') return undefined; // opossum lets exactly one trial through
    if (!this.#everReady) return 'not-ready';
    // How long Redis has gone without answering, measured up to the start of this event-loop turn:
    // replies cannot be read while the current turn runs, so a burst of calls issued in one turn must
    // not look like a stall of its own making.
    const waiting =
      this.#outstanding.size === 0
        ? 0
        : this.#turnStart() - Math.max(this.#outstanding.values().next().value as number, this.#lastReplyAt);
    if (waiting > this.#options.breaker.timeoutMs) {
      // A stall: Redis has been silent for longer than the deadline while calls wait on it. That is
      // evidence enough to open at once; an error rate would need calls that we are not sending.
      this.#breaker.open();
      return 'breaker-open';
    }
    // Decisions waiting on Redis: sent (late ones included), or queued for this turn's coalesced call.
    if (this.#outstandingDecisions + this.#queued.length >= this.#options.maxInFlight) return 'saturated';
    if (waiting > this.#slowCallMs()) return 'slow';
    return undefined;
  }

  #turnStart(): number {
    if (this.#turnStartedAt === undefined) {
      this.#turnStartedAt = performance.now();
      setImmediate(this.#endTurn).unref();
    }
    return this.#turnStartedAt;
  }

  readonly #endTurn = (): void => {
    this.#turnStartedAt = undefined;
  };

  /** Adds `permits` (negative: releases them) to the permits waiting on Redis in `group`. */
  #reserve(group: string, permits: number): void {
    const left = (this.#pending.get(group) ?? 0) + permits;
    if (left === 0) this.#pending.delete(group);
    else this.#pending.set(group, left);
  }

  /** `seq`: the number a generated `id` was made from (0 for the caller's id), kept by the warm window instead of the string. */
  async #fromRedis(key: string, cost: number, id: string, given: boolean, now: number, seq: number): Promise<LimiterDecision> {
    this.#unsettled += 1;
    this.#reserve(key, cost);
    let pending = true;
    const release = (): void => {
      if (!pending) return;
      pending = false;
      this.#reserve(key, -cost);
    };
    try {
      // Half-open lets one Redis call through: a call alone, so that only its caller waits on the trial.
      const decision =
        this.#options.coalesce && this.#breaker.state === 'closed'
          ? await this.#enqueue(key, cost, id, now)
          : ((await this.#send([{ key, cost, id }], now))[0] as RedisDecision);
      release();
      if (decision.allowed) {
        // Warm standby: the local window holds this instance's recent traffic when it takes over,
        // at the time Redis admitted it (on the local clock), with its id for re-seeding.
        // The offset was learnt from this very round trip: no drift to allow for (and no clock read).
        if (!decision.duplicate) this.#local.record(key, decision.nowMs - this.#offset.low(false), cost, given ? id : seq, given);
      } else {
        this.#deny.deny(key, now + decision.retryAfterMs, cost, decision.remaining, decision.resetAtMs);
      }
      if (this.#reconciler.size > 0) this.#scheduleReconcile();
      return {
        allowed: decision.allowed,
        limit: decision.limit,
        remaining: decision.remaining,
        retryAfterMs: decision.retryAfterMs,
        resetAtMs: decision.resetAtMs,
        source: 'redis',
        reason: 'decided',
      };
    } catch (error) {
      release();
      return this.#fallback(key, cost, id, given, this.#reasonFor(error));
    } finally {
      release();
      this.#unsettled -= 1;
      if (this.#unsettled === 0) this.#whenSettled?.();
    }
  }

  /**
   * One Redis call inside the breaker, for one call or a batch, tracked while outstanding. `now` is
   * the local time of the oldest call: the staleness guard counts its deadline from there.
   */
  async #send(calls: readonly BatchCall[], now: number): Promise<RedisDecision[]> {
    const notAfter = this.#notAfter(now);
    let sentAt = 0;
    let sentNow = 0;
    const decisions = await this.#fire(calls.length, () => {
      sentAt = performance.now();
      sentNow = this.#now();
      return this.#redis[decideBatch](calls, notAfter).catch((error: unknown) => this.#learnFromStale(error, sentNow));
    });
    const latency = performance.now() - sentAt;
    this.#latencyMs += (latency - this.#latencyMs) * 0.05;
    const first = decisions[0];
    if (first !== undefined) this.#learnOffset(sentNow, first.nowMs);
    return decisions;
  }

  /** Queues a call for the batch of this turn (`coalesce: true`); the batch leaves on the next tick. */
  #enqueue(key: string, cost: number, id: string, now: number): Promise<RedisDecision> {
    return new Promise<RedisDecision>((resolve, reject) => {
      this.#queued.push({ key, cost, id, now, resolve, reject });
      if (this.#queued.length === 1) process.nextTick(this.#flush);
    });
  }

  /**
   * Sends the calls queued this turn: one script call per hash slot on a Cluster (a script's keys
   * must share one), one in all on a single Redis, at most MAX_BATCH calls each.
   */
  readonly #flush = (): void => {
    const queued = this.#queued;
    this.#queued = [];
    const { prefix } = this.#options;
    const groups = this.#isCluster ? bySlot(queued, (call) => redisKey(prefix, call.key)) : [queued];
    for (const group of groups) {
      for (let i = 0; i < group.length; i += MAX_BATCH) {
        const chunk = group.slice(i, i + MAX_BATCH);
        this.#send(chunk, (chunk[0] as QueuedCall).now).then(
          (decisions) => chunk.forEach((call, j) => call.resolve(decisions[j] as RedisDecision)),
          (error: unknown) => chunk.forEach((call) => call.reject(error)),
        );
      }
    }
  };

  #reasonFor(error: unknown): DecisionReason {
    if (isOpenRejection(error)) return 'breaker-open';
    if (isTimeout(error)) return 'timeout';
    if (error === NOT_READY) return 'not-ready';
    if (isResilimitError(error) && error.code === ErrorCode.REDIS_UNAVAILABLE) return 'redis-error';
    const replyError =
      isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY
        ? error
        : new ResilimitError(ErrorCode.REDIS_REPLY, `Unexpected failure of a Redis call: ${String(error)}`, { cause: error });
    if (this.listenerCount('redisReplyError') > 0) this.emit('redisReplyError', replyError);
    return 'redis-reply-error';
  }

  /** The answer when Redis does not decide, by mode. */
  #fallback(key: string, cost: number, id: string | undefined, given: boolean, reason: DecisionReason): LimiterDecision {
    const now = this.#now();
    const fixed = this.#byFailMode(reason, now);
    if (fixed !== undefined) return fixed;
    // Calls of this key still waiting on Redis may be admitted there: count them as used, so that a
    // call diverted meanwhile cannot take the same permits.
    const pending = this.#pending.size === 0 ? 0 : (this.#pending.get(key) ?? 0);
    // A journalled call keeps an id in the local window even if it was never sent to Redis, the
    // journal's own: once written back, it is in Redis, so a re-seed after Redis lost its data
    // writes it again (counted once). A call not journalled was never in Redis: no id, no re-seed.
    const journalled = this.#journals(reason);
    const callId = id ?? (journalled ? nextSeq() : undefined);
    const d = this.#local[decide](key, cost, callId, now, given, pending);
    if (d.allowed && journalled && callId !== undefined) this.#reconciler.add({ key, at: now, cost, id: callId });
    return localDecision(d, reason);
  }

  /** The fixed answer of mode `'fail-open'` or `'fail-closed'`; undefined in `'local'`. */
  #byFailMode(reason: DecisionReason, now: number): LimiterDecision | undefined {
    return this.#mode === 'local' ? undefined : this.#fixed(this.#mode === 'fail-open', this.#mode, reason, now);
  }

  /**
   * Whether a call the local window admits for `reason` is journalled, to be written into Redis
   * later: not with `reconcile: false`, nor after a reply error (Redis answered that it cannot take
   * this call: a key of another type, a script bug; writing it back would fail the same way).
   */
  #journals(reason: DecisionReason): boolean {
    return this.#options.reconcile && reason !== 'redis-reply-error';
  }

  /** A decision of the kill switch or of a fail-open/fail-closed mode, for a limit of `limit`. */
  #fixed(allowed: boolean, source: DecisionSource, reason: DecisionReason, now: number, limit = this.#limit): LimiterDecision {
    const retryAfterMs = allowed ? 0 : this.#breaker.resetTimeoutMs;
    return { allowed, limit, remaining: allowed ? limit : 0, retryAfterMs, resetAtMs: now + retryAfterMs, source, reason };
  }

  #publish(key: string, cost: number, decision: LimiterDecision, started: number): LimiterDecision {
    this.#byReason[decision.reason] += 1;
    this.#bySource[decision.source] += 1;
    if (decision.allowed) this.#allowed += 1;
    if (decisionChannel.hasSubscribers) {
      const durationMs = started === 0 ? 0 : performance.now() - started;
      decisionChannel.publish({ limiter: this, key, cost, decision, durationMs } satisfies DecisionMessage);
    }
    return decision;
  }

  #slowCallMs(): number {
    const set = this.#options.slowCallMs;
    if (set !== 'auto') return set;
    return Math.min(Math.max(5, 4 * this.#latencyMs), this.#options.breaker.timeoutMs);
  }

  #localLimit(): number {
    return this.#options.localLimit ?? Math.ceil(this.#limit / (this.#instances?.count ?? this.#instancesSet()));
  }

  #instancesSet(): number {
    return this.#options.instances === 'auto' ? 1 : this.#options.instances;
  }

  #applyLocalLimit(): void {
    this.#local[configure]({ limit: this.#localLimit() });
  }

  #scheduleReconcile(): void {
    if (this.#reconciler.size === 0 || this.#closed) return;
    void this.#pass();
  }

  /**
   * The reconciliation pass running now, or a new one: never two at once. Calls journalled while a
   * pass ran are taken by another pass right after it, unless it failed (they wait for a trigger:
   * a Redis decision, a call of a held key at most every HELD_RETRY_MS, the breaker closing).
   */
  #pass(): Promise<void> {
    this.#reconciling ??= this.#reconcile().then(
      (again) => {
        this.#reconciling = undefined;
        if (again && this.#breaker.state === 'closed') this.#scheduleReconcile();
      },
      (error: unknown) => {
        this.#reconciling = undefined;
        throw error;
      },
    );
    return this.#reconciling;
  }

  /**
   * Writes the locally admitted calls into Redis (same ids, original times, only those still in the
   * window). True when it wrote without failing and more calls are waiting.
   */
  async #reconcile(): Promise<boolean> {
    const state = this.#breaker.state;
    if (state === 'open' || this.#options.redis.status !== 'ready') return false;
    const { redis, prefix, clock } = this.#options;
    const windowMs = this.#windowMs;
    // Written at the latest time they can have on Redis's clock: they leave Redis's window no earlier than the local one.
    const offset = clock === undefined ? this.#offset.high() : 0;
    let result: ReconcileResult;
    let failed = false;
    try {
      // Half-open lets one call through: the first batch alone, as the trial.
      const concurrency = state === 'half-open' ? 1 : 8;
      const now = this.#now();
      result = await this.#reconciler.flush(now - windowMs, concurrency, (key, calls) =>
        this.#breaker.fire(async () => {
          const own = (calls[0] as PendingCall).windowMs;
          const args: (string | number)[] = [own ?? windowMs, clock === undefined ? '' : Math.floor(clock())];
          for (const call of calls) {
            // The call's own id: if this batch fails after Redis ran it, the retry is a no-op.
            args.push(Math.ceil(call.at + offset), call.cost, typeof call.id === 'number' ? idOf(call.id) : call.id);
          }
          try {
            const target = own === undefined ? redisKey(prefix, key) : allKey(prefix, key, own);
            // By source: a decision of this key may be sent right behind it (see #held).
            return (await evalScript(redis, reconcileScript, [target], args)) as [number, number, number];
          } catch (error) {
            throw redisCallError(error);
          }
        }),
        now,
      );
    } catch (error) {
      failed = true;
      this.#passFailedAt = performance.now();
      result = (error as { partial?: ReconcileResult }).partial ?? {
        written: 0,
        expired: 0,
        present: 0,
        remaining: this.#reconciler.size,
      };
    }
    this.#reconciled.written += result.written;
    this.#reconciled.expired += result.expired;
    this.#reconciled.present += result.present;
    this.emit('reconciled', result);
    return !failed && this.#reconciler.size > 0;
  }

  /**
   * Writes pending reconciliation now, if the breaker is closed, and resolves when done.
   * Reconciliation also starts by itself after the breaker closes and after any Redis decision.
   */
  async reconcile(): Promise<void> {
    await this.#catchingUp;
    this.#scheduleReconcile();
    await this.#reconciling;
  }

  /** Counters since creation. Cheap, but not meant for every request. */
  stats(): LimiterStats {
    return {
      state: this.#breaker.state,
      mode: this.#mode,
      enabled: this.#enabled,
      limit: this.#limit,
      windowMs: this.#windowMs,
      localLimit: this.#local.options.limit,
      instances: this.#instances?.count ?? this.#instancesSet(),
      decisions: Object.values(this.#bySource).reduce((a, b) => a + b, 0),
      allowed: this.#allowed,
      bySource: { ...this.#bySource },
      byReason: { ...this.#byReason },
      inFlight: this.#outstandingDecisions + this.#queued.length,
      redisLatencyMs: this.#latencyMs,
      slowCallMs: this.#slowCallMs(),
      opened: this.#opened,
      reconcile: { pending: this.#reconciler.pending, ...this.#reconciled, dropped: this.#reconciler.dropped },
    };
  }

  /** Switches what answers when Redis cannot, from the next call on. @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`. */
  setMode(mode: Mode): void {
    const next = checkMode('mode', mode);
    const previous = this.#mode;
    if (next === previous) return;
    this.#mode = next;
    this.emit('modeChange', { mode: next, previous });
  }

  /** The kill switch: `false` admits every call at once (source `'disabled'`) without touching Redis. */
  setEnabled(enabled: boolean): void {
    if (typeof enabled !== 'boolean') throw invalidOption('enabled', 'a boolean', enabled);
    this.#enabled = enabled;
  }

  /** A `limit` function's value for this call; both tiers follow it (checked only when it changed). */
  #followLimit(fn: () => number): void {
    const value = fn();
    if (value === this.#limit) return;
    const limit = checkLimitValue(value);
    this.#limit = limit;
    this.#redis[configure]({ limit });
    this.#local[configure]({ limit: this.#localLimit() });
    this.#deny.clear();
  }

  /**
   * Changes the limit and/or the window for the calls that follow, in both tiers; the calls already
   * recorded stay. The deny cache is cleared. `limit` may be a function, as in the options (a number
   * replaces a function given before).
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION`.
   */
  update(changes: { limit?: number | (() => number); windowMs?: number }): void {
    if (typeof changes !== 'object' || changes === null) throw invalidOption('changes', 'an object', changes);
    const limitFn = typeof changes.limit === 'function' ? changes.limit : undefined;
    const limit =
      changes.limit === undefined
        ? this.#limit
        : limitFn !== undefined
          ? limitValue(limitFn)
          : integer('limit', changes.limit, 1, MAX_INT);
    const windowMs = changes.windowMs === undefined ? this.#windowMs : integer('windowMs', changes.windowMs, 1, MAX_INT);
    if (changes.limit !== undefined) this.#limitFn = limitFn;
    this.#limit = limit;
    this.#windowMs = windowMs;
    this.#redis[configure]({ limit, windowMs });
    this.#local[configure]({ limit: this.#localLimit(), windowMs });
    this.#deny.clear();
  }

  /** Opens the breaker and holds it open (no trial calls) until {@link forceClose}. */
  forceOpen(): void {
    this.#breaker.forceOpen();
  }

  /** Closes the breaker now (also one forced open); Redis decides again from the next call. */
  forceClose(): void {
    this.#breaker.forceClose();
  }

  /**
   * Stops the limiter: writes pending reconciliation if Redis is healthy, leaves the instance count,
   * waits for outstanding calls to settle (at most about `breaker.timeoutMs`), then clears every timer
   * and listener it created. The Redis client stays open (it is yours). Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    if (this.#reconciler.size > 0) await this.reconcile();
    this.#closed = true;
    await this.#instances?.stop();
    await this.#reconciling;
    if (this.#unsettled > 0) {
      await new Promise<void>((resolve) => {
        this.#whenSettled = resolve;
      });
    }
    this.#breaker.shutdown();
    this.#options.redis.off('ready', this.#onReady);
    this.#options.redis.off('+node', this.#onNode);
  }

  /** Same as {@link close}, for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
