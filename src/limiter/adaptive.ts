import { monitorEventLoopDelay, performance, type EventLoopUtilization } from 'node:perf_hooks';
import { describe, ErrorCode, invalidOption, ResilimitError } from '../base/errors.js';
import { integer, MAX_INT } from '../options/options.js';
import { requireRuntime } from '../base/runtime.js';

/**
 * What tells how loaded this process is:
 * - `'event-loop-utilization'`: the share of time the event loop was busy since the last reading (0 … 1);
 * - `'event-loop-delay'`: the p99 event-loop delay since the last reading, in ms;
 * - a function returning your own signal (CPU, queue length, …) on the scale of `from` and `to`.
 */
export type LoadSignal = 'event-loop-utilization' | 'event-loop-delay' | (() => number);

/** Options of {@link adaptiveLimit}. */
export type AdaptiveLimitOptions = {
  /** The limit while the load is at or below `from`. Integer 1 … 2^31 − 1. */
  limit: number;
  /** The limit once the load reaches `to`: the floor. Integer 1 … `limit`. */
  min: number;
  /** @default 'event-loop-utilization' */
  signal?: LoadSignal;
  /** The load where the limit starts to go down. @default 0.7 for utilization, 50 (ms) for delay; required for a function */
  from?: number;
  /** The load where it reaches `min`; greater than `from`. @default 0.95 for utilization, 200 (ms) for delay; required for a function */
  to?: number;
  /** The signal is read at most this often, in ms, when the limit is asked for. @default 1000 (range 10 … 3,600,000) */
  intervalMs?: number;
  /** The clock, in ms (tests). @default performance.now */
  now?: () => number;
};

/** A limit that follows the load: call it for the limit in force; `close()` stops the delay monitor. */
export type AdaptiveLimit = {
  (): number;
  /** The last load read from the signal (`undefined` before the first reading). */
  readonly load: number | undefined;
  /** Stops what the signal needs (the event-loop delay monitor); the limit then stays where it is. */
  close(): void;
};

/**
 * A limit function for `ResilientLimiter`'s `limit` option that scales the limit down as this
 * process gets loaded, within bounds: `limit` up to a load of `from`, then down in a straight line to
 * `min` at a load of `to`, and `min` above. The signal is read lazily, at most every `intervalMs`,
 * when the limiter asks for the limit (no timer); between readings the limit does not move.
 *
 * It protects this process: under local overload every instance admits less. The limit is still
 * shared in Redis; when instances disagree on it, each call is decided with the limit of the
 * instance that makes it.
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for a missing or out-of-range option.
 * @example
 * const limit = adaptiveLimit({ limit: 1000, min: 100 }); // event-loop utilization 0.7 → 0.95
 * const limiter = new ResilientLimiter({ redis, limit, windowMs: 1000 });
 * // on shutdown: await limiter.close(); limit.close();
 */
export function adaptiveLimit(options: AdaptiveLimitOptions): AdaptiveLimit {
  requireRuntime();
  if (typeof options !== 'object' || options === null) {
    throw new ResilimitError(ErrorCode.INVALID_OPTION, `Expected the options of adaptiveLimit() to be an object, got ${describe(options)}`);
  }
  const max = integer('limit', options.limit, 1, MAX_INT);
  const min = integer('min', options.min, 1, max);
  const signal = options.signal ?? 'event-loop-utilization';
  const defaults =
    signal === 'event-loop-utilization' ? { from: 0.7, to: 0.95 } : signal === 'event-loop-delay' ? { from: 50, to: 200 } : undefined;
  if (typeof signal !== 'function' && defaults === undefined) {
    throw invalidOption('signal', "'event-loop-utilization', 'event-loop-delay' or a function", signal);
  }
  const from = finite('from', options.from ?? defaults?.from);
  const to = finite('to', options.to ?? defaults?.to);
  if (!(to > from)) throw invalidOption('to', `a number greater than \`from\` (${from})`, to);
  const intervalMs = options.intervalMs === undefined ? 1000 : integer('intervalMs', options.intervalMs, 10, 3_600_000);
  const now = options.now ?? (() => performance.now());
  if (typeof now !== 'function') throw invalidOption('now', 'a function', now);

  const read = reader(signal);
  let load: number | undefined;
  let current = max;
  let readAt = now();

  const limit = (): number => {
    const t = now();
    if (t - readAt < intervalMs) return current;
    readAt = t;
    const value = read.next();
    if (!Number.isFinite(value)) return current; // a signal with nothing to say keeps the limit
    load = value;
    current = value <= from ? max : value >= to ? min : Math.max(min, Math.floor(max - ((max - min) * (value - from)) / (to - from)));
    return current;
  };
  return Object.defineProperties(limit, {
    load: { get: () => load, enumerable: true },
    close: { value: () => read.close(), enumerable: true },
  }) as AdaptiveLimit;
}

function finite(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw invalidOption(name, 'a finite number (required with a signal function)', value);
  }
  return value;
}

type Reader = { next(): number; close(): void };

function reader(signal: LoadSignal): Reader {
  if (typeof signal === 'function') return { next: signal, close: () => {} };
  if (signal === 'event-loop-utilization') {
    let last: EventLoopUtilization = performance.eventLoopUtilization();
    return {
      next() {
        const delta = performance.eventLoopUtilization(last);
        last = performance.eventLoopUtilization();
        return delta.utilization;
      },
      close: () => {},
    };
  }
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  return {
    next() {
      const p99 = histogram.count === 0 ? Number.NaN : histogram.percentile(99) / 1e6;
      histogram.reset();
      return p99;
    },
    close: () => histogram.disable(),
  };
}
