import CircuitBreaker from 'opossum';
import { ErrorCode, isResilimitError } from '../base/errors.js';
import type { ResolvedBreakerOptions } from '../options/options.js';
import type { PollWatch } from './PollWatch.js';
import { Deadlines } from './Deadlines.js';

/** The breaker's state: `closed` (Redis decides), `open` (nothing is sent), `half-open` (one trial call). */
export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * The rule for what a breaker counts as a failure: a deadline missed, or an error that says Redis
 * could not answer (`ERR_RESILIMIT_REDIS_UNAVAILABLE`, see `isRedisUnavailable`). Anything else — a
 * reply about the request, a bug of ours — is not Redis's health and does not move the breaker.
 */
export function countsAsFailure(error: unknown): boolean {
  if (isResilimitError(error)) return error.code === ErrorCode.REDIS_UNAVAILABLE;
  return (error as { code?: unknown } | null)?.code === 'ETIMEDOUT';
}

/** True for opossum's own rejection of a call while open (or while the half-open trial runs). */
export function isOpenRejection(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'EOPENBREAKER';
}

/** True for opossum's rejection of a call that missed its deadline. */
export function isTimeout(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'ETIMEDOUT';
}

type Action = (run: () => Promise<unknown>) => Promise<unknown>;

/**
 * The one place opossum is used: a breaker per limiter, with critical-path settings (a deadline in
 * tens of milliseconds, a volume threshold, no percentiles or snapshots) and an open period that
 * doubles after every failed half-open trial, up to `maxResetTimeoutMs`, and returns to
 * `resetTimeoutMs` once the breaker closes. `forceOpen()` holds it open until `forceClose()`.
 */
export class Breaker {
  readonly #breaker: CircuitBreaker<[() => Promise<unknown>], unknown>;
  readonly #options: ResolvedBreakerOptions;
  #forced = false;
  /** The trial of {@link trial} running now: it resolves when the trial is over. */
  #trial: Promise<void> | undefined;
  #state: BreakerState = 'closed';
  readonly #onChange: (state: BreakerState, previous: BreakerState) => void;
  /** Every call's deadline (`Deadlines`: shown to the poll watch at each missed one and the poll after it). */
  readonly #deadlines: Deadlines;

  constructor(options: ResolvedBreakerOptions, onChange: (state: BreakerState, previous: BreakerState) => void, polls?: PollWatch) {
    this.#options = options;
    this.#onChange = onChange;
    this.#deadlines = new Deadlines(options.timeoutMs, polls);
    const action: Action = (run) => run();
    this.#breaker = new CircuitBreaker(action, {
      // The deadline is ours (see Deadlines): opossum's timer would miss replies that lie unread
      // while this process is busy. Every call still has one: a hung trial cannot wedge the breaker.
      timeout: false,
      errorThresholdPercentage: options.errorThresholdPercentage,
      volumeThreshold: options.volumeThreshold,
      resetTimeout: options.resetTimeoutMs,
      rollingCountTimeout: options.rollingWindowMs,
      rollingCountBuckets: 10,
      // Off: with them on, every failure sorts every latency sample in the window (measured: ms of
      // blocked event loop per failure under load), and a timer does the same each bucket.
      rollingPercentilesEnabled: false,
      enableSnapshots: false,
      errorFilter: (error: unknown) => !countsAsFailure(error),
    } as CircuitBreaker.Options<[() => Promise<unknown>]>);
    this.#breaker.on('open', () => this.#set('open'));
    this.#breaker.on('halfOpen', () => {
      if (this.#forced) {
        // Held open: no trial, and no doubling of the open period.
        this.#breaker.open();
        return;
      }
      // Set before the trial: if it fails, the next open period uses the doubled value.
      const next = Math.min(this.#tunables.resetTimeout * 2, this.#options.maxResetTimeoutMs);
      this.#tunables.resetTimeout = next;
      this.#set('half-open');
    });
    this.#breaker.on('close', () => {
      this.#tunables.resetTimeout = this.#options.resetTimeoutMs;
      this.#set('closed');
    });
  }

  /** The current state (`open` while forced open). */
  get state(): BreakerState {
    return this.#state;
  }

  /** True while a trial of {@link trial} runs (the breaker is half-open for it). */
  get trying(): boolean {
    return this.#trial !== undefined;
  }

  /** True while held open by {@link forceOpen}. */
  get forced(): boolean {
    return this.#forced;
  }

  /** The open period that the next opening will use, in ms. */
  get resetTimeoutMs(): number {
    return this.#tunables.resetTimeout;
  }

  /** True when a call may be fired now: closed, or half-open with the trial slot possibly free. */
  get accepting(): boolean {
    return this.#state !== 'open';
  }

  /**
   * Runs `run` inside the breaker. Rejects at once with `EOPENBREAKER` while open (and for every
   * caller but the one trial while half-open), with `ETIMEDOUT` after `timeoutMs`.
   */
  fire<T>(run: () => Promise<T>): Promise<T> {
    return this.#breaker.fire(() => this.#deadlines.race(run())) as Promise<T>;
  }

  /**
   * Redis gave a sign of life while the breaker is open (the client reconnected, a late reply came
   * in), or `close()` has calls to write: runs `probe` now as the one trial, instead of waiting out the
   * open period, which may have doubled to `maxResetTimeoutMs`. The breaker is half-open meanwhile, as
   * for opossum's own trial (every other call is refused at once), then closed when it resolves, or open
   * again (opossum's own trial still comes when due). One trial at a time, none while forced open.
   * Resolves when the trial (this one, or the one already running) is over; at once when none is made.
   */
  trial(probe: () => Promise<unknown>): Promise<void> {
    if (this.#trial !== undefined) return this.#trial;
    if (this.#state !== 'open' || this.#forced) return Promise.resolve();
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#trial = promise; // set before the state: a stateChange listener reads `trying`
    try {
      this.#set('half-open');
    } catch (error) {
      this.#trial = undefined; // a stateChange listener threw: no trial, and the next sign of life may try
      resolve();
      throw error;
    }
    probe()
      .then(
        () => {
          this.#trial = undefined;
          if (this.#state === 'half-open') this.#breaker.close();
        },
        () => {
          this.#trial = undefined;
          if (this.#state === 'half-open' && this.#breaker.opened) this.#set('open');
        },
      )
      .finally(resolve);
    return promise;
  }

  /** Opens the breaker now, as the rule for stalls does (it then half-opens after the open period). */
  open(): void {
    this.#breaker.open();
  }

  /** Opens the breaker and holds it open, with no trial, until {@link forceClose}. */
  forceOpen(): void {
    this.#forced = true;
    this.#breaker.open();
    this.#set('open');
  }

  /** Closes the breaker (also a forced one) and resets the open period. */
  forceClose(): void {
    this.#forced = false;
    this.#breaker.close();
    this.#tunables.resetTimeout = this.#options.resetTimeoutMs;
    this.#set('closed');
  }

  /** Clears opossum's timers and listeners, and the deadlines' unless a call still waits for its verdict. The breaker answers nothing afterwards. */
  shutdown(): void {
    this.#breaker.shutdown();
    this.#deadlines.stop();
  }

  /** opossum reads `options.resetTimeout` each time it opens; its types do not declare `options`. */
  get #tunables(): { resetTimeout: number } {
    return (this.#breaker as unknown as { options: { resetTimeout: number } }).options;
  }

  #set(state: BreakerState): void {
    if (this.#forced && state !== 'open') return;
    const previous = this.#state;
    if (previous === state) return;
    this.#state = state;
    this.#onChange(state, previous);
  }
}
