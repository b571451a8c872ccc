import { ErrorCode, ResilimitError } from '../base/errors.js';
import { LocalWindow } from './LocalWindow.js';
import { MAX_INT } from '../options/options.js';
import type { PendingCall } from '../base/wire.js';

/** The most window lengths one limiter's `limitAll()` may use (each has its own local window). */
const MAX_WINDOWS = 64;

/**
 * The local tier of one limiter: the window of `limit()`, and one window per window length that
 * `limitAll()` used (its limits vary per call, so those windows take the limit with each decision).
 * They answer while Redis cannot, and are kept warm with the calls Redis admitted while it can.
 * Bounded: `maxKeys` keys per window, at most MAX_WINDOWS windows for `limitAll()`.
 */
export class LocalTier {
  /** The window of `limit()`. */
  readonly main: LocalWindow;
  readonly #byWindow = new Map<number, LocalWindow>();
  readonly #maxKeys: number;
  readonly #now: () => number;

  constructor(limit: number, windowMs: number, maxKeys: number, now: () => number) {
    this.#maxKeys = maxKeys;
    this.#now = now;
    this.main = new LocalWindow({ limit, windowMs, maxKeys, now });
  }

  /**
   * The window of one of `limitAll()`'s window lengths, made on first use.
   * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a window length past the MAX_WINDOWS-th.
   */
  forWindow(windowMs: number): LocalWindow {
    let window = this.#byWindow.get(windowMs);
    if (window === undefined) {
      if (this.#byWindow.size >= MAX_WINDOWS) {
        throw new ResilimitError(
          ErrorCode.INVALID_OPTION,
          `limitAll() on one limiter takes at most ${MAX_WINDOWS} different windowMs values (each has its own local window); got a ${MAX_WINDOWS + 1}th: ${windowMs}`,
        );
      }
      window = new LocalWindow({ limit: MAX_INT, windowMs, maxKeys: this.#maxKeys, now: this.#now });
      this.#byWindow.set(windowMs, window);
    }
    return window;
  }

  /** See `LocalWindow.lost`: for every window. */
  lost(lastSeenAt: number, detectMs: number): void {
    this.main.lost(lastSeenAt, detectMs);
    // Told with every local answer: no iterator made while limitAll() has no window.
    if (this.#byWindow.size !== 0) for (const window of this.#byWindow.values()) window.lost(lastSeenAt, detectMs);
  }

  /** The longest window length in use: `windowMs` (`limit()`'s) or one of `limitAll()`'s. */
  longestWindowMs(windowMs: number): number {
    let longest = windowMs;
    for (const length of this.#byWindow.keys()) if (length > longest) longest = length;
    return longest;
  }

  /** Every call of every window that carries an id (those Redis has, or the journal will write): what a re-seed writes. */
  *calls(): Generator<PendingCall> {
    yield* this.main.calls();
    for (const [windowMs, window] of this.#byWindow) {
      for (const call of window.calls()) yield { ...call, windowMs };
    }
  }
}
