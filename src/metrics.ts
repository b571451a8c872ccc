/**
 * OpenTelemetry metrics for a {@link ResilientLimiter}: the `resilimit/metrics` entry.
 *
 * A separate entry, so that the main one never imports `@opentelemetry/api` (an optional peer
 * dependency): without it nothing of this file is loaded, and nothing subscribes to the
 * `resilimit:decision` diagnostics channel, which then costs `limit()` nothing.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import {
  metrics,
  ValueType,
  type Attributes,
  type BatchObservableCallback,
  type Counter,
  type Histogram,
  type Meter,
  type Observable,
} from '@opentelemetry/api';
import type { BreakerState } from './redis/Breaker.js';
import { invalidOption } from './base/errors.js';
import type { ConcurrencyLimiter } from './limiter/ConcurrencyLimiter.js';
import type { DecisionMessage, ResilientLimiter } from './limiter/ResilientLimiter.js';
import type { DecisionReason, DecisionSource } from './types.js';
import { requireRuntime } from './base/runtime.js';

/** Options of {@link instrumentLimiter}. */
export type InstrumentLimiterOptions = {
  /**
   * The value of the `resilimit.limiter` attribute on every measurement: 1 to 128 characters, unique
   * among the limiters instrumented with the same meter (a second instrumentation of a name throws
   * until the first is closed: two limiters would write into the same breaker-state series).
   * @default 'default'
   */
  name?: string;
  /**
   * The meter to create the instruments with.
   * @default metrics.getMeter('resilimit', <package version>) from `@opentelemetry/api`: the global
   *   meter provider, so a no-op until the application registers one.
   */
  meter?: Meter;
};

/** What {@link instrumentLimiter} returns: stop it with `close()` or `using`. */
export type LimiterInstrumentation = {
  /** The `resilimit.limiter` attribute of its measurements. */
  readonly name: string;
  /**
   * Stops recording: unsubscribes from the decision channel and removes the observable callback.
   * The instruments stay in the meter (OpenTelemetry cannot delete them). Idempotent.
   */
  close(): void;
  /** Same as {@link close}, for `using`. */
  [Symbol.dispose](): void;
};

/** The instruments' names, as OpenTelemetry spells them (a Prometheus exporter writes `.` as `_`). */
export const MetricName = {
  /**
   * Counter of decisions, `{decision}`: attributes `resilimit.limiter`, `.source`, `.reason`, `.allowed`,
   * and `.shadow_rejected` (`true`) on the decisions shadow mode admitted though the limit refused them.
   */
  DECISIONS: 'resilimit.decisions',
  /** Histogram of the time `limit()` took, in seconds: attributes `resilimit.limiter`, `.source`, `.reason`. */
  DECISION_DURATION: 'resilimit.decision.duration',
  /** Gauge, 1 for the breaker's current state and 0 for the others: attributes `resilimit.limiter`, `resilimit.state`. */
  BREAKER_STATE: 'resilimit.breaker.state',
  /** Counter of the times the breaker opened since the limiter was created: attribute `resilimit.limiter`. */
  BREAKER_OPENS: 'resilimit.breaker.opens',
  /** Gauge of the slots a `ConcurrencyLimiter` holds here: `resilimit.limiter`, `resilimit.written` (false: Redis does not hold them yet). */
  SLOTS_HELD: 'resilimit.slots.held',
  /** Counter of a `ConcurrencyLimiter`'s acquires: `resilimit.limiter`, `resilimit.source` (`redis`, `local`, `fail-open`, `none` for a refusal). */
  SLOTS_ACQUIRES: 'resilimit.slots.acquires',
  /** Counter of the slots a `ConcurrencyLimiter` lost: `resilimit.limiter`. */
  SLOTS_LOST: 'resilimit.slots.lost',
  /** Gauge of the slots of a key a `ConcurrencyLimiter` may hold while Redis cannot answer: `resilimit.limiter`. */
  SLOTS_SHARE: 'resilimit.slots.share',
} as const;

/**
 * Bucket boundaries of the duration histogram, in seconds (an advice: a View overrides them). From
 * 50 µs (a local answer) to 250 ms: a Redis round trip is about a millisecond, the breaker's deadline
 * 50 ms by default.
 */
export const DURATION_BUCKETS_S: readonly number[] = Object.freeze([
  0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
]);

const CHANNEL = 'resilimit:decision';
const STATES: readonly BreakerState[] = ['closed', 'half-open', 'open'];
const MAX_NAME_LENGTH = 128;

