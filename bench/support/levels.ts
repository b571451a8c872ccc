/**
 * Keys in steady state: how many calls each key holds in its window, read from Redis by the admin
 * client (never through a contender), and keys topped up to a level through the contender's own
 * public API, so that the store holds what the library itself writes.
 */
import type { ChainableCommander } from 'ioredis';
import { type Contender, type ContenderFactory, rateLimiterFlexible, resilimit, type Window } from './contenders.ts';
import type { BenchServer } from './server.ts';

/** Queues the command that counts the calls `key` holds in its window (calls admitted after `cutoffMs`). */
type Counter = (pipeline: ChainableCommander, key: string, cutoffMs: number) => void;

const COUNTERS = new Map<ContenderFactory, Counter>([
  // resilimit's log: `resilimit:{<key>}` (src/redis/redisKey.ts), one member per call scored with its
  // admission time; a call is in the window while it was admitted after now - windowMs.
  [resilimit, (p, key, cutoffMs) => p.zcount(`resilimit:{${key}}`, `(${cutoffMs}`, '+inf')],
  // rate-limiter-flexible's fixed window: a counter `rlflx:<key>` that expires at the window's end.
  [rateLimiterFlexible, (p, key) => p.get(`rlflx:${key}`)],
]);

/**
 * A level reader for resilimit counting by slices of `resolutionMs` (`factory`): its hash
 * `resilimit:{<key>}:s<resolutionMs>` holds the permits counted as the first number of its head, the
 * field "s" (seven little-endian doubles: lua/sliced-window.lua), read by {@link levels}.
 */
export function readSlices(factory: ContenderFactory, resolutionMs: number): void {
  COUNTERS.set(factory, (p, key) => p.hgetBuffer(`resilimit:{${key}}:s${resolutionMs}`, 's'));
}

/** Calls per key, over a set of keys. */
export type Level = { mean: number; min: number; max: number };

export function summarize(levels: Int32Array): Level {
  let sum = 0;
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  for (const n of levels) {
    sum += n;
    if (n < min) min = n;
    if (n > max) max = n;
  }
  return { mean: sum / levels.length, min, max };
}

const READ_CHUNK = 10_000;

/** The calls each key holds now in `factory`'s store (on Redis's clock). */
export async function levels(server: BenchServer, factory: ContenderFactory, keys: readonly string[], window: Window): Promise<Int32Array> {
  const counter = COUNTERS.get(factory);
  if (counter === undefined) throw new Error(`No level reader for ${factory.name}`);
  const [seconds, micros] = (await server.admin.time()) as [string | number, string | number];
  const cutoffMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) - window.windowMs;
  const out = new Int32Array(keys.length);
  for (let start = 0; start < keys.length; start += READ_CHUNK) {
    const pipeline = server.admin.pipeline();
    const end = Math.min(keys.length, start + READ_CHUNK);
    for (let i = start; i < end; i += 1) counter(pipeline, keys[i] as string, cutoffMs);
    const replies = (await pipeline.exec()) ?? [];
    for (let i = start; i < end; i += 1) {
      const [error, value] = replies[i - start] ?? [new Error('no reply'), null];
      if (error !== null) throw error;
      // A sliced window's head (a buffer): its first number is the permits counted.
      out[i] = value === null ? 0 : Buffer.isBuffer(value) ? value.readDoubleLE(0) : Number(value);
    }
  }
  return out;
}

/** What a top-up left: the levels read last, the calls it made, the calls still missing. */
export type Filled = { levels: Int32Array; calls: number; missing: number };

/** Runs `count` tasks, `concurrency` at a time, in index order. */
async function drive(count: number, concurrency: number, task: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

/**
 * Callers of a fill. Not more: on this shared machine, 256 callers once kept resilimit's calls past
 * its 50 ms deadline long enough to open its breaker, and a fill answered locally fills nothing.
 */
const FILL_CONCURRENCY = 64;

/**
 * Brings every key that holds fewer than `below` calls up to `target`, through the contender's
 * public API (`decide`, or `fill` where one call leaves the same state), and reads the levels again
 * until none is short: a call the contender answered without its store is not there. It stops when
 * a try does not halve the shortfall (a contender answering locally), leaving the keys as they are.
 * Calls of one key are made a pass at a time over all keys, so that no script call holds a key twice.
 * Returns the levels read last, the calls made and the calls still missing.
 */
export async function topUp(
  server: BenchServer,
  factory: ContenderFactory,
  contender: Contender,
  keys: readonly string[],
  window: Window,
  target: number,
  below = target,
): Promise<Filled> {
  let calls = 0;
  let lastMissing = Number.POSITIVE_INFINITY;
  for (;;) {
    const found = await levels(server, factory, keys, window);
    const short: number[] = [];
    let missing = 0;
    for (let i = 0; i < found.length; i += 1) {
      const n = found[i] as number;
      if (n < below) {
        short.push(i);
        missing += target - n;
      }
    }
    if (short.length === 0 || missing > lastMissing / 2) return { levels: found, calls, missing };
    lastMissing = missing;
    const need = (i: number): number => target - (found[i] as number);
    const { fill } = contender;
    if (fill !== undefined) {
      await drive(short.length, FILL_CONCURRENCY, (j) => fill(keys[short[j] as number] as string, need(short[j] as number)));
      calls += missing;
      continue;
    }
    const tasks: number[] = [];
    for (let pass = 0; ; pass += 1) {
      const before = tasks.length;
      for (const i of short) if (need(i) > pass) tasks.push(i);
      if (tasks.length === before) break;
    }
    await drive(tasks.length, FILL_CONCURRENCY, (j) => contender.decide(keys[tasks[j] as number] as string));
    calls += tasks.length;
  }
}
