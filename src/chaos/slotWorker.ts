/**
 * A concurrency limit's instance of a chaos run (`worker.ts` hands it a `ConcurrencyLimiter`): it
 * waits until the fleet is counted and Redis grants it a slot, then runs `parallel` tasks, each
 * taking a slot of a key in turn, holding it `holdMs`, giving it back; and answers with every slot
 * held, its share through the run, its event-loop stalls and breaker transitions.
 */
import type { ConcurrencyLimiter } from '../limiter/ConcurrencyLimiter.js';
import type { BreakerState } from '../redis/Breaker.js';
import { slotLoad } from './config.js';
import type { SlotRecord, SlotsDone, WorkerSetup } from './protocol.js';
import type { ChaosConfig, LimiterProfile } from './types.js';

/**
 * The wall clock, as `run.ts` times the phases: every process reads the same system clock, so a slot
 * given back in one process is stamped no later than the same slot taken in another (a
 * `performance.timeOrigin` differs between processes by a ms or more, and would show handoffs as overlaps).
 */
const now = (): number => Date.now();
const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
/** How often the share is sampled and the event loop watched, ms; a tick this much late or more is a stall. */
const TICK_MS = 20;

export type SlotRun = {
  readonly profile: LimiterProfile;
  readonly counted: number;
  go(atEpochMs: number): void;
  stop(graceMs: number): Promise<Omit<SlotsDone, 'unhandledRejections' | 'errors'>>;
};

/**
 * Readies one instance: with `instances: 'auto'`, until its share is `floor(max / instances)` (every
 * instance counted); then until Redis grants it a slot of a key of its own (given back at once).
 * @throws Error when that does not happen within `setup.countWithinMs`.
 */
export async function startSlots(s: WorkerSetup, loaded: ChaosConfig, limiter: ConcurrencyLimiter, errors: string[]): Promise<SlotRun> {
  const { max, ttlMs, instances, leaseMs, breaker } = limiter.options;
  const load = slotLoad(loaded, max);
  const auto = instances === 'auto';
  const want = Math.floor(max / s.instances);
  const until = Date.now() + s.countWithinMs;
  let granted = false;
  for (;;) {
    const share = limiter.stats().share;
    if (!auto || share === want) {
      const trial = await limiter.acquire(`resilimit-chaos-ready-${s.instance}`).catch(() => undefined);
      granted = trial?.source === 'redis';
      await trial?.release();
      if (granted) break;
    }
    if (Date.now() > until) {
      throw new Error(
        `instance ${s.instance}: ${granted || !auto || share === want ? 'Redis granted no slot' : `share ${share}, not floor(${max} / ${s.instances}) = ${want}`} after ${s.countWithinMs} ms`,
      );
    }
    await pause(20);
  }
  const share = limiter.stats().share;
  const states: [number, BreakerState][] = [];
  limiter.on('state', (state) => states.push([now(), state]));
  let lost = 0;
  limiter.on('lost', () => {
    lost += 1;
  });
  const held: SlotRecord[] = [];
  const shares: [number, number][] = [];
  const stalls: [number, number][] = [];
  let running = false;
  let refused = 0;
  let thrown = 0;
  let next = 0;
  let loops: Promise<void>[] = [];
  let finished = 0;
  let ticker: NodeJS.Timeout | undefined;

  async function task(): Promise<void> {
    const k = next++ % s.keys.length;
    let slot: Awaited<ReturnType<ConcurrencyLimiter['acquire']>>;
    try {
      slot = await limiter.acquire(s.keys[k] as string, { maxWaitMs: load.maxWaitMs });
    } catch (error) {
      thrown += 1;
      if (errors.length < 50) errors.push(`acquire() threw: ${String(error)}`);
      await pause(10);
      return;
    }
    if (slot === undefined) {
      refused += 1;
      if (load.maxWaitMs === 0) await pause(5); // now or never: not a busy loop
      return;
    }
    const start = now();
    const [low, high] = load.holdMs;
    await pause(low + Math.random() * (high - low));
    held.push([start, now(), slot.source, k, slot.signal.aborted ? 1 : 0]);
    await slot.release().catch((error: unknown) => errors.length < 50 && errors.push(`release() threw: ${String(error)}`));
  }

  async function loop(): Promise<void> {
    while (running) await task();
    finished += 1;
  }

  return {
    counted: auto ? s.instances : (instances as number),
    profile: {
      limit: max,
      windowMs: ttlMs,
      mode: limiter.mode,
      timeoutMs: breaker.timeoutMs,
      instances: auto ? s.instances : (instances as number),
      localLimit: share,
      ...(auto ? { leaseMs } : {}),
      slots: { ...load, max, ttlMs, instances, share },
    },
    go(atEpochMs) {
      void (async () => {
        const wait = atEpochMs - now();
        if (wait > 0) await pause(wait);
        running = true;
        let last = now();
        ticker = setInterval(() => {
          const at = now();
          if (at - last >= 2 * TICK_MS) stalls.push([last, at - last - TICK_MS]);
          last = at;
          shares.push([at, limiter.stats().share]);
        }, TICK_MS);
        loops = Array.from({ length: load.parallel }, () => loop());
      })();
    },
    async stop(graceMs) {
      running = false;
      await Promise.race([Promise.allSettled(loops), pause(graceMs)]);
      clearInterval(ticker);
      return { kind: 'slots-done', held, shares, stalls, states, refused, thrown, lost, unfinished: loops.length - finished };
    },
  };
}
