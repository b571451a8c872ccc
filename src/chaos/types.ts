/**
 * The public chaos harness's types (`resilimit/chaos`): what a user's config module exports, what a
 * run is asked to do, and what it measured. Every figure in a {@link ChaosReport} comes from the run.
 */
import type { BreakerState } from '../redis/Breaker.js';
import type { Mode } from '../options/options.js';
import type { DecisionReason, DecisionSource } from '../types.js';
import type { ConcurrencyLimiter } from '../limiter/ConcurrencyLimiter.js';
import type { ResilientLimiter } from '../limiter/ResilientLimiter.js';
import type { RespOptions } from './resp.js';
import type { SlotFigures, SlotProfile, SlotVerdictName } from './slotTypes.js';
import type { ToxiproxyApi } from './toxiproxyClient.js';

/** Where one instance reaches Redis: the harness puts a proxy of its own in front of Redis for each. */
export type ChaosAddress = {
  readonly host: string;
  readonly port: number;
  /** Which instance this is, 0 to `instances - 1`. */
  readonly instance: number;
};

export type * from './slotTypes.js';

/**
 * What `createLimiter` may return: the limiter, or the limiter and how to close what it built. A
 * `ConcurrencyLimiter` is run as a concurrency limit: tasks hold slots instead of calling `limit()`.
 */
export type ChaosInstance =
  | ResilientLimiter
  | ConcurrencyLimiter
  | { readonly limiter: ResilientLimiter | ConcurrencyLimiter; close?(): Promise<void> | void };

/**
 * What a config module exports (as `default`, or as named exports): how one service instance builds
 * its limiter, with the user's own options and client, pointed at the address the harness gives.
 * @example
 * // limiter.config.mjs
 * import { Redis } from 'ioredis';
 * import { ResilientLimiter } from 'resilimit';
 * export function createLimiter({ host, port }) {
 *   const redis = new Redis({ host, port, maxRetriesPerRequest: 0, enableOfflineQueue: false });
 *   return { limiter: new ResilientLimiter({ redis, limit: 300, windowMs: 60_000 }), close: () => redis.quit() };
 * }
 */
export type ChaosConfig = {
  createLimiter(address: ChaosAddress): ChaosInstance | Promise<ChaosInstance>;
  /** Keys the load is spread over (each gets the same load). @default 4 keys, `chaos-k0` … */
  readonly keys?: number | readonly string[];
  /** Calls per second offered by all instances together. @default twice the limit (see the docs) */
  readonly rate?: number;
  /** A `ConcurrencyLimiter` only: tasks each instance runs at once (integer 1 … 1000). @default 2 × max */
  readonly parallel?: number;
  /** A `ConcurrencyLimiter` only: how long a task holds its slot, ms, [low, high] (integers 1 … 60,000). @default [50, 150] */
  readonly holdMs?: readonly [number, number];
  /** A `ConcurrencyLimiter` only: how long a task waits for a slot (integer 0 … 60,000 ms). @default 100 */
  readonly maxWaitMs?: number;
};

/**
 * A scenario of your own: what `start` does at the end of the healthy phase (it may run the whole
 * fault, e.g. a freeze, a thaw and a kill in turn) and `stop` at the end of the fault.
 * @example
 * const twoFreezes: ChaosScenario = {
 *   name: 'two-freezes', title: 'Redis frozen twice', needsServer: true,
 *   phases: { healthyMs: 2000, faultMs: 4000, recoveryMs: 3000 },
 *   async start({ server }) { server?.freeze(); await sleep(1500); server?.thaw(); await sleep(1000); server?.freeze(); },
 *   async stop({ server }) { server?.thaw(); },
 * };
 */
export type ChaosScenario = {
  readonly name: string;
  readonly title: string;
  readonly phases?: { readonly healthyMs: number; readonly faultMs: number; readonly recoveryMs: number };
  /** Destroys data or stops the server for everyone: refused against an external Redis without `destructive`. */
  readonly destructive?: boolean;
  /** Needs the Redis process (`context.server`): a `redis-server` the harness started. */
  readonly needsServer?: boolean;
  readonly minInstances?: number;
  start(context: FaultContext): Promise<void>;
  stop?(context: FaultContext): Promise<void>;
};

/** What a fault can reach. */
export type FaultContext = {
  readonly api: ToxiproxyApi;
  /** One proxy per instance, by instance. */
  readonly proxies: readonly string[];
  /** Redis without the proxy, for admin commands. */
  readonly admin: RespOptions;
  /** The Redis process, where the harness started it. */
  readonly server: ServerControl | undefined;
  readonly profile: LimiterProfile;
  readonly timing: Timing;
};

