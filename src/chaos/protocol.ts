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

/**
 * One slot a task held: [acquired (epoch ms, when `acquire()` resolved), released (epoch ms, when
 * `release()` was called), source, key index, lost (0/1: its signal aborted while held)].
 */
export type SlotRecord = [number, number, string, number, number];

/** What a concurrency limit's instance answers `stop` with. */
export type SlotsDone = {
  readonly kind: 'slots-done';
  readonly held: SlotRecord[];
  /** Its share (`stats().share`) through the run, sampled: [epoch ms, share]. */
  readonly shares: [number, number][];
  readonly stalls: [number, number][];
  readonly states: [number, BreakerState][];
  /** Acquires that got no slot; that threw; slots reported lost (`lost` events); tasks still running at the end. */
  readonly refused: number;
  readonly thrown: number;
  readonly lost: number;
  readonly unfinished: number;
  readonly unhandledRejections: number;
  readonly errors: string[];
};

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
    }
  | SlotsDone;

export type ToWorker =
  | { readonly kind: 'setup'; readonly setup: WorkerSetup }
  /** Offer `perSecond` calls per second, over the keys in turn, from `atEpochMs`. */
  | { readonly kind: 'go'; readonly atEpochMs: number; readonly perSecond: number }
  | { readonly kind: 'stop'; readonly graceMs: number };
