import { setTimeout as sleep } from 'node:timers/promises';
import { LRUCache } from 'lru-cache';
import type { CallId, SentId } from '../base/call.js';
import type { LocalTier } from '../local/LocalTier.js';
import type { ResolvedLimiterOptions } from '../options/options.js';
import type { PendingRefunds } from './PendingRefunds.js';
import { groupOf, Journal, PartialWriteError, reseed, type ReconcileResult } from './Journal.js';
import type { RedisTier } from '../redis/RedisTier.js';
import { readClock, writeBatch } from './writeBack.js';

/**
 * Write-back passes: never two at once. `idle` remembers when the last pass failed (perf clock;
 * `-Infinity` when the last one did not), which is meaningless while one runs.
 */
type Passes = { readonly kind: 'idle'; readonly failedAt: number } | { readonly kind: 'running'; readonly done: Promise<void> };

const IDLE: Passes = { kind: 'idle', failedAt: Number.NEGATIVE_INFINITY };

/**
 * How long `close()` gives Redis to take what it is missing, in breaker deadlines (`breaker.timeoutMs`;
 * 200 ms by default): a trial `PING`, the read of Redis's clock and the journal's writes take a round
 * trip each, and a Redis that has just come back (a frozen one resumed) may miss a first deadline while
 * it works off the commands sent to it meanwhile.
 */
export const CLOSE_DEADLINES = 4;

/** The most `close()` waits for that, whatever the deadline: well within a deploy's grace period (30 s on Kubernetes). */
export const CLOSE_MAX_MS = 5_000;

/** What recovery needs of the limiter's options. */
type RecoveryOptions = Pick<
  ResolvedLimiterOptions,
  'prefix' | 'clock' | 'now' | 'perf' | 'maxPending' | 'maxPendingBytes' | 'windowMs' | 'breaker'
>;

/** What a recovery tells its limiter. */
export type RecoveryReport = {
  /** A pass ended. */
  reconciled(result: ReconcileResult): void;
  /**
   * Calls the journal dropped, and in all: `'full'`, past its bounds since the last report (at most one
   * report per event-loop turn); `'closed'`, those Redis had not taken when the limiter closed.
   */
  dropped(calls: number, total: number, reason: 'full' | 'closed'): void;
  /** A catch-up ended. */
  caughtUp(): void;
  /** A Redis decision suggests Redis lost this instance's calls of a key (see `OneCall.settle`): check for a wider loss. */
  suspected(): void;
};

/** The parts a recovery works with (see the fields of {@link Recovery}). */
export type RecoveryParts = Pick<Recovery, 'tier' | 'local' | 'settings' | 'closed' | 'report' | 'refunds'>;

/**
 * Recovery: what makes the limit hold after Redis could not answer. It owns, and alone changes:
 * - the journal ({@link Journal}) of the calls the local tier admitted while Redis could not
 *   answer, and of the warm windows' calls to re-seed a Redis that may have lost its data;
 * - the write-back passes (one at a time) and the catch-up after an outage or a reconnect: until one
 *   pass is done, every call is answered locally (reason `'reconciling'`), so that a Redis that
 *   missed those calls cannot grant a fresh limit on top of them. A pass writes the journal, then any
 *   re-seed, then the refunds Redis could not make when asked ({@link PendingRefunds}, whose calls
 *   the journal and the re-seed then cannot write back after them);
 * - the totals of what was written back.
 *
 * Invariant: a journalled call holds its key (see {@link holds}) until its write-back is sent; Redis
 * runs one connection's commands in order, so a decision sent after it is decided with it.
 * The rule that turns a hold into a `'reconciling'` answer is in `Gate.ts`.
 */