/** Process faults of a Redis the harness started. */
export type ServerControl = {
  freeze(): void;
  thaw(): void;
  kill(): Promise<void>;
  restart(): Promise<void>;
  failSave?(): Promise<void>;
  allowWrites?(): Promise<void>;
};

export type Timing = { readonly healthyMs: number; readonly faultMs: number; readonly recoveryMs: number };

/** Where the harness gets Redis and the fault proxy. */
export type ChaosBackendKind = 'local' | 'external';

/** Options of {@link runChaos}; the command's flags map onto them one for one. */
export type ChaosOptions = {
  /** Path or URL of the config module (see {@link ChaosConfig}). Each instance's process imports it. */
  readonly config: string;
  /** Service instances, one process each. @default 3 */
  readonly instances?: number;
  /** Scenario names (see `scenarioNames`) or scenarios of your own, or `'default'` / `'all'`. @default 'default' */
  readonly scenarios?: readonly (string | ChaosScenario)[] | 'default' | 'all';
  /** Seeds the proxy's random draws and the order of keys: the same seed, the same run. @default random */
  readonly seed?: number;
  /** Writes `report.json`, `report.md` and `report.html` there. */
  readonly reportDir?: string;
  /** Verdicts that must hold although the mode promises nothing there, e.g. `['bound']` in `'fail-open'`. */
  readonly require?: readonly VerdictName[];
  /** The latency a decision may add on your critical path, ms. @default 100 */
  readonly latencyBudgetMs?: number;
  /**
   * Your own Redis and Toxiproxy instead of a `redis-server` child and the bundled proxy. The harness
   * never touches a Redis it did not start unless given here; scenarios that destroy data or stop
   * the server run against it only with `destructive: true`.
   */
  readonly external?: {
    readonly redisUrl: string;
    readonly toxiproxyUrl: string;
    /** Redis's address as Toxiproxy reaches it (e.g. `redis:6379` in compose). @default the URL's */
    readonly upstream?: string;
    /**
     * Ports the proxies may listen on, for a Toxiproxy in a container (its published ports, one per
     * instance and one more); clients reach them at the Toxiproxy URL's host. @default any free port on 127.0.0.1
     */
    readonly proxyPorts?: readonly number[];
    /** Where the proxies listen, with `proxyPorts`. @default '0.0.0.0' (inside a container) */
    readonly proxyHost?: string;
    readonly destructive?: boolean;
  };
  /**
   * The phases of the scenarios that have no timing of their own, ms. @default 2,500 healthy, a 3,000
   * fault, 3,500 to recover. Longer windows may want longer phases.
   */
  readonly phases?: { readonly healthyMs?: number; readonly faultMs?: number; readonly recoveryMs?: number };
  /** Told of progress: a scenario starts or ends. */
  readonly onProgress?: (progress: ChaosProgress) => void;
  /** Stops the run: the scenario running ends, every process and server started is stopped, the report keeps what was measured. */
  readonly signal?: AbortSignal;
};

export type ChaosProgress = {
  readonly scenario: string;
  readonly index: number;
  readonly total: number;
  readonly elapsedMs: number;
  /** An estimate from the scenarios' planned lengths. */
  readonly leftMs: number;
  readonly event: 'start' | 'end';
  readonly outcome?: ScenarioOutcome;
};

/** The verdicts a scenario can give; `--require` names them. */
export type VerdictName = 'bound' | 'redis-bound' | 'deadline' | 'latency' | 'lost' | 'recovery' | 'write-back' | SlotVerdictName;

/** One promise checked against the figure measured. `pass` undefined: reported, no promise made. */
export type Verdict = {
  readonly name: VerdictName;
  readonly pass: boolean | undefined;
  /** What was measured, e.g. `1.05× (42 of 40)`. */
  readonly figure: string;
  /** The promise, e.g. `≤ 1.1× in 'local'`. */
  readonly bound: string;
  /** By how much it missed, when it did. */
  readonly detail?: string;
  /** False: the promise is not one this kind of limit makes (`figure` says so, `bound` why); never passed. */
  readonly applicable?: false;
};

/** Latency percentiles, ms. */
export type Latency = { readonly p50: number; readonly p95: number; readonly p99: number; readonly max: number };

