/** The messages between the harness and an instance's process (`worker.ts`), over the fork's IPC channel. */
import type { BreakerState } from '../redis/Breaker.js';
import type { LimiterStats } from '../limiter/Stats.js';
import type { LimiterProfile } from './types.js';

export type WorkerSetup = {
  readonly config: string;
  readonly instance: number;
  readonly instances: number;
  readonly host: string;
  readonly port: number;
  readonly keys: readonly string[];
  /** How long to wait, at most, for the instances to count each other, ms. */
  readonly countWithinMs: number;
};

/**
 * One call: [issued (epoch ms), latency (ms), key index, allowed (0/1), source, reason,
 * admitted at (epoch ms on the deciding tier's clock, -1 when not admitted), the key's limit, threw (0/1)].
 */
export type CallRecord = [number, number, number, number, string, string, number, number, number];

export type FromWorker =
  | { readonly kind: 'ready'; readonly profile: LimiterProfile; readonly counted: number }
  | { readonly kind: 'failed'; readonly usage: boolean; readonly message: string }
  | {
      readonly kind: 'done';
      readonly calls: CallRecord[];
      /** This process's event-loop stalls: [start (epoch ms), length (ms)]. */
      readonly stalls: [number, number][];
      /** Breaker transitions: [epoch ms, state]. */
      readonly states: [number, BreakerState][];
      /** Calls still unanswered once the grace after `stop` ran out. */
      readonly unanswered: number;
      readonly unhandledRejections: number;
      readonly stats: LimiterStats;
      readonly errors: string[];
    };

export type ToWorker =
  | { readonly kind: 'setup'; readonly setup: WorkerSetup }
  /** Offer `perSecond` calls per second, over the keys in turn, from `atEpochMs`. */
  | { readonly kind: 'go'; readonly atEpochMs: number; readonly perSecond: number }
  | { readonly kind: 'stop'; readonly graceMs: number };
