import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import {
  createRedisClient,
  ResilientLimiter,
  type BreakerOptions,
  type BreakerState,
  type DecisionReason,
  type DecisionSource,
  type LimiterDecision,
  type Mode,
} from '../src/index.ts';
import { measure, type Call } from './metrics.ts';
import type { ChaosBackend, OverWindow, Phase, ProxiedRedis, ScenarioResult } from './types.ts';

/** What a fault phase can reach. */
export type ScenarioContext = {
  readonly backend: ChaosBackend;
  readonly redis: ProxiedRedis;
  /** A client to Redis without the proxy, for admin commands. */
  readonly admin: Redis;
};

/** A span of the scenario; `start` runs at `atMs`, `stop` at `untilMs`. */
export type PhaseSpec = {
  readonly name: string;
  readonly atMs: number;
  readonly untilMs: number;
  readonly start?: (context: ScenarioContext) => Promise<void>;
  readonly stop?: (context: ScenarioContext) => Promise<void>;
};

/** Checks a scenario adds to the common ones, from its measured result. */
export type Check = { readonly name: string; readonly pass: boolean; readonly detail: string };

export type ScenarioSpec = {
  readonly name: string;
  readonly title: string;
  readonly mode?: Mode;
  readonly instances?: number;
  readonly limit?: number;
  readonly windowMs?: number;
  readonly keys?: number;
  /** Offered calls per second, all instances together. */
  readonly rate?: number;
  readonly durationMs?: number;
  readonly reconcile?: boolean;
  readonly breaker?: BreakerOptions;
  /** Fault phases, in order; the time outside them is healthy. */
  readonly faults: readonly PhaseSpec[];
  /** Admitted permits allowed over the limit in any window (the bound the mode promises). */
  readonly maxExcess?: number;
  readonly checks?: (result: ScenarioResult) => Check[];
};

const BUCKET_MS = 100;
/** Slack on decision latency over the breaker deadline: timers and a loaded event loop. */
const LATENCY_SLACK_MS = 40;

/**
 * Runs one scenario: `instances` limiters, each with its own client through one Toxiproxy proxy,
 * under an open-loop load of `rate` calls/s over `keys` keys; the fault phases run on schedule.
 * Every call is recorded; the result holds only measured figures.
 */
