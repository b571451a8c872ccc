/**
 * One service instance holding slots of a `ConcurrencyLimiter` (`chaos/concurrency.test.ts`), in a
 * process of its own, as users run them: its own client (`createRedisClient`) and the built package,
 * `instances: 'auto'`. The parent sends `setup`, waits until every worker counted all instances and
 * was granted a share, sends `go` (tasks start), then `stop`; the worker answers with every slot it
 * held (from when `acquire()` resolved to when `release()` was called) and exits. Each held slot is
 * also printed to stdout as it starts and ends, `HOLD <id> <epoch ms> <source>` and `FREE <id> <epoch ms>`,
 * so that the parent knows what a process killed with SIGKILL held, and when.
 */
import { loadLibrary } from '../library.ts';
import type { Mode } from '../../src/index.ts';

export type Setup = {
  readonly port: number;
  readonly prefix: string;
  readonly max: number;
  readonly ttlMs: number;
  readonly mode: Mode;
  readonly instances: number;
  readonly heartbeatMs: number;
  /** Tasks this worker runs, `parallel` at a time, each holding a slot `holdMs[0] … holdMs[1]` ms. */
  readonly tasks: number;
  readonly parallel: number;
  readonly holdMs: readonly [number, number];
  /** How long a task waits for a slot before it gives up (and tries again), ms. */
  readonly maxWaitMs: number;
};

/** A slot held: [acquired (epoch ms), released (epoch ms), source]. */
export type Held = [number, number, string];

export type FromWorker =
  | { readonly kind: 'counted'; readonly share: number }
  | {
      readonly kind: 'done';
      readonly held: Held[];
      /** Tasks run to their end, acquires that got no slot within maxWaitMs, slots reported lost. */
      readonly done: number;
      readonly refused: number;
      readonly lost: number;
      readonly errors: string[];
    };

export type ToWorker = { readonly kind: 'setup'; readonly setup: Setup } | { readonly kind: 'go' } | { readonly kind: 'stop' };

const errors: string[] = [];
process.on('unhandledRejection', (reason) => errors.push(`unhandled rejection: ${String(reason)}`));
process.on('uncaughtException', (error) => errors.push(`uncaught exception: ${String(error)}`));

const lib = await loadLibrary();
let setup: Setup | undefined;
let limiter: InstanceType<typeof lib.ConcurrencyLimiter> | undefined;
let redis: ReturnType<typeof lib.createRedisClient> | undefined;
let running = false;
const held: Held[] = [];
let done = 0;
let refused = 0;
let lost = 0;
let loops: Promise<void>[] = [];

function send(message: FromWorker): void {
  process.send?.(message);
}

async function start(s: Setup): Promise<void> {
  setup = s;
  redis = lib.createRedisClient({ host: '127.0.0.1', port: s.port });
  redis.on('error', () => undefined);
  limiter = new lib.ConcurrencyLimiter({
    redis,
    prefix: s.prefix,
    max: s.max,
    ttlMs: s.ttlMs,
    mode: s.mode,
    heartbeatMs: s.heartbeatMs,
  });
  limiter.on('lost', () => {
    lost += 1;
  });
  // Counted once every instance beat and this one was granted its share of max.
  const share = Math.floor(s.max / s.instances);
  while (limiter.stats().share !== share) await new Promise((resolve) => setTimeout(resolve, 20));
  send({ kind: 'counted', share });
}

async function task(): Promise<void> {
  const s = setup as Setup;
  const l = limiter as NonNullable<typeof limiter>;
  const slot = await l.acquire('jobs', { maxWaitMs: s.maxWaitMs });
  if (slot === undefined) {
    refused += 1;
    return;
  }
  const at = Date.now();
  process.stdout.write(`HOLD ${slot.id} ${at} ${slot.source}\n`);
  const [low, high] = s.holdMs;
  await new Promise((resolve) => setTimeout(resolve, low + Math.random() * (high - low)));
  const end = Date.now();
  held.push([at, end, slot.source]);
  process.stdout.write(`FREE ${slot.id} ${end}\n`);
  await slot.release();
  done += 1;
}

async function loop(): Promise<void> {
  const s = setup as Setup;
  while (running && done < s.tasks) {
    try {
      await task();
    } catch (error) {
      errors.push(`task: ${String(error)}`);
    }
  }
}

process.on('message', (message: ToWorker) => {
  if (message.kind === 'setup') {
    void start(message.setup).catch((error: unknown) => {
      console.error(`slots worker: setup failed: ${String(error)}`);
      errors.push(`setup: ${String(error)}`);
    });
  }
  if (message.kind === 'go') {
    running = true;
    loops = Array.from({ length: (setup as Setup).parallel }, () => loop());
  }
  if (message.kind === 'stop') {
    running = false;
    const alive = setInterval(() => undefined, 1000);
    void (async () => {
      await Promise.allSettled(loops);
      await limiter?.close().catch((error: unknown) => errors.push(`close: ${String(error)}`));
      redis?.disconnect();
      process.send?.({ kind: 'done', held, done, refused, lost, errors } satisfies FromWorker, () => {
        clearInterval(alive);
        process.disconnect();
      });
    })();
  }
});
