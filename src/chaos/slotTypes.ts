/**
 * The chaos harness's types for a concurrency limit (`ConcurrencyLimiter`): what a config of that
 * kind may add, what the harness learns of the limiter, and the figures it measures from every slot
 * the instances held. Re-exported by `types.ts`.
 */
import type { Mode } from '../options/options.js';
import type { SlotSource } from '../slots/SlotTier.js';

/** How the instances load a concurrency limit (fields of the config module, all optional). */
export type SlotLoad = {
  /** Tasks each instance runs at once, each asking for a slot of a key, holding it, giving it back. */
  readonly parallel: number;
  /** How long a task holds its slot, ms: drawn evenly in [low, high]. */
  readonly holdMs: readonly [number, number];
  /** How long a task waits for a slot (`acquire`'s `maxWaitMs`) before it gives up and asks again. */
  readonly maxWaitMs: number;
};

/** What a `ConcurrencyLimiter` says of itself, read from an instance's limiter. */
export type SlotProfile = SlotLoad & {
  readonly max: number;
  readonly ttlMs: number;
  /** `'auto'` or the fixed count of instances its options give. */
  readonly instances: number | 'auto';
  /** The instance's share of `max` (`stats().share`) once the fleet was counted. */
  readonly share: number;
};

/** The most slots held at once in a span, all instances, the key where it was most and when (ms from the start). */
export type MostHeld = { readonly count: number; readonly key: string; readonly atMs: number };

/** The verdicts of a concurrency limit's run. */
export type SlotVerdictName = 'slot-bound' | 'errors' | 'slot-lost';

/** The figures of one scenario run on a concurrency limit, each measured from the slots the tasks held. */
export type SlotFigures = {
  readonly max: number;
  readonly mode: Mode;
  /** Slots held (each from `acquire()` resolving to `release()` being called), by who gave them. */
  readonly held: number;
  readonly bySource: Readonly<Partial<Record<SlotSource, number>>>;
  /** Acquires that got no slot within `maxWaitMs`. */
  readonly refused: number;
  /**
   * Slots not given by Redis while it was healthy (a breaker that opened on a missed deadline, on a
   * loaded machine): the healthy phase is then held to `max` + Σ s_i, the bound of any fault.
   */
  readonly localWhileHealthy: number;
  /** The most held at once: healthy, during the fault, in recovery, and once settled (see `settledAtMs`). */
  readonly mostHeld: {
    readonly healthy: MostHeld;
    readonly fault: MostHeld;
    readonly recovery: MostHeld;
    readonly settled: MostHeld | undefined;
  };
  /** The same per key: [healthy, fault, recovery]. */
  readonly mostHeldByKey: Readonly<Record<string, readonly [number, number, number]>>;
  /**
   * Per instance: h_i, the slots of each key it held when it lost Redis (the most it held from the
   * fault's start until its first slot not given by Redis), and s_i, its share (`stats().share`: the
   * largest it reported from the fault's start until settled).
   */
  readonly atFaultStart: { readonly held: Readonly<Record<string, readonly number[]>>; readonly share: readonly number[] };
  /** Per key, max(max, Σ max(h_i, s_i)): what 'local' promises from the fault's start until settled. */
  readonly faultBound: Readonly<Record<string, number>>;
  /**
   * From when every slot held or taken before the fault ended, and every slot not given by Redis,
   * was given back (ms from the start): Redis alone has granted since, at most `max`. Undefined: never.
   */
  readonly settledAtMs: number | undefined;
  /** `acquire()` threw; unhandled rejections and uncaught exceptions; tasks still running at the end. */
  readonly errors: { readonly thrown: number; readonly unhandled: number; readonly unfinished: number };
  /** Slots reported lost (their signal aborted), and the longest event-loop stall of an instance, ms. */
  readonly lost: number;
  readonly longestStallMs: number;
  /** From the fault's end until every instance was granted a slot by Redis again; undefined: never. */
  readonly redisBackMs: number | undefined;
  /** The same per instance, by instance (null: never). */
  readonly redisBackMsByInstance: readonly (number | null)[];
};