export async function runScenario(backend: ChaosBackend, spec: ScenarioSpec): Promise<ScenarioResult> {
  const mode = spec.mode ?? 'local';
  const instances = spec.instances ?? 1;
  const limit = spec.limit ?? 20;
  const windowMs = spec.windowMs ?? 1000;
  const keys = spec.keys ?? 10;
  const rate = spec.rate ?? 400;
  const durationMs = spec.durationMs ?? 6000;
  const reconcile = spec.reconcile ?? true;
  const breaker: BreakerOptions = {
    timeoutMs: 50,
    resetTimeoutMs: 200,
    maxResetTimeoutMs: 800,
    volumeThreshold: 5,
    ...spec.breaker,
  };
  const timeoutMs = breaker.timeoutMs ?? 50;

  const redis = await backend.createRedisProxy(`resilimit-${spec.name}`);
  const admin = createRedisClient({ host: backend.redis.host, port: backend.redis.port, enableOfflineQueue: true });
  await admin.flushall();
  const prefix = `chaos:${spec.name}:`;
  const clients = Array.from({ length: instances }, () => createRedisClient({ host: redis.host, port: redis.port }));
  await Promise.all(clients.map((c) => ready(c)));
  const limiters = clients.map(
    (client) =>
      new ResilientLimiter({
        redis: client,
        prefix,
        limit,
        windowMs,
        mode,
        breaker,
        reconcile,
        local: { instances },
      }),
  );

  const context: ScenarioContext = { backend, redis, admin };
  const calls: Call[] = [];
  const stateChanges: { atMs: number; instance: number; state: BreakerState }[] = [];
  let unhandled = 0;
  const onUnhandled = (): void => {
    unhandled += 1;
  };
  process.on('unhandledRejection', onUnhandled);

  const t0 = performance.now();
  const epoch0 = Date.now();
  for (const [instance, l] of limiters.entries()) {
    l.on('stateChange', ({ state }) => stateChanges.push({ atMs: performance.now() - t0, instance, state }));
  }

  const phaseRuns = spec.faults.map((phase) => schedule(phase, t0, context));
  const pending: Promise<void>[] = [];
  let issued = 0;
  // The driver wakes every ~1 ms: a longer gap is this process's event loop held up (a child process
  // spawned by a fault, a GC), which delays every answer pending at that moment, whoever makes it.
  const stalls: { atMs: number; gapMs: number }[] = [];
  let lastWake = performance.now();
  try {
    while (performance.now() - t0 < durationMs) {
      const wake = performance.now();
      if (wake - lastWake > 3) stalls.push({ atMs: lastWake - t0, gapMs: wake - lastWake - 1 });
      lastWake = wake;
      const due = Math.floor(((performance.now() - t0) * rate) / 1000);
      while (issued < due) {
        const n = issued++;
        const limiter = limiters[n % instances] as ResilientLimiter;
        const key = `k${Math.floor(n / instances) % keys}`;
        pending.push(issue(limiter, n % instances, key, { t0, epoch0, windowMs }, calls));
      }
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    await Promise.all(pending);
    await Promise.all(phaseRuns);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    await Promise.all(limiters.map((l) => l.close()));
    for (const c of clients) c.disconnect();
    await backend.toxiproxy.reset().catch(() => undefined);
    await redis.proxy.remove().catch(() => undefined);
    admin.disconnect();
  }

  const phases: Phase[] = spec.faults.map((f) => ({ name: f.name, startMs: f.atMs, endMs: f.untilMs, fault: true }));
  const measured = measure({ calls, phases, windowMs, limit, durationMs, bucketMs: BUCKET_MS, stateChanges, instances, stalls });
  const base = {
    name: spec.name,
    title: spec.title,
    backend: backend.kind,
    mode,
    instances,
    limit,
    windowMs,
    keys,
    rate,
    durationMs,
    reconcile,
    breakerTimeoutMs: timeoutMs,
    phases,
    bucketMs: BUCKET_MS,
    timeline: measured.timeline,
    stateChanges,
    metrics: { ...measured.metrics, unhandledRejections: unhandled },
    checks: [] as Check[],
  } satisfies ScenarioResult;
  const m = base.metrics;
  const common: Check[] = [
    { name: 'limit() never threw', pass: m.exceptions === 0, detail: `${m.exceptions} exceptions` },
    { name: 'no unhandled rejections', pass: m.unhandledRejections === 0, detail: `${m.unhandledRejections}` },
    {
      // Less any event-loop stall of this process during the call: it delays the deadline's own timer.
      name: `every decision within the deadline (${timeoutMs} ms + ${LATENCY_SLACK_MS} ms, plus any event-loop stall of this process during it)`,
      pass: m.latencyNetOfStallsMax <= timeoutMs + LATENCY_SLACK_MS,
      detail: `max ${m.latency.max.toFixed(1)} ms, ${m.latencyNetOfStallsMax.toFixed(1)} ms net of event-loop stalls`,
    },
  ];
  if (spec.maxExcess !== undefined) {
    common.push({
      name: `admitted permits over the limit in any window <= ${spec.maxExcess}`,
      pass: m.overLimit.maxExcess <= spec.maxExcess,
      detail: `max excess ${m.overLimit.maxExcess}, ${m.overLimit.callsOver} calls over${overDetail(m.overLimit.firstOver)}`,
    });
  }
  return { ...base, checks: [...common, ...(spec.checks?.(base) ?? [])] };
}

async function issue(
  limiter: ResilientLimiter,
  instance: number,
  key: string,
  { t0, epoch0, windowMs }: { t0: number; epoch0: number; windowMs: number },
  calls: Call[],
): Promise<void> {
  const start = performance.now();
  let decision: LimiterDecision | undefined;
  try {
    decision = await limiter.limit(key);
  } catch {
    decision = undefined;
  }
  const end = performance.now();
  calls.push({
    issuedMs: start - t0,
    latencyMs: end - start,
    instance,
    key,
    allowed: decision?.allowed ?? false,
    source: decision?.source as DecisionSource | undefined,
    reason: decision?.reason as DecisionReason | undefined,
    // The admission time on the deciding tier's clock (its window's own timeline), relative to t0.
    admittedAtMs:
      decision?.allowed === true
        ? decision.source === 'redis' || decision.source === 'local'
          ? decision.resetAtMs - windowMs - epoch0
          : start - t0
        : undefined,
    threw: decision === undefined,
  });
}

async function schedule(phase: PhaseSpec, t0: number, context: ScenarioContext): Promise<void> {
  await sleepUntil(t0 + phase.atMs);
  await phase.start?.(context);
  await sleepUntil(t0 + phase.untilMs);
  await phase.stop?.(context);
}

async function sleepUntil(at: number): Promise<void> {
  const wait = at - performance.now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
}

async function ready(client: Redis): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`client not ready: ${client.status}`)), 5000);
    client.once('ready', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** The first window over the limit, compactly: `key k3: 1512.301 redis/decided #0, …`. */
function overDetail(first: OverWindow | undefined): string {
  if (first === undefined) return '';
  const calls = first.calls.map((c) => `${c.atMs.toFixed(3)} ${c.source}/${c.reason} #${c.instance}`);
  return `; first window over the limit, key ${first.key}: ${calls.join(', ')}`;
}
