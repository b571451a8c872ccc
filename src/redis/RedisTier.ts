import type { RedisClient } from '../client/clientType.js';
import type { RedisPort } from '../client/port.js';
import { Breaker, type BreakerState } from './Breaker.js';
import { withDeadline } from '../client/withDeadline.js';
import { ClockOffset } from './ClockOffset.js';
import { ErrorCode, isResilimitError } from '../base/errors.js';
import { NOT_READY } from './failures.js';
import type { ResolvedLimiterOptions } from '../options/options.js';
import { CallLedger } from './CallLedger.js';
import { PollWatch } from './PollWatch.js';
import { RedisWindow } from './RedisWindow.js';
import type { LocalMs, RedisMs } from '../base/time.js';
import { StaleReplyError } from './scripts/script.js';

/** How long a reconnect waits for the server's run id before it takes the data for lost, ms. */
const PROBE_MS = 1_000;

/** True when Redis itself answered with `error`: a stale reply (it ran the call after its deadline) or a reply error. */
function repliedWith(error: unknown): boolean {
  return error instanceof StaleReplyError || (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY);
}

/** What the Redis tier needs of the limiter's options. */
type TierOptions = Pick<
  ResolvedLimiterOptions,
  'redis' | 'prefix' | 'limit' | 'windowMs' | 'blockMs' | 'resolutionMs' | 'breaker' | 'clock' | 'now' | 'perf'
>;

/**
 * The Redis tier as the limiter uses it: every Redis call goes out through {@link call}, inside the
 * breaker. The features own their script calls (decisions: `path/sendDecisions.ts`, `AllCall`;
 * write-backs and the clock read: `Recovery`; heartbeats: `countInstances`; `reset()`, `block()`:
 * `limiter/command.ts`); this class owns the way they go.
 *
 * It owns, and alone changes:
 * - the breaker (the one place opossum is used is `Breaker.ts`);
 * - the call ledger (`CallLedger`), kept by {@link call}. It marks `polls` (`PollWatch`) each time
 *   the wait for Redis starts again (see `PollWatch.mark`);
 * - the bounds on Redis's clock minus the local one ({@link ClockOffset}), learnt from every
 *   decision's round trip, and the staleness deadline sent with each decision;
 * - whether the client has been ready once (until then nothing is sent: reason `not-ready`), and the
 *   client's `ready` / `+node` events, which it reports as possible data loss (`onReconnect`).
 *
 * The rules that read the ledger (stall, saturation, slowness) are in `Gate.ts`.
 */
export class RedisTier {
  readonly breaker: Breaker;
  /** How long Redis was silent, not this process busy: marked here, shown the loop by the gate and the breaker. */
  readonly polls: PollWatch;
  /** Bounds on Redis's clock minus the local one (unused with an injected `clock`: both sides use it). */
  readonly offset: ClockOffset;
  readonly #redis: RedisPort;
  /** Removes the client listeners. */
  readonly #unlisten: (() => void)[];
  /** The window in Redis that decides `limit()`; `Settings` changes its limit and length. */
  readonly window: RedisWindow;
  readonly #clock: (() => number) | undefined;
  /** The local clock (see `ResolvedLimiterOptions.now`). */
  readonly now: () => LocalMs;
  /** The breaker's deadline on every call, ms. */
  readonly timeoutMs: number;
  /** The decisions outstanding at Redis (see `CallLedger`). */
  readonly ledger: CallLedger;
  #everReady: boolean;
  /** The server's run id as learnt at the last `ready` (undefined: not known). */
  #runId: Promise<string | undefined> = Promise.resolve(undefined);
  readonly #onReconnect: (lost: Promise<boolean>) => void;

