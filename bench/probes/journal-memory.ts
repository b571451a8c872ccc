/**
 * The journal's memory during an outage: a limiter with Redis down (the breaker held open, the
 * client never connected) answers 1,000,000 calls of distinct 1,000-character keys locally; each is
 * admitted and journalled. Prints the heap growth (heapUsed plus ArrayBuffers' contents after forced GCs,
 * minus the same before the calls), what the journal holds and dropped, and the time per call. Each key is a fresh flat
 * string made for its call and not kept by this script, as a request's key would be: what the
 * limiter keeps of it is counted. Rows: defaults, `reconcile: false` (the local window alone), and
 * the options given on the command line, if any (JSON, e.g. '{"maxPendingBytes":16777216}').
 *
 *   node --expose-gc bench/probes/journal-memory.ts ['{"maxPending":100000}']
 */
import { performance } from 'node:perf_hooks';
import type { ResilientLimiterOptions } from '../../src/index.ts';
import { createRedisClient, ResilientLimiter } from '../support/resilimit.ts';

const CALLS = 1_000_000;
const KEY_LENGTH = 1_000;

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  console.error('usage: node --expose-gc bench/probes/journal-memory.ts [options as JSON]');
  process.exit(2);
}

function settledHeap(): number {
  for (let i = 0; i < 4; i += 1) gc?.();
  // ArrayBuffers' contents (typed arrays: the journal's columns) live outside the V8 heap: counted too.
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

const template = Buffer.alloc(KEY_LENGTH, 'k');

/** A new flat one-byte string of KEY_LENGTH characters, distinct for each `i`. */
function keyOf(i: number): string {
  template.write(i.toString(36).padStart(8, '0'), 0, 'latin1');
  return template.toString('latin1');
}

async function measure(name: string, extra: Partial<ResilientLimiterOptions>): Promise<void> {
  // Never connected: nothing is sent, and the breaker is held open.
  const redis = createRedisClient({ host: '127.0.0.1', port: 1, lazyConnect: true });
  const limiter = new ResilientLimiter({ redis, limit: 100, windowMs: 60_000, ...extra });
  limiter.forceOpen();
  await limiter.limit(keyOf(CALLS)); // the first call's one-off allocations
  const before = settledHeap();
  const started = performance.now();
  let admitted = 0;
  for (let i = 0; i < CALLS; i += 1) if ((await limiter.limit(keyOf(i))).allowed) admitted += 1;
  const elapsed = performance.now() - started;
  const after = settledHeap();
  const { pending, dropped } = limiter.stats().reconcile;
  const mb = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  console.log(
    `${name.padEnd(40)} heap +${mb(after - before).padStart(10)}  admitted ${admitted}  journal ${pending}  dropped ${dropped}  ` +
      `${((elapsed * 1e6) / CALLS).toFixed(0)} ns/call`,
  );
  await limiter.close();
  redis.disconnect();
}

console.log(`${CALLS.toLocaleString('en-US')} calls, distinct ${KEY_LENGTH}-character keys, Redis down (Node ${process.version})`);
await measure('defaults', {});
await measure('reconcile: false (local window alone)', { reconcile: false });
const arg = process.argv[2];
if (arg !== undefined) await measure(arg, JSON.parse(arg) as Partial<ResilientLimiterOptions>);
process.exit(0);