export class Recovery {
  readonly journal: Journal;
  readonly totals = { written: 0, expired: 0, present: 0 };
  #passes: Passes = IDLE;
  /** After a data loss: the groups of the warm windows not yet re-seeded (they hold their keys). */
  readonly #reseed = new Set<string>();
  /** Whether Redis lost data at the last reconnect, until a pass has read it. */
  #lossCheck: Promise<boolean> | undefined;
  /** The catch-up running now: set from its start until its last pass ends. */
  #catchingUp: Promise<void> | undefined;
  /**
   * Redis's clock must be read before the next write-back: set when a catch-up starts (after an
   * outage or a reconnect, no decision has taught the clock offset, and either clock may have
   * stepped meanwhile), cleared once a pass has read it. Other passes follow a decision, whose round
   * trip taught the offset, or a failed pass; they send a held key's calls before they return.
   */
  #offsetStale = false;
  /**
   * Calls answered locally after their Redis call was sent and went unanswered (a timeout, a lost
   * connection), as `<key>\0<member>`: Redis may have run it and hold the call, so a refund of it goes
   * to Redis too (`Refunds.refund`), even before the journal writes it. The most recent 10,000.
   */
  readonly #unanswered = new LRUCache<string, true>({ max: 10_000 });
  readonly #options: RecoveryOptions;
  readonly #now: () => number;

  readonly tier: RedisTier;
  readonly local: LocalTier;
  /** The window length of `limit()` in force. */
  readonly settings: { readonly windowMs: number };
  readonly closed: () => boolean;
  readonly report: RecoveryReport;
  /** Refunds Redis could not make when asked: written by every pass, last. */
  readonly refunds: PendingRefunds;

  constructor(options: RecoveryOptions, parts: RecoveryParts) {
    ({
      tier: this.tier,
      local: this.local,
      settings: this.settings,
      closed: this.closed,
      report: this.report,
      refunds: this.refunds,
    } = parts);
    this.#options = options;
    this.#now = options.now;
    this.journal = new Journal(options.maxPending, options.maxPendingBytes, (calls) => {
      if (this.#dropped === 0) setImmediate(this.#reportDropped).unref();
      this.#dropped += calls;
    });
  }

  /** Calls dropped since the last report. */
  #dropped = 0;

  readonly #reportDropped = (): void => {
    const calls = this.#dropped;
    this.#dropped = 0;
    this.report.dropped(calls, this.journal.dropped, 'full');
  };

  /** True when nothing of this instance's is missing from Redis: nothing journalled, no re-seed or loss check waiting, no pass or catch-up running. */
  get clean(): boolean {
    // A running pass may hold batches it has not sent yet (the journal hands them over at once).
    // Pending refunds do not count: Redis has more than this instance's calls, never less.
    return !this.#owes() && this.#catchingUp === undefined && this.#passes.kind === 'idle';
  }

  /** True while a pass or a catch-up runs. */
  get writing(): boolean {
    return this.#passes.kind === 'running' || this.#catchingUp !== undefined;
  }

  /** True from the start of a catch-up until its last pass ended. */
  get catchingUp(): boolean {
    return this.#catchingUp !== undefined;
  }