  constructor(
    options: TierOptions,
    onState: (state: BreakerState, previous: BreakerState) => void,
    /**
     * The client connected again after being ready once; `lost` resolves true when Redis may have
     * lost data: another server answers (its run id changed: a restart, a failover), or it could not be told.
     */
    onReconnect: (lost: Promise<boolean>) => void,
    /** Permits of a limit that Redis's decisions leave free now (`Settings.reserveOf`). */
    readonly reserve: (limit: number) => number = () => 0,
  ) {
    this.#redis = options.redis;
    this.window = new RedisWindow({
      redis: options.redis.client as RedisClient, // its port is this one (one port per client)
      prefix: options.prefix,
      limit: options.limit,
      windowMs: options.windowMs,
      blockMs: options.blockMs,
      ...(options.resolutionMs === undefined ? {} : { resolutionMs: options.resolutionMs }),
      ...(options.clock === undefined ? {} : { now: options.clock }),
    });
    this.#clock = options.clock;
    this.now = options.now;
    this.timeoutMs = options.breaker.timeoutMs;
    this.ledger = new CallLedger(options.perf, this.timeoutMs);
    // A call Redis admitted is kept at most 1 ms after its reply, for one window (the one in force: `update()` may lengthen it).
    this.offset = new ClockOffset(
      () => options.perf.now(),
      () => this.window.options.windowMs + 1,
    );
    this.polls = new PollWatch(options.perf);
    this.breaker = new Breaker(options.breaker, onState, this.polls);
    this.#onReconnect = onReconnect;
    this.#everReady = options.redis.ready;
    if (this.#everReady) this.#runId = this.#probeRunId();
    // A Cluster client stays ready while one master dies and comes back empty: report such a node.
    this.#unlisten = [options.redis.on('ready', this.#onReady), options.redis.on('node', this.#onNode)];
  }

  get isCluster(): boolean {
    return this.#redis.isCluster;
  }

  get state(): BreakerState {
    return this.breaker.state;
  }

  /** The client is connected now. */
  get ready(): boolean {
    return this.#redis.ready;
  }

  /** The client has been ready at least once. */
  get everReady(): boolean {
    return this.#everReady;
  }

  /** The client's port: what a feature sends its script calls through, inside {@link call}. */
  get port(): RedisPort {
    return this.#redis;
  }

  /** A call made now would be sent, not refused: the client is connected and the breaker takes calls (no trial running). */
  get accepting(): boolean {
    return this.breaker.accepting && this.#redis.ready;
  }

  /** True with an injected `clock`: both sides read it, so no offset is learnt and no deadline is sent. */
  get clockInjected(): boolean {
    return this.#clock !== undefined;
  }

  /**
   * The one way to Redis: runs `run` inside the breaker, given the local time it is sent at.
   * `decisions`: in the ledger as that many decisions until it settles (0 for `reset()`, `block()`, a
   * refund), after a check that the client is connected (else `NOT_READY`, nothing sent); or `'outside'`
   * the ledger (write-backs, heartbeats, the clock read), as they are not decisions and a batch of 200
   * calls would make a healthy Redis look slow to the gate. A stale reply teaches the clock offset.
   */
  call<T>(decisions: number | 'outside', run: (sentNow: LocalMs) => Promise<T>): Promise<T> {
    if (decisions === 'outside') return this.breaker.fire(() => run(this.now()));
    return this.breaker.fire(() => {
      if (!this.#redis.ready) return Promise.reject(NOT_READY);
      const ledger = this.ledger;
      if (ledger.callsInFlight === 0) this.polls.mark();
      const sequence = ledger.enter(decisions);
      const settle = (outcome: 'answered' | 'failed', error?: unknown): void => {
        ledger.settle(sequence, decisions, outcome);
        if (ledger.callsInFlight > 0) this.polls.mark();
        // Redis answers again while the breaker is open (a frozen Redis resumed, its queued calls now
        // stale): try it now. A reply error is an answer too; a connection error is not.
        if (this.breaker.state === 'open' && (outcome === 'answered' || repliedWith(error))) void this.probe();
      };
      const sentNow = this.now();
      const call = run(sentNow).catch((error: unknown) => this.#learnFromStale(error, sentNow));
      call.then(
        () => settle('answered'),
        (error: unknown) => settle('failed', error),
      );
      return call;
    });
  }

  /** The script's `nowMs` argument: the injected clock now, or '' (the script reads Redis's `TIME`). */
  nowArg(): number | '' {
    const clock = this.#clock;
    return clock === undefined ? '' : Math.floor(clock());
  }

  /** Removes the client listeners and the breaker's timers. */
  close(): void {
    this.breaker.shutdown();
    for (const unlisten of this.#unlisten) unlisten();
  }

  readonly #onReady = (): void => {
    const previous = this.#runId;
    const current = (this.#runId = this.#probeRunId());
    if (!this.#everReady) {
      this.#everReady = true;
      return;
    }
    void this.probe();
    this.#onReconnect(Promise.all([previous, current]).then(([before, now]) => before === undefined || now !== before));
  };

  /**
   * Asks Redis now whether it answers again while the breaker is open (a sign of life came, or `close()`
   * has calls to write): one `PING` within the deadline is the trial (see `Breaker.trial`), so that
   * Redis decides again soon after it answers again, however long the open period has grown. Outside
   * the ledger: it decides nothing. Resolves when the trial is over (at once when none is made).
   */
  probe(): Promise<void> {
    return this.breaker.trial(() => withDeadline(this.#redis.ping(), this.timeoutMs));
  }

  /**
   * The server's run id (`INFO server`), new at every start of a server: the same id after a
   * reconnect means the same process, with its data. Undefined on a Cluster (a node rejoining is
   * reported by '+node'), or when it does not answer within PROBE_MS. Outside the breaker and the
   * ledger: one command per connection, right after the client's own ready check got its answer.
   */
  #probeRunId(): Promise<string | undefined> {
    if (this.isCluster) return Promise.resolve(undefined);
    return withDeadline(this.#redis.info('server'), PROBE_MS).then(
      ([text]) => (text === undefined ? undefined : /^run_id:(\w+)/m.exec(text)?.[1]),
      () => undefined,
    );
  }

  /** A node joined a Cluster client's pool after start-up: it may be a master back without its data. */
  readonly #onNode = (): void => {
    if (this.#everReady) this.#onReconnect(Promise.resolve(true));
  };

  /**
   * The staleness guard of a Redis call sent at `now` (local clock): on Redis's clock (with the least
   * offset the round trips allow), a little inside the deadline, which also counts from the send (the
   * breaker's timer starts then). Not from when its calls were asked: this process may have been busy
   * in between (other handlers run before a coalesced batch leaves), which is not Redis's lateness.
   * Undefined with an injected clock (Redis cannot check it) or before the offset is known. The
   * bound is not widened for the time since the last round trip: after a long outage that would put
   * the deadline of the first calls in the past, and they would find Redis no use.
   */
  notAfter(now: number): number | undefined {
    const timeoutMs = this.timeoutMs;
    return this.#clock === undefined && this.offset.known
      ? now + this.offset.lowAtSample() + Math.max(timeoutMs - 2, timeoutMs / 2)
      : undefined;
  }

  /** Learns the clock offset from a round trip sent at `sentNow` (local clock) that read Redis's clock at `redisNowMs`. */
  learnOffset(sentNow: LocalMs, redisNowMs: RedisMs): void {
    if (this.#clock === undefined) this.offset.sample(sentNow, redisNowMs, this.now());
  }

  /**
   * Rethrows `error`, after learning the offset from it when it is a stale reply: Redis's clock may
   * have stepped past the deadlines (a failover to a host whose clock is ahead), and without this
   * every later call would be stale too.
   */
  #learnFromStale(error: unknown, sentNow: LocalMs): never {
    if (error instanceof StaleReplyError) this.learnOffset(sentNow, error.redisNowMs);
    throw error;
  }
}
