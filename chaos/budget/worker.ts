/**
 * One service instance spending a token budget (`chaos/budget.test.ts`) in a process of its own, as
 * users run it: its own client (`createRedisClient`), a `ResilientLimiter` with `instances: 'auto'`
 * and a `Budget` from the built package. Each of `parallel` lanes reserves a random estimate, waits a
 * random time, then settles a random actual (above or below), cancels, or never settles. Everything
 * is printed to stdout as it happens, so that a process killed with SIGKILL is accounted for too:
 * - `R <id> <asked at> <estimate> <counted 0/1>`: a reservation admitted (asked at: epoch ms, before the call);
 * - `S <id> <asked at> <kind> <actual>`: a settle (kind `settle`) or a cancel (`cancel`) is sent;
 * - `D <id> <charged> <givenBack> <extra> <late 0/1> <pending 0/1>`: its result;
 * - `N <id>`: this reservation will never be settled.
 */
import { loadLibrary } from '../library.ts';

export type Setup = {
  readonly port: number;
  readonly prefix: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly instances: number;
  readonly parallel: number;
  readonly estimate: readonly [number, number];
  readonly holdMs: readonly [number, number];
};

export type FromWorker = { readonly kind: 'counted' } | { readonly kind: 'done'; readonly refused: number; readonly errors: string[] };

export type ToWorker = { readonly kind: 'setup'; readonly setup: Setup } | { readonly kind: 'go' } | { readonly kind: 'stop' };

const errors: string[] = [];
process.on('unhandledRejection', (reason) => errors.push(`unhandled rejection: ${String(reason)}`));
process.on('uncaughtException', (error) => errors.push(`uncaught exception: ${String(error)}`));

const lib = await loadLibrary();
let setup: Setup | undefined;
let limiter: InstanceType<typeof lib.ResilientLimiter> | undefined;
let budget: InstanceType<typeof lib.Budget> | undefined;
let redis: ReturnType<typeof lib.createRedisClient> | undefined;
let running = false;
let refused = 0;
let loops: Promise<void>[] = [];

function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

function between([low, high]: readonly [number, number]): number {
  return Math.round(low + Math.random() * (high - low));
}

async function start(s: Setup): Promise<void> {
  setup = s;
  redis = lib.createRedisClient({ host: '127.0.0.1', port: s.port });
  redis.on('error', () => undefined);
  limiter = new lib.ResilientLimiter({
    redis,
    prefix: s.prefix,
    limit: s.limit,
    windowMs: s.windowMs,
    heartbeatMs: 200,
    local: { instances: 'auto' },
  });
  budget = new lib.Budget(limiter);
  while (limiter.stats().instances < s.instances) await new Promise((resolve) => setTimeout(resolve, 20));
  process.send?.({ kind: 'counted' } satisfies FromWorker);
}

async function once(): Promise<void> {
  const s = setup as Setup;
  const b = budget as NonNullable<typeof budget>;
  const estimate = between(s.estimate);
  // One in ten with a TTL shorter than the wait: settled late.
  const short = Math.random() < 0.1;
  const askedAt = Date.now();
  const r = await b.reserve('tokens', estimate, short ? { ttlMs: 10 } : {});
  if (!r.allowed) {
    refused += 1;
    await new Promise((resolve) => setTimeout(resolve, 20)); // a caller told to come back later
    return;
  }
  out(`R ${r.id} ${askedAt} ${estimate} ${r.counted ? 1 : 0}`);
  await new Promise((resolve) => setTimeout(resolve, between(s.holdMs)));
  const fate = Math.random();
  if (fate < 0.1) {
    out(`N ${r.id}`);
    return;
  }
  const cancel = fate < 0.2;
  // Above the estimate four times in ten (up to twice it), below otherwise.
  const actual = cancel ? 0 : Math.random() < 0.4 ? estimate + between([1, estimate]) : between([0, estimate]);
  out(`S ${r.id} ${Date.now()} ${cancel ? 'cancel' : 'settle'} ${actual}`);
  const result = cancel ? await b.cancel(r) : await b.settle(r, actual);
  out(`D ${r.id} ${result.charged} ${result.givenBack} ${result.extra} ${result.late ? 1 : 0} ${result.pending ? 1 : 0}`);
}

async function loop(): Promise<void> {
  while (running) {
    try {
      await once();
    } catch (error) {
      errors.push(`budget: ${String(error)}`);
    }
  }
}

process.on('message', (message: ToWorker) => {
  if (message.kind === 'setup') {
    void start(message.setup).catch((error: unknown) => {
      console.error(`budget worker: setup failed: ${String(error)}`);
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
      process.send?.({ kind: 'done', refused, errors } satisfies FromWorker, () => {
        clearInterval(alive);
        process.disconnect();
      });
    })();
  }
});