  /**
   * True while calls of this group (a key, or a key and window of `limitAll()`) are not yet sent to
   * Redis: journalled calls, or, after a data loss, the warm window's calls of the group.
   */
  holds(group: string): boolean {
    return this.journal.holds(group) || (this.#reseed.size !== 0 && this.#reseed.has(group));
  }

  /** When the last pass failed (perf clock), `-Infinity` when it did not; undefined while a pass runs. */
  get passFailedAt(): number | undefined {
    return this.#passes.kind === 'idle' ? this.#passes.failedAt : undefined;
  }

  /** Forgets a group's journalled calls and its pending re-seed (`reset()`): they will not be written. */
  forget(group: string): void {
    this.journal.forget(group);
    this.#reseed.delete(group);
  }

  /**
   * Forgets one journalled call of `limit()`'s window (a refund): see `Journal.forgetCall`. Its
   * key's pending re-seed stays: the warm window no longer holds the call.
   */
  forgetCall(key: string, matches: (id: CallId) => boolean): { cost: number; sent: boolean } | undefined {
    return this.journal.forgetCall(key, matches);
  }

  /** Journals a call the local tier admitted, to be written into Redis. */
  /** The call `member` of `key` was answered locally, though Redis may hold it (see `#unanswered`). */
  markUnanswered(key: string, member: string): void {
    this.#unanswered.set(`${key}\0${member}`, true);
  }

  /** Whether Redis may hold the call `member` of `key` though it was answered locally; forgets it. */
  takeUnanswered(key: string, member: string): boolean {
    return this.#unanswered.size !== 0 && this.#unanswered.delete(`${key}\0${member}`);
  }

  add(key: string, at: number, cost: number, id: SentId, windowMs?: number): void {
    this.journal.add(key, at, cost, id, windowMs);
  }

  /**
   * The client connected again. Catch up at once (calls are answered locally until it is done), and
   * when `lost` says Redis may have lost data (a restart, a failover to a server that missed the last
   * writes), re-seed it from the warm windows, which hold this instance's calls of the current window
   * with their ids (re-adding a call Redis still has changes nothing). The re-seed is read from the
   * windows as it is written, never copied into the journal: it cannot take the room of a call Redis
   * never saw.
   */
  readonly onReconnect = (lost: Promise<boolean>): void => {
    if (this.closed()) return;
    // A check not yet read (the breaker was held open) still counts: lost once is lost.
    const unread = this.#lossCheck;
    this.#lossCheck = unread === undefined ? lost : Promise.all([unread, lost]).then(([a, b]) => a || b);
    this.catchUp();
  };

  /** Starts a pass unless one runs or nothing waits (after a Redis decision, or for a held key). */
  schedule(): void {
    if (!this.#hasWork() || this.closed()) return;
    void this.#pass();
  }

  #hasWork(): boolean {
    return this.#owes() || this.refunds.size !== 0;
  }

  /** Calls of this instance's that Redis may be missing: journalled, to re-seed, or a loss not yet checked. */
  #owes(): boolean {
    return this.journal.size !== 0 || this.#reseed.size !== 0 || this.#lossCheck !== undefined;
  }

