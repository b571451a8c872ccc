/**
 * A process overloaded by its own request handlers, for `test/serial/overload.test.ts`, which
 * forks it (`node test/support/overloadWorker.ts '<json>'`, see {@link WorkerConfig}) and reads one
 * {@link WorkerReport} from its IPC channel.
 *
 * Requests arrive open-loop (request i at i / `rate` s, issued by a timer that ticks every ~1 ms,
 * whether or not earlier ones are done); each awaits `limiter.limit(key)`, then its handler burns
 * `burnMs` of CPU synchronously. Past one core's worth (rate × burnMs > 1 s per s) the event loop
 * never idles, and requests pile up: one waiting longer than `shedAfterMs` to start is shed (counted,
 * never issued), as a server's bounded accept queue would, so that turns stay bounded. Optionally the
 * worker freezes Redis itself (SIGSTOP to `redisPid`, the server the test started) at `freezeAtMs`,
 * so that the freeze is timed on this process's clock; the test thaws it.
 *
 * A 1 ms interval measures this process's own event-loop stalls: each gap between its runs is one
 * loop iteration (one turn's worth of handlers, timers and I/O).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import '../../bench/support/sourceHooks.ts';
import type { DecisionReason, DecisionSource } from '../../src/index.ts';

/** Run `src/` as it is (see sourceHooks.ts): a dynamic import, after the hooks are in place. */
const { createRedisClient, ResilientLimiter } = await import('../../src/index.ts');

export type WorkerConfig = {
  port: number;
  /** Pid of the redis-server on `port`: the worker checks that it talks to it, and freezes it at `freezeAtMs`. */
  redisPid: number;
  /** Requests offered per second. */
  rate: number;
  /** CPU each handler burns after its decision, ms. */
  burnMs: number;
  /** How long requests are offered, ms. */
  durationMs: number;
  /** A request not started within this of its scheduled time is shed, ms. */
  shedAfterMs: number;
  keys: number;
  limit: number;
  windowMs: number;
  /** When to SIGSTOP Redis, ms from the start (never when absent). */
  freezeAtMs?: number;
};

export type CallRecord = { issuedMs: number; settledMs: number; allowed: boolean; source: DecisionSource; reason: DecisionReason };

export type WorkerReport = {
  offered: number;
  shed: number;
  calls: CallRecord[];
  /** Breaker state changes, ms from the start. */
  states: { atMs: number; state: string }[];
  /** This process's event-loop iterations longer than 2 ms: start (ms from the start) and length. */
  stalls: { atMs: number; gapMs: number }[];
  /** When Redis was frozen, ms from the start (undefined: it was not). */
  frozeAtMs?: number;
  /** The share of the run's wall time this process's event loop was busy (not waiting for I/O), 0 to 1. */
  utilization: number;
};

const config = JSON.parse(process.argv[2] as string) as WorkerConfig;

function burn(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

const redis = createRedisClient({ host: '127.0.0.1', port: config.port });
await new Promise<void>((resolve) => (redis.status === 'ready' ? resolve() : redis.once('ready', () => resolve())));
const serverPid = /^process_id:(\d+)/m.exec(await redis.info('server'))?.[1];
if (serverPid !== String(config.redisPid)) throw new Error(`port ${config.port} is served by pid ${serverPid}, not ${config.redisPid}`);

const limiter = new ResilientLimiter({
  redis,
  prefix: `overload:${randomUUID()}:`,
  limit: config.limit,
  windowMs: config.windowMs,
  mode: 'fail-open',
  local: { instances: 1 },
  // The defaults otherwise: a 50 ms deadline, slowCallMs 'auto'.
});
const keys = Array.from({ length: config.keys }, (_, i) => `user:${i}`);
// Warm: the script loaded, the clock offset known, before the load starts.
for (const key of keys) await limiter.limit(`warm:${key}`);

const start = performance.now();
const at = (): number => performance.now() - start;
const report: WorkerReport = { offered: 0, shed: 0, calls: [], states: [], stalls: [], utilization: 0 };
limiter.on('stateChange', ({ state }) => report.states.push({ atMs: at(), state }));

let lastTick = at();
const stallTimer = setInterval(() => {
  const now = at();
  if (now - lastTick > 2) report.stalls.push({ atMs: lastTick, gapMs: now - lastTick });
  lastTick = now;
}, 1);

if (config.freezeAtMs !== undefined) {
  setTimeout(() => {
    process.kill(config.redisPid, 'SIGSTOP');
    report.frozeAtMs = at();
  }, config.freezeAtMs);
}

const elu0 = performance.eventLoopUtilization();
let pending = 0;
const total = Math.round((config.rate * config.durationMs) / 1000);

async function handle(key: string): Promise<void> {
  const issuedMs = at();
  const decision = await limiter.limit(key);
  report.calls.push({ issuedMs, settledMs: at(), allowed: decision.allowed, source: decision.source, reason: decision.reason });
  burn(config.burnMs);
}

while (report.offered < total) {
  const now = at();
  const due = Math.min(total, Math.floor((now * config.rate) / 1000) + 1);
  for (; report.offered < due; report.offered += 1) {
    const scheduledMs = (report.offered * 1000) / config.rate;
    if (now - scheduledMs > config.shedAfterMs) {
      report.shed += 1;
      continue;
    }
    pending += 1;
    void handle(keys[report.offered % keys.length] as string).finally(() => (pending -= 1));
  }
  await new Promise((resolve) => setTimeout(resolve, 1));
}
report.utilization = performance.eventLoopUtilization(elu0).utilization;
while (pending > 0) await new Promise((resolve) => setTimeout(resolve, 5));
clearInterval(stallTimer);
if (report.frozeAtMs !== undefined) process.kill(config.redisPid, 'SIGCONT');
await limiter.close();
redis.disconnect();
process.send?.(report, () => process.exit(0));