type Recorder = (message: DecisionMessage) => void;

/**
 * One subscriber for every instrumented limiter, subscribed only while there is one: a map lookup
 * per decision, however many limiters are instrumented.
 */
const recorders = new Map<object, Set<Recorder>>();
/** Names in use per meter: two limiters of one name would overwrite each other's gauge. */
const namesInUse = new WeakMap<Meter, Set<string>>();

function onDecision(message: unknown): void {
  const forLimiter = recorders.get((message as DecisionMessage).limiter);
  if (forLimiter === undefined) return;
  for (const record of forLimiter) record(message as DecisionMessage);
}

function addRecorder(limiter: object, record: Recorder): void {
  if (recorders.size === 0) subscribe(CHANNEL, onDecision);
  const forLimiter = recorders.get(limiter);
  if (forLimiter === undefined) recorders.set(limiter, new Set([record]));
  else forLimiter.add(record);
}

function removeRecorder(limiter: object, record: Recorder): void {
  const forLimiter = recorders.get(limiter);
  if (forLimiter === undefined || !forLimiter.delete(record)) return;
  if (forLimiter.size === 0) recorders.delete(limiter);
  if (recorders.size === 0) unsubscribe(CHANNEL, onDecision);
}

let packageVersion: string | undefined;

/** This package's version, for the meter's scope (`package.json` sits next to `src/` and `dist/`). */
function version(): string {
  packageVersion ??= (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  return packageVersion;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function checkLimiter(value: unknown): ResilientLimiter {
  // Duck-typed rather than `instanceof`: this entry must not load the limiter's code, and a
  // limiter of another copy of the package publishes on the same channel.
  if (!isObject(value) || typeof value['limit'] !== 'function' || typeof value['stats'] !== 'function' || !('state' in value)) {
    throw invalidOption('limiter', 'a ResilientLimiter', value);
  }
  return value as unknown as ResilientLimiter;
}

function checkName(value: unknown): string {
  if (value === undefined) return 'default';
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_NAME_LENGTH || !value.isWellFormed()) {
    throw invalidOption('name', `a well-formed string of 1 to ${MAX_NAME_LENGTH} characters`, value);
  }
  return value;
}

const METER_METHODS = [
  'createCounter',
  'createHistogram',
  'createObservableGauge',
  'createObservableCounter',
  'addBatchObservableCallback',
  'removeBatchObservableCallback',
] as const;

function checkMeter(value: unknown): Meter {
  if (value === undefined) return metrics.getMeter('resilimit', version());
  if (!isObject(value) || METER_METHODS.some((method) => typeof value[method] !== 'function')) {
    throw invalidOption('meter', 'an OpenTelemetry Meter', value);
  }
  return value as unknown as Meter;
}

/** Checks an instrumentation's options: its name, its meter, and that the name is free with that meter. */
function checkOptions(options: unknown): { name: string; meter: Meter; names: Set<string> } {
  if (options !== undefined && !isObject(options)) throw invalidOption('options', 'an object', options);
  const name = checkName(options?.['name']);
  const meter = checkMeter(options?.['meter']);
  const names = namesInUse.get(meter) ?? new Set<string>();
  if (names.has(name)) {
    throw invalidOption('name', 'a name not instrumented with this meter yet (close the other instrumentation first)', name);
  }
  return { name, meter, names };
}

/** The attribute sets of one (source, reason), built on its first decision: recording then allocates none. */
type AttributeSets = { timed: Attributes; rejected: Attributes; allowed: Attributes; shadowRejected: Attributes };

/**
 * Records the decisions, decision latency and breaker state of `limiter` through the OpenTelemetry
 * metrics API, until `close()`:
 *
 * | instrument | kind | unit | attributes |
 * |---|---|---|---|
 * | `resilimit.decisions` | counter | `{decision}` | `resilimit.limiter`, `resilimit.source`, `resilimit.reason`, `resilimit.allowed`; `resilimit.shadow_rejected` (`true`) on a shadowed refusal |
 * | `resilimit.decision.duration` | histogram | `s` | `resilimit.limiter`, `resilimit.source`, `resilimit.reason` |
 * | `resilimit.breaker.state` | observable gauge | `1` | `resilimit.limiter`, `resilimit.state`: 1 for the current state, 0 for the others |
 * | `resilimit.breaker.opens` | observable counter | `{open}` | `resilimit.limiter` |
 *
 * Keys are never attributes: one series per key would grow without bound. The decisions come from
 * the `resilimit:decision` diagnostics channel, subscribed to only while an instrumentation is open
 * (so the latency is measured only then); a call that began before counts with a duration of 0.
 *
 * @example
 * import { instrumentLimiter } from 'resilimit/metrics';
 * using instrumentation = instrumentLimiter(limiter, { name: 'api' });
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for something other than a limiter, a bad
 *   option, or a name already instrumented with this meter.
 */
export function instrumentLimiter(limiter: ResilientLimiter, options?: InstrumentLimiterOptions): LimiterInstrumentation {
  requireRuntime();
  const checked = checkLimiter(limiter);
  const { name, meter, names } = checkOptions(options);

  const decisions: Counter = meter.createCounter(MetricName.DECISIONS, {
    description: 'Rate-limit decisions, by the tier that made them (source), why (reason) and the outcome (allowed).',
    unit: '{decision}',
    valueType: ValueType.INT,
  });
  const duration: Histogram = meter.createHistogram(MetricName.DECISION_DURATION, {
    description: 'Time limit() took to decide, by source and reason.',
    unit: 's',
    valueType: ValueType.DOUBLE,
    advice: { explicitBucketBoundaries: [...DURATION_BUCKETS_S] },
  });
  const breakerState = meter.createObservableGauge(MetricName.BREAKER_STATE, {
    description: "The breaker's state: 1 for the current one (resilimit.state), 0 for the others.",
    unit: '1',
    valueType: ValueType.INT,
  });
  const breakerOpens = meter.createObservableCounter(MetricName.BREAKER_OPENS, {
    description: 'Times the breaker opened since the limiter was created.',
    unit: '{open}',
    valueType: ValueType.INT,
  });

  const base: Attributes = { 'resilimit.limiter': name };
  const stateAttributes = new Map(STATES.map((state) => [state, { ...base, 'resilimit.state': state }]));
  const attributeSets = new Map<string, AttributeSets>();
  const attributesOf = (source: DecisionSource, reason: DecisionReason): AttributeSets => {
    const id = `${source}\n${reason}`;
    let sets = attributeSets.get(id);
    if (sets === undefined) {
      const timed = { ...base, 'resilimit.source': source, 'resilimit.reason': reason };
      const allowed = { ...timed, 'resilimit.allowed': true };
      // Shadow mode's admissions of refusals: admitted, and a series of their own (the attribute is absent on the others).
      sets = {
        timed,
        rejected: { ...timed, 'resilimit.allowed': false },
        allowed,
        shadowRejected: { ...allowed, 'resilimit.shadow_rejected': true },
      };
      attributeSets.set(id, sets);
    }
    return sets;
  };

  let warned = false;
  const record: Recorder = ({ decision, durationMs }) => {
    // This runs inside limit(), through the channel: an exception here would be re-thrown by
    // diagnostics_channel as an uncaught exception, so a failing meter is reported, never thrown.
    try {
      const sets = attributesOf(decision.source, decision.reason);
      decisions.add(1, decision.allowed ? (decision.shadowRejected === true ? sets.shadowRejected : sets.allowed) : sets.rejected);
      duration.record(durationMs / 1000, sets.timed);
    } catch (error) {
      if (warned) return;
      warned = true;
      process.emitWarning(`resilimit metrics of limiter ${JSON.stringify(name)} could not be recorded: ${String(error)}`, {
        type: 'ResilimitWarning',
        code: 'RESILIMIT_METRICS_FAILED',
      });
    }
  };
  const observables: Observable[] = [breakerState, breakerOpens];
  const observe: BatchObservableCallback = (result) => {
    const state = checked.state;
    for (const [each, attributes] of stateAttributes) result.observe(breakerState, each === state ? 1 : 0, attributes);
    result.observe(breakerOpens, checked.stats().opened, base);
  };

  meter.addBatchObservableCallback(observe, observables);
  addRecorder(checked, record);
  names.add(name);
  namesInUse.set(meter, names);

  let open = true;
  const close = (): void => {
    if (!open) return;
    open = false;
    removeRecorder(checked, record);
    meter.removeBatchObservableCallback(observe, observables);
    names.delete(name);
  };
  return { name, close, [Symbol.dispose]: close };
}

/**
 * Records what a {@link ConcurrencyLimiter} does through the OpenTelemetry metrics API, until
 * `close()`, read from its `stats()` at each collection (nothing runs on `acquire()`):
 *
 * | instrument | kind | unit | attributes |
 * |---|---|---|---|
 * | `resilimit.slots.held` | observable gauge | `{slot}` | `resilimit.limiter`, `resilimit.written` (`false`: taken while Redis could not answer, not written back yet) |
 * | `resilimit.slots.acquires` | observable counter | `{acquire}` | `resilimit.limiter`, `resilimit.source` (`redis`, `local`, `fail-open`; `none`: refused) |
 * | `resilimit.slots.lost` | observable counter | `{slot}` | `resilimit.limiter` |
 * | `resilimit.slots.share` | observable gauge | `{slot}` | `resilimit.limiter` |
 * | `resilimit.breaker.state` | observable gauge | `1` | as for {@link instrumentLimiter} |
 *
 * @example
 * import { instrumentConcurrencyLimiter } from 'resilimit/metrics';
 * using instrumentation = instrumentConcurrencyLimiter(exports, { name: 'exports' });
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` for something other than a `ConcurrencyLimiter`,
 *   a bad option, or a name already instrumented with this meter.
 */
export function instrumentConcurrencyLimiter(limiter: ConcurrencyLimiter, options?: InstrumentLimiterOptions): LimiterInstrumentation {
  requireRuntime();
  // Duck-typed, as for instrumentLimiter: this entry loads no limiter code.
  const value = limiter as unknown;
  if (
    !isObject(value) ||
    typeof value['acquire'] !== 'function' ||
    typeof value['limit'] === 'function' ||
    typeof value['stats'] !== 'function'
  ) {
    throw invalidOption('limiter', 'a ConcurrencyLimiter', value);
  }
  const { name, meter, names } = checkOptions(options);
  const held = meter.createObservableGauge(MetricName.SLOTS_HELD, {
    description: 'Slots this instance holds, by whether Redis holds them yet (resilimit.written).',
    unit: '{slot}',
    valueType: ValueType.INT,
  });
  const acquires = meter.createObservableCounter(MetricName.SLOTS_ACQUIRES, {
    description: 'Acquires, by who gave the slot (resilimit.source; none: refused).',
    unit: '{acquire}',
    valueType: ValueType.INT,
  });
  const lost = meter.createObservableCounter(MetricName.SLOTS_LOST, {
    description: 'Slots lost: this process could not renew them within their lease.',
    unit: '{slot}',
    valueType: ValueType.INT,
  });
  const share = meter.createObservableGauge(MetricName.SLOTS_SHARE, {
    description: 'Slots of a key this instance may hold while Redis cannot answer (mode local).',
    unit: '{slot}',
    valueType: ValueType.INT,
  });
  const breakerState = meter.createObservableGauge(MetricName.BREAKER_STATE, {
    description: "The breaker's state: 1 for the current one (resilimit.state), 0 for the others.",
    unit: '1',
    valueType: ValueType.INT,
  });
  const base: Attributes = { 'resilimit.limiter': name };
  const written = { ...base, 'resilimit.written': true };
  const unwritten = { ...base, 'resilimit.written': false };
  const bySource = new Map(['redis', 'local', 'fail-open', 'none'].map((source) => [source, { ...base, 'resilimit.source': source }]));
  const stateAttributes = new Map(STATES.map((state) => [state, { ...base, 'resilimit.state': state }]));
  const observables: Observable[] = [held, acquires, lost, share, breakerState];
  const observe: BatchObservableCallback = (result) => {
    const stats = (limiter as ConcurrencyLimiter).stats();
    result.observe(held, stats.held - stats.heldUnwritten, written);
    result.observe(held, stats.heldUnwritten, unwritten);
    for (const [source, count] of Object.entries(stats.acquired)) result.observe(acquires, count, bySource.get(source));
    result.observe(acquires, stats.refused, bySource.get('none'));
    result.observe(lost, stats.lost, base);
    result.observe(share, stats.share, base);
    for (const [each, attributes] of stateAttributes) result.observe(breakerState, each === stats.state ? 1 : 0, attributes);
  };
  meter.addBatchObservableCallback(observe, observables);
  names.add(name);
  namesInUse.set(meter, names);
  let open = true;
  const close = (): void => {
    if (!open) return;
    open = false;
    meter.removeBatchObservableCallback(observe, observables);
    names.delete(name);
  };
  return { name, close, [Symbol.dispose]: close };
}