/** The figures of one scenario. */
export type ScenarioFigures = {
  readonly decisions: number;
  readonly admitted: number;
  /** The most admitted in any window (t − windowMs, t], per key, all instances; its ratio to the key's limit. */
  readonly mostAdmitted: { readonly key: string; readonly count: number; readonly limit: number; readonly ratio: number };
  /** The same, counting Redis's decisions only. */
  readonly mostAdmittedByRedis: { readonly key: string; readonly count: number; readonly limit: number; readonly ratio: number };
  /** Decision latency of the calls issued during the fault, and the slowest net of the process's own event-loop stalls. */
  readonly faultLatency: Latency;
  /** {@link faultLatency} with each call's overlap with its process's event-loop stalls taken out (a GC, a busy machine). */
  readonly faultLatencyNetOfStalls: Latency;
  readonly latencyNetOfStallsMax: number;
  /** `limit()` threw or rejected; unhandled rejections; calls never answered by the end. */
  readonly lost: { readonly exceptions: number; readonly unhandledRejections: number; readonly unanswered: number };
  /** From the fault's start to the first breaker opening; from the fault's end until every breaker closed; undefined: never. */
  readonly timeToOpenMs: number | undefined;
  readonly timeToCloseMs: number | undefined;
  /** From the fault's end to Redis's first decision again, the slowest instance; undefined: never. */
  readonly redisBackMs: number | undefined;
  /** Calls refused while the key's window across all instances still had room. */
  readonly refusedWithRoom: number;
  /** Calls admitted locally, and what became of them in Redis by the end (`reconcile` counters). */
  readonly writeBack: {
    readonly answeredLocally: number;
    readonly written: number;
    readonly present: number;
    readonly expired: number;
    readonly dropped: number;
    readonly pending: number;
  };
  readonly bySource: Readonly<Partial<Record<DecisionSource, number>>>;
  readonly byReason: Readonly<Partial<Record<DecisionReason, number>>>;
  /**
   * `long-outage` only: calls admitted in the second after the lease ended, one second into it (all
   * instances), against the last healthy second's: the availability your settings keep in a long outage.
   */
  readonly afterLease?: { readonly admittedPerSecond: number; readonly healthyPerSecond: number; readonly ratio: number };
};

/** Per time step of a scenario, for the charts. */
export type ScenarioSeries = {
  readonly stepMs: number;
  /** The most admitted in the window ending at each step, the busiest key. */
  readonly admittedInWindow: readonly number[];
  /** The limit of that key. */
  readonly limit: number;
  readonly latencyP99: readonly number[];
  readonly latencyMax: readonly number[];
  readonly bySource: Readonly<Partial<Record<DecisionSource, readonly number[]>>>;
  /** Per instance, by instance: its calls answered, and admitted, per step (by when they were issued). */
  readonly byInstance: readonly { readonly decisions: readonly number[]; readonly admitted: readonly number[] }[];
  /** Breaker transitions, ms from the scenario's start. */
  readonly breaker: readonly { readonly atMs: number; readonly instance: number; readonly state: BreakerState }[];
};

/** A span of a scenario, ms from its start. */
export type ChaosPhase = { readonly name: string; readonly startMs: number; readonly endMs: number; readonly fault: boolean };

export type ScenarioOutcome = {
  readonly name: string;
  readonly title: string;
  /** Why it did not run (e.g. destructive against an external Redis); no figures then. */
  readonly skipped?: string;
  readonly instances: number;
  readonly durationMs: number;
  /** Calls per second offered, all instances. */
  readonly rate: number;
  readonly phases: readonly ChaosPhase[];
  readonly figures?: ScenarioFigures;
  readonly series?: ScenarioSeries;
  /** A `ConcurrencyLimiter`'s run: its figures (then `figures` and `series` are absent). */
  readonly slots?: SlotFigures;
  readonly verdicts: readonly Verdict[];
  /** Every verdict with a promise held. */
  readonly passed: boolean;
  /** What went wrong inside the instances (setup errors, warnings), for diagnosis. */
  readonly errors: readonly string[];
};

/** What the limiter in the config module says of itself, read from its first instance. */
export type LimiterProfile = {
  readonly limit: number;
  readonly windowMs: number;
  readonly mode: Mode;
  readonly timeoutMs: number;
  readonly instances: number;
  readonly localLimit: number;
  readonly leaseMs?: number;
  /**
   * A `ConcurrencyLimiter`: its max, lease and share, and the load of the tasks (then `limit` is
   * `max`, `windowMs` its `ttlMs`, `localLimit` its share).
   */
  readonly slots?: SlotProfile;
};

export type ChaosReport = {
  readonly tool: 'resilimit chaos';
  readonly version: string;
  readonly startedAt: string;
  readonly durationMs: number;
  readonly config: string;
  readonly seed: number;
  readonly instances: number;
  readonly limiter: LimiterProfile;
  readonly keys: readonly string[];
  readonly backend: { readonly kind: ChaosBackendKind; readonly detail: string };
  readonly machine: { readonly node: string; readonly cpus: number; readonly loadavg: readonly number[] };
  readonly latencyBudgetMs: number;
  readonly require: readonly VerdictName[];
  readonly scenarios: readonly ScenarioOutcome[];
  /** Every scenario that ran held every promise. */
  readonly passed: boolean;
  /** Stopped before the end (Ctrl-C, `signal`): the report holds what was measured until then. */
  readonly interrupted: boolean;
};
