/**
 * One process of `test/serial/sentinel.test.ts`: a `ResilientLimiter` on a client from
 * `createRedisClient({ sentinels, name })`, offering a steady load and recording every decision.
 * Run with `child_process.fork` (Node 24 strips the types; `bench/support/sourceHooks.ts` lets it run
 * `src/` as it is, not a build). Talks to its parent over IPC:
 *
 *   worker → parent  { type: 'ready' }       the client is ready and the limiter counts 2 instances
 *   parent → worker  { type: 'start' }       offer the load
 *   parent → worker  { type: 'killed' }      the master was killed
 *   worker → parent  { type: 'back', at }    Redis decided a call made after 'killed' (first time only)
 *   parent → worker  { type: 'stop' }        stop, close, and send the report
 *   worker → parent  { type: 'report', … }   then the worker exits by itself
 *
 * Times are `performance.timeOrigin + performance.now()`: one timeline for every process on the host.
 */
import '../../bench/support/sourceHooks.ts';

const { createRedisClient, ResilientLimiter } = (await import('../../src/index.ts')) as typeof import('../../src/index.ts');

export type WorkerConfig = {
  sentinels: { host: string; port: number }[];
  name: string;
  prefix: string;
  keys: string[];
  limit: number;
  windowMs: number;
  /** One call per key every `tickMs`. */
  tickMs: number;
};

export type Row = {
  at: number;
  key: string;
  latencyMs: number;
  allowed?: boolean;
  source?: string;
  reason?: string;
  resetAtMs?: number;
  error?: string;
};

export type WorkerReport = {
  type: 'report';
  pid: number;
  rows: Row[];
  /** Event-loop stalls of this process: the loop did not run from `at` for `gapMs` more than the monitor's period. */
  stalls: { at: number; gapMs: number }[];
  states: { at: number; state: string }[];
  /** The client's 'ready' events, with the port it is connected to. */
  readies: { at: number; port: number | undefined }[];
  /** Uncaught exceptions and unhandled rejections in this process. */
  failures: string[];
  localLimit: number;
  instances: number;
};

const now = (): number => performance.timeOrigin + performance.now();
const config = JSON.parse(process.argv[2] as string) as WorkerConfig;
const failures: string[] = [];
process.on('uncaughtException', (error) => failures.push(`uncaught: ${String(error)}`));
process.on('unhandledRejection', (reason) => failures.push(`unhandled: ${String(reason)}`));
const send = (message: object): void => void process.send?.(message);

const redis = createRedisClient({ sentinels: config.sentinels, name: config.name });
const readies: WorkerReport['readies'] = [];
const portOf = (): number | undefined => (redis as unknown as { stream?: { remotePort?: number } }).stream?.remotePort;
redis.on('ready', () => readies.push({ at: now(), port: portOf() }));
await new Promise((resolve) => redis.once('ready', resolve));

const limiter = new ResilientLimiter({ redis, prefix: config.prefix, limit: config.limit, windowMs: config.windowMs, mode: 'local' });
const states: WorkerReport['states'] = [];
limiter.on('stateChange', ({ state }) => states.push({ at: now(), state }));
// Two processes share the limit: each one's local share is ceil(limit / 2) once it counts both.
await new Promise<void>((resolve) => {
  if (limiter.stats().instances >= 2) resolve();
  limiter.on('instances', (count) => {
    if (count >= 2) resolve();
  });
});
send({ type: 'ready' });

// The lag monitor: a 5 ms interval that wakes later than that was held up by this process's loop.
const PERIOD_MS = 5;
const stalls: WorkerReport['stalls'] = [];
let lastBeat = now();
const monitor = setInterval(() => {
  const t = now();
  if (t - lastBeat > PERIOD_MS + 2) stalls.push({ at: lastBeat, gapMs: t - lastBeat - PERIOD_MS });
  lastBeat = t;
}, PERIOD_MS);

const rows: Row[] = [];
const pending = new Set<Promise<void>>();
let killed = Infinity;
let backSent = false;
let load: NodeJS.Timeout | undefined;

process.on('message', (message: { type: string }) => {
  if (message.type === 'start') {
    lastBeat = now();
    load = setInterval(tick, config.tickMs);
  } else if (message.type === 'killed') {
    killed = now();
  } else if (message.type === 'stop') {
    void stop();
  }
});
// The parent is gone (a crashed test run): nothing must keep running.
process.on('disconnect', () => process.exit(1));

function tick(): void {
  for (const key of config.keys) {
    const at = now();
    const row: Row = { at, key, latencyMs: 0 };
    rows.push(row);
    const p = limiter.limit(key).then(
      (d) => {
        row.latencyMs = now() - at;
        Object.assign(row, { allowed: d.allowed, source: d.source, reason: d.reason, resetAtMs: d.resetAtMs });
        if (d.source === 'redis' && at > killed && !backSent) {
          backSent = true;
          send({ type: 'back', at });
        }
      },
      (error: unknown) => {
        row.latencyMs = now() - at;
        row.error = String(error);
      },
    );
    pending.add(p);
    void p.finally(() => pending.delete(p));
  }
}

async function stop(): Promise<void> {
  clearInterval(load);
  await Promise.all(pending);
  clearInterval(monitor);
  const { localLimit, instances } = limiter.stats();
  await limiter.close();
  await redis.quit().catch(() => redis.disconnect());
  const report: WorkerReport = { type: 'report', pid: process.pid, rows, stalls, states, readies, failures, localLimit, instances };
  process.removeAllListeners('disconnect');
  process.send?.(report, () => process.disconnect());
}
