import type { RedisPort } from './port.js';

/**
 * How long after the limiter is made a client never ready is reported, ms: within a second, so that a
 * service started with Redis down says at once what it answers on (a connection made on start takes
 * a few ms on a good network: a second is no false alarm).
 */
export const NOT_READY_AFTER_MS = 1_000;
/** How often it is reported again while it stays so, ms. */
export const NOT_READY_EVERY_MS = 60_000;

/**
 * What the `notReady` event tells: how long since the limiter was made (ms), the client's status, and
 * the last error the client reported meanwhile (`connect ECONNREFUSED …`, `NOAUTH …`, `WRONGPASS …`,
 * `getaddrinfo ENOTFOUND …`), if any.
 */
export type NotReady = { forMs: number; status: string; lastError?: string };

/** The most characters of the client's last error a report quotes. */
const ERROR_CHARS = 200;

/** The timers of a {@link ReadyWatch}: injectable, so that tests never wait. */
export type Timers = { set(fn: () => void, ms: number): unknown; clear(handle: unknown): void };

/** Node's timers, unref'd: the watch never keeps a process alive. */
const nodeTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * Tells when the limiter's client has never been ready: a wrong address or password, a client made
 * with `lazyConnect` and never connected. Then every call is answered by the fallback with reason
 * `'not-ready'` and the breaker stays closed (no call reaches it): limiting per instance that looks
 * healthy. So, `afterMs` after the limiter is made and every `everyMs` after that while the client
 * stays so, it emits a process warning (`RESILIMIT_REDIS_NOT_READY`) that says what the limiter
 * answers on meanwhile (`options.answering`), and calls `report` (the limiter's `notReady` event). Once the client has been ready, outages show in the breaker's state instead, and
 * the watch stops at its next turn. Its one timer is unref'd and cleared by {@link stop}.
 */
export class ReadyWatch {
  readonly #since: number;
  #timer: unknown;
  /** The client's last error while it has not been ready (listened to only then). */
  #lastError: string | undefined;
  #unlisten: () => void = () => {};

  constructor(
    readonly tier: { readonly everReady: boolean },
    readonly options: {
      readonly redis: RedisPort;
      readonly prefix: string;
      readonly perf: { now(): number };
      /** What the limiter answers on meanwhile, in words (the warning says it). */
      readonly answering?: () => string;
    },
    readonly report: (info: NotReady) => void,
    readonly timers: Timers = nodeTimers,
    readonly afterMs = NOT_READY_AFTER_MS,
    readonly everyMs = NOT_READY_EVERY_MS,
  ) {
    this.#since = options.perf.now();
    if (!tier.everReady) {
      this.#timer = timers.set(this.#check, afterMs);
      this.#unlisten = options.redis.on('error', this.#onError);
    }
  }

  /** How long the client has gone without being ready since the limiter was made, ms; 0 once it has been. */
  get notReadyForMs(): number {
    return this.tier.everReady ? 0 : this.options.perf.now() - this.#since;
  }

  /** Clears the timer; idempotent. */
  stop(): void {
    if (this.#timer !== undefined) this.timers.clear(this.#timer);
    this.#timer = undefined;
    this.#unlisten();
  }

  readonly #onError = (error: unknown): void => {
    const message = error instanceof Error ? error.message : String(error);
    this.#lastError = message.length > ERROR_CHARS ? `${message.slice(0, ERROR_CHARS)}…` : message;
  };

  readonly #check = (): void => {
    this.#timer = undefined;
    if (this.tier.everReady) {
      this.#unlisten();
      return;
    }
    const lastError = this.#lastError;
    const info: NotReady = {
      forMs: this.notReadyForMs,
      status: this.options.redis.status,
      ...(lastError === undefined ? {} : { lastError }),
    };
    this.#timer = this.timers.set(this.#check, this.everyMs);
    process.emitWarning(
      `The Redis client of the limiter with prefix ${JSON.stringify(this.options.prefix)} has not been ready in the ` +
        `${Math.round(info.forMs / 1000)} s since the limiter was made (status '${info.status}', ${this.options.redis.describe()}` +
        `${lastError === undefined ? '' : `; its last error: ${lastError}`}). ` +
        `Every call is answered without Redis: ${this.options.answering?.() ?? "by the fallback (reason 'not-ready')"}. ` +
        'Check the Redis address and credentials.',
      { type: 'ResilimitWarning', code: 'RESILIMIT_REDIS_NOT_READY' },
    );
    this.report(info);
  };
}
