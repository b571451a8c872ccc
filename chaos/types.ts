/** The chaos suite's shared types: what a backend offers, and what a scenario measured. */
import type { Proxy, Toxiproxy } from 'toxiproxy-node-client';
import type { BreakerState, DecisionReason, DecisionSource, Mode } from '../src/index.ts';

/** Where the chaos suite gets its Redis and its Toxiproxy. */
export type BackendKind = 'container' | 'local' | 'external';

/** A Redis reached through a Toxiproxy proxy, for one scenario. */
export type ProxiedRedis = {
  /** The proxy, driven through toxiproxy-node-client. */
  readonly proxy: Proxy;
  /** Where clients connect to reach Redis through the proxy. */
  readonly host: string;
  readonly port: number;
};

/** Faults done to the Redis process itself, where the backend can do them. */
export type ProcessFaults = {
  /** Stops the process (SIGSTOP, or a container pause): connects succeed, commands hang. */
  freeze(): Promise<void>;
  /** Undoes `freeze()`. */
  thaw(): Promise<void>;
  /** Kills the process (data lost) and starts it again on the same address; resolves when it answers. */
  killAndRestart(): Promise<void>;
  /**
   * Makes a background save fail (its child killed) with save points set and
   * `stop-writes-on-bgsave-error yes`: Redis refuses every write with `MISCONF` until `allowWrites()`.
   * Absent where the backend cannot reach the save's child process.
   */
  failSave?(): Promise<void>;
  /** Undoes `failSave()`: writes allowed again, save points and the save delay as they were. */
  allowWrites?(): Promise<void>;
};

/** One interface over the three backends (`CHAOS_BACKEND=auto|container|local|external`). */
export interface ChaosBackend {
  readonly kind: BackendKind;
  /** Why this backend was chosen (printed by the suite), e.g. "auto: no container runtime answered". */
  readonly why: string;
  /** The Toxiproxy API's base URL. */
  readonly toxiproxyUrl: string;
  readonly toxiproxy: Toxiproxy;
  /** Redis without the proxy, for admin commands (CLIENT PAUSE, SCRIPT KILL, INFO, FLUSHALL). */
  readonly redis: { readonly host: string; readonly port: number };
  /** Creates (or replaces) a proxy named `name` in front of Redis. */
  createRedisProxy(name: string): Promise<ProxiedRedis>;
  /** Absent where the backend cannot touch the Redis process (external). */
  readonly process: ProcessFaults | undefined;
  /** Stops what the backend started; leaves external servers running. */
  close(): Promise<void>;
}

/** A breaker transition of one instance, ms from the start of the scenario or of the demo's load. */
export type StateChange = { readonly atMs: number; readonly instance: number; readonly state: BreakerState };

/** A span of a scenario, relative to its start. */
export type Phase = { readonly name: string; readonly startMs: number; readonly endMs: number; readonly fault: boolean };

/** Decisions and state per time bucket of a scenario, for the timeline. */
export type Bucket = {
  /** Bucket start, ms from the scenario's start. */
  readonly atMs: number;
  readonly decisions: number;
  readonly admitted: number;
  readonly bySource: Readonly<Record<DecisionSource, number>>;
};

export type Percentiles = { readonly p50: number; readonly p99: number; readonly max: number; readonly count: number };

/** The admitted calls of the first window found over the limit, for diagnosis (ms from the start). */
export type OverWindow = {
  readonly key: string;
  readonly calls: readonly { readonly atMs: number; readonly instance: number; readonly source: string; readonly reason: string }[];
};

/** What one scenario measured. Every number is from the run, none is computed from a model. */
export type ScenarioResult = {
  readonly name: string;
  readonly title: string;
  readonly backend: BackendKind;
  readonly mode: Mode;
  readonly instances: number;
  readonly limit: number;
  readonly windowMs: number;
  readonly keys: number;
  /** Offered load, calls per second (all instances together). */
  readonly rate: number;
  readonly durationMs: number;
  readonly reconcile: boolean;
  readonly breakerTimeoutMs: number;
  readonly phases: readonly Phase[];
  /** Bucket width of `timeline`, ms. */
  readonly bucketMs: number;
  readonly timeline: readonly Bucket[];
  /** Breaker transitions of every instance, ms from the scenario's start. */
  readonly stateChanges: readonly StateChange[];
  readonly metrics: {
    readonly decisions: number;
    readonly admitted: number;
    /** `limit()` calls that threw or rejected: must be 0. */
    readonly exceptions: number;
    /** Unhandled promise rejections during the scenario: must be 0. */
    readonly unhandledRejections: number;
    /** Decision latency of the calls issued during fault phases, ms. */
    readonly faultLatency: Percentiles;
    /** The longest this process's event loop was held up during fault phases, ms (it delays every pending answer). */
    readonly faultLoopStallMs: number;
    /** {@link faultLatency} with each call's overlap with this process's event-loop stalls taken out, ms. */
    readonly faultLatencyNetOfStalls: Percentiles;
    /** Decision latency of every call, ms. */
    readonly latency: Percentiles;
    /**
     * The longest decision once the event-loop stalls of this process during it are taken out, ms:
     * a stall (a GC, a busy machine) delays every pending answer and timer, whoever makes it.
     */
    readonly latencyNetOfStallsMax: number;
    readonly bySource: Readonly<Record<DecisionSource, number>>;
    readonly byReason: Readonly<Record<DecisionReason, number>>;
    /** From the first fault's start until the first instance's breaker opened, ms (undefined: it never opened). */
    readonly timeToOpenMs: number | undefined;
    /** From the last fault's end until every instance's breaker was closed again, ms (undefined: not all closed). */
    readonly timeToCloseMs: number | undefined;
    /**
     * Admitted permits over the limit, over every sliding window (t - windowMs, t] at each admitted
     * call's time, per key, counting every instance: the largest excess and how many admitted calls
     * were beyond the limit of their window.
     */
    readonly overLimit: {
      readonly maxExcess: number;
      readonly callsOver: number;
      /** The admitted calls of the first window found over the limit (absent when none was). */
      readonly firstOver?: OverWindow;
    };
  };
  /** The checks the scenario made, with their outcome, for the report. */
  readonly checks: readonly { readonly name: string; readonly pass: boolean; readonly detail: string }[];
};
