/** The chaos suite's shared types: what a backend offers, and what a scenario measured. */
import type { Proxy, Toxiproxy } from 'toxiproxy-node-client';
import type { BreakerState } from '../src/index.ts';

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

export type Percentiles = { readonly p50: number; readonly p99: number; readonly max: number; readonly count: number };

/** The admitted calls of the first window found over the limit, for diagnosis (ms from the start). */
export type OverWindow = {
  readonly key: string;
  readonly calls: readonly { readonly atMs: number; readonly instance: number; readonly source: string; readonly reason: string }[];
};
