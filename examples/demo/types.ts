/** What demo.json holds: the run's options, backend, phases, figures of every second and summary. */
import type { BackendKind, StateChange } from '../../chaos/types.ts';
import type { DemoMode } from './options.ts';
import type { SecondFigures } from './record.ts';
import type { DemoPhase } from './script.ts';
import type { DemoSummary } from './summary.ts';

/** Everything demo.json holds. */
export type DemoReport = {
  readonly tool: 'resilimit demo';
  /** When the load started, ISO 8601. */
  readonly startedAt: string;
  /** Stopped early by Ctrl-C (or SIGTERM): the per-second and per-phase figures cover the first `ranMs`. */
  readonly interrupted: boolean;
  readonly ranMs: number;
  readonly node: string;
  readonly machine: string;
  readonly backend: { readonly kind: BackendKind; readonly why: string };
  readonly options: {
    readonly durationS: number;
    readonly instances: number;
    readonly limit: number;
    readonly windowMs: number;
    readonly mode: DemoMode;
    /** Calls per second offered, all instances together (round robin). */
    readonly offeredPerSecond: number;
    /** The one key every instance limits. */
    readonly key: string;
    readonly breaker: { readonly timeoutMs: number; readonly resetTimeoutMs: number; readonly maxResetTimeoutMs: number };
    /** Latency added to every reply while Redis is slow, ms. */
    readonly slowLatencyMs: number;
    /** The user's servers, when given. */
    readonly external: { readonly redis: string; readonly toxiproxy: string; readonly redisUpstream: string } | undefined;
  };
  /** The instance count each limiter found by heartbeat before the load started. */
  readonly instancesCounted: readonly number[];
  readonly phases: readonly DemoPhase[];
  readonly seconds: readonly SecondFigures[];
  readonly stateChanges: readonly StateChange[];
  readonly summary: DemoSummary;
};