  /**
   * Writes the journal (and the refunds kept) now if the breaker is closed, after the catch-up running
   * now; resolves when done. A pass already running may have started before what is pending now: the
   * pass after it is awaited too.
   */
  async reconcile(): Promise<void> {
    await this.#catchingUp;
    for (let pass = 0; pass < 2; pass += 1) {
      this.schedule();
      if (this.#passes.kind !== 'running') return;
      await this.#passes.done;
    }
  }

  /**
   * Before `close()`: writes what Redis is missing of this instance's (the journal, a re-seed, the
   * pending refunds) if it takes it within {@link CLOSE_DEADLINES} breaker deadlines. With the breaker
   * open it asks Redis at once (a `PING` as the trial: `RedisTier.probe`) rather than wait out the open
   * period, and again a deadline after an attempt that wrote nothing. A pass under way when the time is
   * up runs on (see {@link settled}). No wait while the breaker is forced open, nor with a client never
   * ready: Redis cannot take anything then.
   */
  async drain(): Promise<void> {
    if (!this.tier.everReady) return;
    const { timeoutMs } = this.#options.breaker;
    // Not unref'd, unlike the limiter's own timers: close() is the caller's work in progress, and an
    // unref'd bound could let the process exit with the journal neither written nor reported.
    const stop = new AbortController();
    const { signal } = stop;
    let over = false;
    const end = sleep(Math.min(CLOSE_DEADLINES * timeoutMs, CLOSE_MAX_MS), undefined, { signal }).then(
      () => (over = true),
      () => undefined,
    );
    const within = (work: Promise<unknown>): Promise<unknown> => Promise.race([work, end]);
    try {
      while (!over && this.#hasWork() && !this.tier.breaker.forced) {
        const before = this.#done() + this.refunds.written;
        await within(this.tier.probe().then(() => this.reconcile()));
        // Nothing written: Redis did not answer (or the client is not connected). Ask again a deadline later.
        if (this.#done() + this.refunds.written === before) await within(sleep(timeoutMs, undefined, { signal }).catch(() => undefined));
      }
    } finally {
      stop.abort(); // clears both timers
    }
  }

  /** After `close()`: drops the journalled calls Redis has not taken (see {@link drain}) and reports them. */
  dropUnwritten(): void {
    const calls = this.journal.dropAll();
    if (calls !== 0) this.report.dropped(calls, this.journal.dropped, 'closed');
  }

  /** Resolves once no pass runs. */
  async settled(): Promise<void> {
    if (this.#passes.kind === 'running') await this.#passes.done;
  }

  /** Writes the journal (and a re-seed) before Redis decides again (see the class). */
  catchUp(): void {
    if (!this.#hasWork() || this.closed() || this.#catchingUp !== undefined) return;
    this.#offsetStale = true;
    this.#catchingUp = this.#catchUpPasses().finally(() => {
      this.#catchingUp = undefined;
      this.report.caughtUp();
    });
  }

  async #catchUpPasses(): Promise<void> {
    // Calls answered locally during a pass join the journal: a few more short passes take them too.
    for (let pass = 0; pass < 4 && this.#hasWork() && !this.closed(); pass += 1) {
      const before = this.#done();
      await this.#pass();
      if (this.#done() === before || this.tier.state !== 'closed') return; // failed: the rest waits for Redis
    }
  }

  #done(): number {
    return this.totals.written + this.totals.present + this.totals.expired;
  }

  /**
   * The pass running now, or a new one. Calls journalled (and refunds kept) while a pass ran are
   * taken by another pass right after it, unless it failed (they wait for a trigger: a Redis decision, a call of a held key
   * at most every `HELD_RETRY_MS`, the breaker closing).
   */
  #pass(): Promise<void> {
    if (this.#passes.kind === 'running') return this.#passes.done;
    const done = this.#write().then(
      (outcome) => {
        this.#passes = outcome === 'failed' ? { kind: 'idle', failedAt: this.#options.perf.now() } : IDLE;
        if (outcome === 'written' && this.#hasWork() && this.tier.state === 'closed') this.schedule();
      },
      (error: unknown) => {
        this.#passes = IDLE;
        throw error;
      },
    );
    this.#passes = { kind: 'running', done };
    return done;
  }

  /**
   * Writes the journalled calls into Redis (same ids, original times, only those still in the
   * window), after reading Redis's clock when the offset may be stale (see `RedisTier.readClock`).
   * Skipped while the breaker is open or the client not connected.
   */
  async #write(): Promise<'written' | 'failed' | 'skipped'> {
    const state = this.tier.state;
    if (state === 'open' || !this.tier.ready) return 'skipped';
    const lost = this.#lossCheck;
    if (lost !== undefined) {
      this.#lossCheck = undefined;
      if (await lost) for (const call of this.local.calls()) this.#reseed.add(groupOf(call));
    }
    if (this.#offsetStale && this.#options.clock === undefined) {
      try {
        await readClock(this.tier);
      } catch {
        this.report.reconciled({ written: 0, expired: 0, present: 0, remaining: this.journal.size });
        return 'failed';
      }
      this.#offsetStale = false;
    }
    const windowMs = this.settings.windowMs;
    const write = writeBatch(this.tier, this.#options.prefix, windowMs);
    let result: ReconcileResult;
    let failed = false;
    try {
      // Half-open lets one call through: the first batch alone, as the trial (unless the clock's read was).
      const concurrency = this.tier.state === 'closed' ? 8 : 1;
      const now = this.#now();
      result = await this.journal.flush(now - windowMs, concurrency, write, now);
    } catch (error) {
      failed = true;
      result = error instanceof PartialWriteError ? error.partial : { written: 0, expired: 0, present: 0, remaining: this.journal.size };
    }
    if (this.#reseed.size !== 0 && !failed && this.tier.state !== 'open') {
      const seeded = await reseed(this.local.calls(), this.#reseed, this.tier.state === 'half-open' ? 1 : 8, write);
      failed = seeded.failed;
      result.written += seeded.written;
      result.expired += seeded.expired;
      result.present += seeded.present;
    }
    if (this.refunds.size !== 0 && !failed && this.tier.state !== 'open') {
      failed = !(await this.refunds.write(this.tier.state === 'half-open' ? 1 : 8));
    }
    this.totals.written += result.written;
    this.totals.expired += result.expired;
    this.totals.present += result.present;
    this.report.reconciled(result);
    return failed ? 'failed' : 'written';
  }
}
