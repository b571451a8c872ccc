/**
 * One service instance of a chaos run, in a process of its own: it imports the user's config module,
 * builds the limiter against its own proxy's address, offers its load when told, and answers with
 * every call it made. Started by `run.ts` through `child_process.fork`; not an entry for users.
 */
import type { ResilientLimiter } from '../limiter/ResilientLimiter.js';
import type { BreakerState } from '../redis/Breaker.js';
import { buildInstance, ChaosUsageError, loadChaosConfig } from './config.js';
import type { CallRecord, FromWorker, ToWorker, WorkerSetup } from './protocol.js';
import { startSlots, type SlotRun } from './slotWorker.js';

const errors: string[] = [];
let unhandledRejections = 0;
process.on('unhandledRejection', (reason) => {
  unhandledRejections += 1;
  errors.push(`unhandled rejection: ${String(reason)}`);
});
process.on('uncaughtException', (error) => errors.push(`uncaught exception: ${String(error)}`));
process.on('warning', (warning) => {
  if (errors.length < 50) errors.push(`warning ${(warning as { code?: string }).code ?? warning.name}: ${warning.message}`);
});

const now = (): number => performance.timeOrigin + performance.now();
let setup: WorkerSetup | undefined;
let built: { limiter: ResilientLimiter; close: () => Promise<void> } | undefined;
/** A `ConcurrencyLimiter`'s run, instead of `built`: tasks hold slots. */
let slots: { run: SlotRun; close: () => Promise<void> } | undefined;
let running = false;
const calls: CallRecord[] = [];
const stalls: [number, number][] = [];
const states: [number, BreakerState][] = [];
const pending = new Set<Promise<void>>();

function send(message: FromWorker, then: () => void = () => undefined): void {
  process.send?.(message, undefined, {}, then);
}

async function start(s: WorkerSetup): Promise<void> {
  setup = s;
  const loaded = await loadChaosConfig(s.config);
  const made = await buildInstance(s.config, loaded, { host: s.host, port: s.port, instance: s.instance });
  if (made.kind === 'slots') {
    slots = { run: await startSlots(s, loaded, made.limiter, errors), close: made.close };
    send({ kind: 'ready', counted: slots.run.counted, profile: slots.run.profile });
    return;
  }
  built = made;
  const { limiter } = built;
  limiter.on('stateChange', ({ state }) => states.push([now(), state]));
  // Counted once every instance beat: the shares are right before the load starts. A limiter with a
  // fixed `local.instances` has nothing to count (no lease in its stats).
  const until = Date.now() + s.countWithinMs;
  for (;;) {
    const stats = limiter.stats();
    // Counting limiters also wait for a share of their own: claims settle within a few beats.
    const counting = stats.leaseMs !== undefined;
    if (stats.redisReady && (!counting || (stats.instances >= s.instances && stats.localLimit > 0))) break;
    if (Date.now() > until) {
      throw new Error(
        `instance ${s.instance}: ${stats.redisReady ? `counted ${stats.instances} of ${s.instances} instances, local share ${stats.localLimit}` : 'its Redis client was never ready'} after ${s.countWithinMs} ms`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const stats = limiter.stats();
  send({
    kind: 'ready',
    counted: stats.instances,
    profile: {
      limit: stats.limit,
      windowMs: stats.windowMs,
      mode: stats.mode,
      timeoutMs: stats.timeoutMs,
      instances: stats.instances,
      localLimit: stats.localLimit,
      ...(stats.leaseMs === undefined ? {} : { leaseMs: stats.leaseMs }),
    },
  });
}

function issue(limiter: ResilientLimiter, keyIndex: number, key: string, windowMs: number): void {
  const issued = now();
  const call = limiter.limit(key).then(
    (d) => {
      const decided = d.source === 'redis' || d.source === 'local';
      const admitted = d.allowed ? (decided ? d.resetAtMs - windowMs : issued) : -1;
      calls.push([issued, now() - issued, keyIndex, d.allowed ? 1 : 0, d.source, d.reason, admitted, d.limit, 0]);
    },
    (error: unknown) => {
      if (errors.length < 50) errors.push(`limit() threw: ${String(error)}`);
      calls.push([issued, now() - issued, keyIndex, 0, 'none', 'none', -1, 0, 1]);
    },
  );
  pending.add(call);
  void call.finally(() => pending.delete(call));
}

/** Offers the load from `atEpochMs`: wakes about every ms; a longer gap is this process's own event-loop stall. */
async function load(atEpochMs: number, perSecond: number): Promise<void> {
  const s = setup as WorkerSetup;
  const { limiter } = built as NonNullable<typeof built>;
  const windowMs = limiter.stats().windowMs;
  const wait = atEpochMs - now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  let issued = 0;
  let last = now();
  running = true;
  while (running) {
    const wake = now();
    if (wake - last > 3) stalls.push([last, wake - last - 1]);
    last = wake;
    const due = Math.floor(((wake - atEpochMs) * perSecond) / 1000);
    while (issued < due) {
      const k = issued++ % s.keys.length;
      issue(limiter, k, s.keys[k] as string, windowMs);
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

async function stopSlots(graceMs: number): Promise<void> {
  const { run, close } = slots as NonNullable<typeof slots>;
  const alive = setInterval(() => undefined, 1000); // the limiter's timers are unref'd
  const done = await run.stop(graceMs);
  await close().catch((error: unknown) => errors.push(`close: ${String(error)}`));
  send({ ...done, unhandledRejections, errors }, () => {
    clearInterval(alive);
    process.exit(0);
  });
}

async function stop(graceMs: number): Promise<void> {
  if (slots !== undefined) return stopSlots(graceMs);
  running = false;
  const alive = setInterval(() => undefined, 1000); // the limiter's timers are unref'd
  await Promise.race([Promise.allSettled([...pending]), new Promise((resolve) => setTimeout(resolve, graceMs))]);
  const unanswered = pending.size;
  const { limiter, close } = built as NonNullable<typeof built>;
  const stats = limiter.stats();
  await close().catch((error: unknown) => errors.push(`close: ${String(error)}`));
  // Exits once the message is out: a long run's calls are not sent at once.
  send({ kind: 'done', calls, stalls, states, unanswered, unhandledRejections, stats, errors }, () => {
    clearInterval(alive);
    process.exit(0);
  });
}

process.on('message', (message: ToWorker) => {
  if (message.kind === 'setup') {
    start(message.setup).catch((error: unknown) => {
      send(
        { kind: 'failed', usage: error instanceof ChaosUsageError, message: error instanceof Error ? error.message : String(error) },
        () => process.exit(1),
      );
    });
  } else if (message.kind === 'go') {
    if (slots !== undefined) slots.run.go(message.atEpochMs);
    else void load(message.atEpochMs, message.perSecond);
  } else {
    void stop(message.graceMs);
  }
});
process.on('disconnect', () => process.exit(0));
