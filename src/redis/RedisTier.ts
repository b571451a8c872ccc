import type { RedisClient } from '../client/clientType.js';
import type { RedisPort } from '../client/port.js';
import { Breaker, isOpenRejection, isTimeout, type BreakerState } from './Breaker.js';
import { withDeadline } from '../client/withDeadline.js';
import { ClockOffset } from './ClockOffset.js';
import { ErrorCode, isResilimitError, ResilimitError } from '../base/errors.js';
import { NOT_READY, redisCallError } from './failures.js';
import { decideBatch } from '../base/internal.js';
import type { CheckedItem } from './allWindows.js';
import type { ResolvedLimiterOptions } from '../options/options.js';
import { PollWatch } from './PollWatch.js';
import { RedisWindow, type BatchCall, type BatchOutcome } from './RedisWindow.js';
import type { LocalMs, RedisKey, RedisMs } from '../base/time.js';
import { StaleReplyError, type Script } from './scripts/script.js';
import { type BeatMember, heartbeatArgs, heartbeatScript, readBeat } from './scripts/heartbeat.js';
import { readLimitAll, type GroupReply } from './scripts/limitAll.js';
import type { WriteBackReply } from '../base/wire.js';
import type { BeatOp, BeatReply, BeatTimes } from './scripts/heartbeat.js';

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
 * The Redis tier as the limiter uses it: every Redis call goes out through here, inside the breaker.
 *
 * It owns, and alone changes:
 * - the breaker (the one place opossum is used is `Breaker.ts`);
 * - the call ledger, kept by {@link fire}: the outstanding calls' start times in call order, the
 *   decisions they carry, when the last one settled and the average latency of those answered in
 *   time. Invariant: `outstandingDecisions` is the sum of the decisions of the calls in the ledger,
 *   and a call leaves it when it settles, a late one included (a timed-out command still runs).
 *   It marks `polls` (`PollWatch`) each time the wait for Redis starts again (see `PollWatch.mark`);
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
  readonly #now: () => LocalMs;
  readonly #perf: { now(): number };
  /** The breaker's deadline on every call, ms. */
  readonly timeoutMs: number;
  readonly #outstanding = new Map<number, number>();
  #sequence = 0;
  #outstandingDecisions = 0;
  #lastReplyAt = 0;
  #latencyMs = 1;
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
    this.#now = options.now;
    this.#perf = options.perf;
    this.timeoutMs = options.breaker.timeoutMs;
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

  /** When the oldest outstanding call was sent (perf clock), or undefined when none is. */
  get oldestCallAt(): number | undefined {
    return this.#outstanding.size === 0 ? undefined : (this.#outstanding.values().next().value as number);
  }

  /** When the last call settled (perf clock), 0 before any. */
  get lastReplyAt(): number {
    return this.#lastReplyAt;
  }

  /** Redis calls in the ledger not yet settled (timed-out ones still running included). */
  get callsInFlight(): number {
    return this.#outstanding.size;
  }

  /** Decisions in calls not yet settled (timed-out ones still running included). */
  get outstandingDecisions(): number {
    return this.#outstandingDecisions;
  }

  /** The average latency of recent decision calls answered within the deadline, ms. */
  get latencyMs(): number {
    return this.#latencyMs;
  }

  /**
   * Runs one Redis call inside the breaker, in the ledger as `decisions` decisions until it settles.
   * Rejects with `NOT_READY`, sending nothing, while the client is not connected.
   */
  fire<T>(decisions: number, run: () => Promise<T>): Promise<T> {
    return this.breaker.fire(() => {
      if (!this.#redis.ready) return Promise.reject(NOT_READY);
      const sequence = ++this.#sequence;
      const sentAt = this.#perf.now();
      if (this.#outstanding.size === 0) this.polls.mark();
      this.#outstanding.set(sequence, sentAt);
      this.#outstandingDecisions += decisions;
      const settle = (answered: boolean, error?: unknown): void => {
        const at = this.#perf.now();
        this.#outstanding.delete(sequence);
        this.#outstandingDecisions -= decisions;
        this.#lastReplyAt = at;
        if (this.#outstanding.size > 0) this.polls.mark();
        // A late reply says how slow Redis was, not how slow it is: the breaker answered that call already.
        const latency = at - sentAt;
        if (answered && decisions > 0 && latency <= this.timeoutMs) this.#latencyMs += (latency - this.#latencyMs) * 0.05;
        // Redis answers again while the breaker is open (a frozen Redis resumed, its queued calls now
        // stale): try it now. A reply error is an answer too; a connection error is not.
        if (this.breaker.state === 'open' && (answered || repliedWith(error))) void this.probe();
      };
      const call = run();
      call.then(
        () => settle(true),
        (error: unknown) => settle(false, error),
      );
      return call;
    });
  }

  /**
   * Decides calls of `limit()` (or peeks, at cost 0) in one script call: the window's batch, or `how` (a hot key's lease, told
   * the deadline and the local time it is sent at). Its staleness deadline counts from the send (see {@link #notAfter}).
   */
  async send(
    calls: readonly BatchCall[],
    how = (notAfter: number | undefined, _sentNow: LocalMs) => this.window[decideBatch](calls, notAfter, this.reserve),
  ): Promise<BatchOutcome[]> {
    let sentNow = 0 as LocalMs;
    const decisions = await this.fire(calls.length, () => {
      sentNow = this.#now();
      return how(this.#notAfter(sentNow), sentNow).catch((error: unknown) => this.#learnFromStale(error, sentNow));
    });
    // Every decision of a batch tells the same time (a batch of calls Redis could not decide teaches nothing).
    for (const d of decisions) {
      if (d instanceof ResilimitError) continue;
      this.#learnOffset(sentNow, d.nowMs);
      break;
    }
    return decisions;
  }

  /** One script call for a group of `limitAll()`'s windows sharing a slot (a give: `takenMs`, its take's nowMs). */
  sendAll(op: 'take' | 'check', group: readonly CheckedItem[], id: string): Promise<GroupReply>;
  sendAll(op: 'give', group: readonly CheckedItem[], id: string, takenMs: RedisMs): Promise<unknown>;
  sendAll(op: 'take' | 'give' | 'check', group: readonly CheckedItem[], id: string, takenMs?: RedisMs): Promise<unknown> {
    return this.fire(group.length, () => {
      const clock = this.#clock;
      const sentNow = this.#now();
      // A late give-back only removes what its take added: no staleness guard.
      const notAfter = op === 'give' ? undefined : this.#notAfter(sentNow);
      const nowArg = clock === undefined ? '' : Math.floor(clock());
      const notAfterArg = notAfter === undefined ? '' : Math.ceil(notAfter);
      const { script, args } = this.window.model.group({ op, items: group, id, nowArg, notAfterArg, reserve: this.reserve, takenMs });
      return this.#redis
        .run(
          script,
          group.map((item) => item.redisKey),
          args,
        )
        .then(
          (reply) => {
            if (op === 'give') return reply;
            const read = readLimitAll(reply, group.length, script);
            this.#learnOffset(sentNow, read.nowMs);
            return read;
          },
          (error: unknown) => Promise.reject(redisCallError(error)),
        )
        .catch((error: unknown) => this.#learnFromStale(error, sentNow));
    });
  }

  /**
   * Runs a Redis call of `name` (`'reset()'`, `'block()'`) inside the breaker, in the ledger with no
   * decisions. `otherwise`: what the caller did all the same, for the error's message.
   * @throws {ResilimitError} `ERR_RESILIMIT_REDIS_REPLY` as Redis gave it; `ERR_RESILIMIT_REDIS_UNAVAILABLE`
   *   saying why for anything else (the breaker open, the deadline, the connection).
   */
  async command<T>(name: string, otherwise: string, run: () => Promise<T>): Promise<T> {
    try {
      return await this.fire(0, run);
    } catch (error) {
      if (isResilimitError(error) && error.code === ErrorCode.REDIS_REPLY) throw error;
      const why = isOpenRejection(error)
        ? 'the breaker is open'
        : isTimeout(error)
          ? `no answer within ${this.timeoutMs} ms`
          : error instanceof Error
            ? error.message
            : String(error);
      throw new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, `${name} could not reach Redis (${why}): ${otherwise}`, { cause: error });
    }
  }

  /**
   * Writes a batch of journalled calls into `redisKey` with `script` (the model's write-back), by source (`EVAL`: a
   * decision sent right behind it must run after it, and a `NOSCRIPT` retry would go out behind). Inside the breaker, outside
   * the ledger: a batch of up to 200 calls would make a healthy Redis look slow to the gate; the journal bounds write-backs.
   */
  writeBack(redisKey: RedisKey, args: readonly (string | number)[], script: Script): Promise<WriteBackReply> {
    return this.breaker.fire(async () => {
      try {
        return (await this.#redis.eval(script, [redisKey], args)) as WriteBackReply;
      } catch (error) {
        throw redisCallError(error);
      }
    });
  }

  /**
   * Reads Redis's clock (`TIME`) and learns the clock offset from the round trip, before a
   * write-back moves local times onto Redis's clock: it comes after an outage, before any decision,
   * and either clock may have stepped meanwhile. Inside the breaker (half-open, it is the trial),
   * outside the ledger, as write-backs are. Nothing with an injected clock (both sides use it), nor
   * on a Cluster: it has no one clock, and `TIME` goes to any node, a dead one included (every
   * catch-up then failed at random while one master was down).
   */
  async readClock(): Promise<void> {
    if (this.#clock !== undefined || this.isCluster) return;
    await this.breaker.fire(async () => {
      const sentNow = this.#now();
      const [seconds, micros] = await this.#redis.time().catch((error: unknown) => Promise.reject(redisCallError(error)));
      this.#learnOffset(sentNow, (Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)) as RedisMs);
    });
  }

  /**
   * One heartbeat of the instance count (see `InstanceCounter`). Inside the breaker, outside the
   * ledger: a beat is not a decision, comes once per `heartbeatMs` (more often while instances are
   * unrecovered), and must not be sent while the breaker is open (it would be the trial call a
   * decision should make). It carries the staleness deadline of a decision asked now: a beat that a
   * frozen Redis runs late, while this instance answers locally, must not say it is back.
   * `since` (local clock) is moved onto Redis's clock at the most it can be ahead: an instance that
   * beat before it never counts as fresh. With an injected `clock` neither bound is sent (the script
   * reads Redis's clock). `member` is this instance's id and its process's token ('' when the id is
   * unique), `times` says how long a beat counts, `usedClaim` is the claim this instance answers on
   * now (see `lua/heartbeat.lua`).
   */
  beat(key: string, member: BeatMember, times: BeatTimes, op: BeatOp, since: number | undefined, usedClaim: number): Promise<BeatReply> {
    if (!this.breaker.accepting || !this.#redis.ready) return Promise.reject(NOT_READY);
    const real = this.#clock === undefined;
    const notAfter = this.#notAfter(this.#now());
    const sinceArg = real && since !== undefined ? Math.ceil(this.offset.redisOf(since as LocalMs)) : ''; // the counter's times are local
    const args = heartbeatArgs(member.id, times, op, sinceArg, notAfter === undefined ? '' : Math.ceil(notAfter), usedClaim, member.token);
    return this.breaker.fire(() =>
      this.#redis.run(heartbeatScript, [key], args).then(readBeat, (error: unknown) => Promise.reject(redisCallError(error))),
    );
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
  #notAfter(now: number): number | undefined {
    const timeoutMs = this.timeoutMs;
    return this.#clock === undefined && this.offset.known
      ? now + this.offset.low(false) + Math.max(timeoutMs - 2, timeoutMs / 2)
      : undefined;
  }

  /** Learns the clock offset from a round trip sent at `sentNow` (local clock) that read Redis's clock at `redisNowMs`. */
  #learnOffset(sentNow: LocalMs, redisNowMs: RedisMs): void {
    if (this.#clock === undefined) this.offset.sample(sentNow, redisNowMs, this.#now());
  }

  /**
   * Rethrows `error`, after learning the offset from it when it is a stale reply: Redis's clock may
   * have stepped past the deadlines (a failover to a host whose clock is ahead), and without this
   * every later call would be stale too.
   */
  #learnFromStale(error: unknown, sentNow: LocalMs): never {
    if (error instanceof StaleReplyError) this.#learnOffset(sentNow, error.redisNowMs);
    throw error;
  }
}
