import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { Check, PhaseSpec, ScenarioContext, ScenarioSpec } from './runner.ts';
import type { ScenarioResult } from './types.ts';

// Every scenario: 6 s, healthy for 1.5 s, a fault for 2 s, then 2.5 s of recovery; 10 keys at a
// limit of 20 per 1 s window, offered 400 calls/s in all (40 per key per window: twice the limit).
const FAULT = { atMs: 1500, untilMs: 3500 } as const;

/** A fault phase from the proxy's point of view: add a toxic, remove it. */
function toxic(name: string, type: string, attributes: Record<string, number>, stream = 'downstream'): PhaseSpec {
  return {
    name,
    ...FAULT,
    start: async ({ redis }) => {
      await redis.proxy.addToxic({ name, type, stream, toxicity: 1, attributes } as never);
    },
    stop: async ({ backend }) => {
      await backend.toxiproxy.reset();
    },
  };
}

function setEnabled(context: ScenarioContext, enabled: boolean): Promise<unknown> {
  const { proxy } = context.redis;
  return proxy.update({ enabled, listen: proxy.listen, upstream: proxy.upstream } as never);
}

const fraction = (r: ScenarioResult, reason: string): number =>
  (r.metrics.byReason[reason as keyof typeof r.metrics.byReason] ?? 0) / Math.max(r.metrics.decisions, 1);

function opensAndCloses(r: ScenarioResult, fast = true): Check[] {
  const checks: Check[] = [
    {
      name: 'the breaker opened during the fault',
      pass: r.metrics.timeToOpenMs !== undefined && r.metrics.timeToOpenMs < 1000,
      detail: `time to open ${r.metrics.timeToOpenMs ?? 'never'} ms`,
    },
    {
      name: 'the breaker closed again after the fault',
      pass: r.metrics.timeToCloseMs !== undefined && r.metrics.timeToCloseMs < 2000,
      detail: `time to close ${r.metrics.timeToCloseMs ?? 'never'} ms`,
    },
  ];
  if (fast) {
    // A stall of this process's event loop (a fault that spawns a child process, a GC) delays every
    // answer pending at that moment: each call's overlap with the stalls is taken out, as the deadline
    // check does (a call can overlap several stalls: adding the longest one fell short), and reported.
    const net = r.metrics.faultLatencyNetOfStalls;
    checks.push({
      name: 'calls during the fault were answered fast (p99 < 10 ms, net of event-loop stalls of this process)',
      pass: net.p99 < 10,
      detail: `p99 ${r.metrics.faultLatency.p99.toFixed(2)} ms, ${net.p99.toFixed(2)} ms net of stalls (longest stall ${r.metrics.faultLoopStallMs.toFixed(1)} ms)`,
    });
  }
  return checks;
}

function staysClosed(r: ScenarioResult): Check[] {
  const opened = r.stateChanges.filter((c) => c.state === 'open').length;
  return [
    { name: 'the breaker never opened', pass: opened === 0, detail: `${opened} openings` },
    {
      // A deny-cache answer repeats a rejection Redis made moments before.
      name: 'Redis decided (at least 90% of decisions, its deny cache included)',
      pass: fraction(r, 'decided') + fraction(r, 'deny-cache') >= 0.9,
      detail: `${(fraction(r, 'decided') * 100).toFixed(1)}% decided, ${(fraction(r, 'deny-cache') * 100).toFixed(1)}% deny cache`,
    },
  ];
}

/** The single-instance scenarios: one limiter, one client, one proxy. */
export const scenarios: readonly ScenarioSpec[] = [
  {
    name: 'latency-below-deadline',
    title: 'Latency 10 ms, below the 50 ms deadline',
    faults: [toxic('latency', 'latency', { latency: 10, jitter: 0 })],
    maxExcess: 0,
    checks: (r) => [
      ...staysClosed(r),
      {
        name: 'fault latency near the added delay (p99 < 50 ms)',
        pass: r.metrics.faultLatency.p99 < 50,
        detail: `p50 ${r.metrics.faultLatency.p50.toFixed(1)} ms, p99 ${r.metrics.faultLatency.p99.toFixed(1)} ms`,
      },
    ],
  },
  {
    name: 'latency-above-deadline',
    title: 'Latency 200 ms, above the 50 ms deadline',
    faults: [toxic('latency', 'latency', { latency: 200, jitter: 0 })],
    maxExcess: 0,
    checks: opensAndCloses,
  },
  {
    name: 'outage',
    title: 'Hard outage (proxy disabled)',
    faults: [
      {
        name: 'proxy disabled',
        ...FAULT,
        start: (c) => setEnabled(c, false).then(() => undefined),
        stop: (c) => setEnabled(c, true).then(() => undefined),
      },
    ],
    maxExcess: 0,
    checks: opensAndCloses,
  },
  {
    name: 'black-hole',
    title: 'Black hole (timeout toxic 0: data dropped)',
    faults: [toxic('black-hole', 'timeout', { timeout: 0 })],
    maxExcess: 0,
    checks: opensAndCloses,
  },
  {
    name: 'reset-peer',
    title: 'Connections reset (reset_peer)',
    faults: [toxic('reset', 'reset_peer', { timeout: 0 }, 'upstream')],
    maxExcess: 0,
    checks: opensAndCloses,
  },
  {
    name: 'limit-data',
    title: 'Truncated replies (limit_data 20 bytes)',
    faults: [toxic('truncate', 'limit_data', { bytes: 20 })],
    maxExcess: 0,
    checks: (r) => opensAndCloses(r).filter((c) => !c.name.startsWith('the breaker opened')),
  },
  {
    name: 'slicer',
    title: 'Fragmented replies (slicer 3 bytes)',
    faults: [toxic('slicer', 'slicer', { average_size: 3, size_variation: 1, delay: 0 })],
    maxExcess: 0,
    checks: staysClosed,
  },
  {
    name: 'bandwidth',
    title: 'Low bandwidth (1 KB/s)',
    faults: [toxic('bandwidth', 'bandwidth', { rate: 1 })],
    maxExcess: 0,
    // A Redis that answers slowly but steadily is not silent, so the slow-call gate does not divert:
    // calls wait for the deadline until the error rate opens the breaker, and each half-open trial
    // waits it too. Bounded by the deadline (the common check), not under 10 ms.
    checks: (r) => opensAndCloses(r, false),
  },
  {
    name: 'flapping',
    title: 'Flapping (proxy toggled every 300 ms)',
    faults: [
      {
        name: 'flapping',
        ...FAULT,
        start: async (c) => {
          const until = Date.now() + (FAULT.untilMs - FAULT.atMs) - 50;
          let enabled = true;
          while (Date.now() < until) {
            enabled = !enabled;
            await setEnabled(c, enabled);
            await sleep(300);
          }
          await setEnabled(c, true);
        },
      },
    ],
    maxExcess: 0,
    checks: (r) => opensAndCloses(r).filter((c) => !c.name.startsWith('the breaker opened')),
  },
  {
    name: 'frozen',
    title: 'Redis frozen (SIGSTOP, then SIGCONT)',
    faults: [
      {
        name: 'frozen',
        ...FAULT,
        start: (c) => processFaults(c).freeze(),
        stop: (c) => processFaults(c).thaw(),
      },
    ],
    maxExcess: 0,
    checks: opensAndCloses,
  },
  {
    name: 'killed',
    title: 'Redis killed and restarted (data lost)',
    faults: [
      {
        name: 'killed',
        atMs: FAULT.atMs,
        untilMs: FAULT.atMs + 200,
        start: (c) => processFaults(c).killAndRestart(),
      },
    ],
    maxExcess: 0,
    checks: (r) => opensAndCloses(r).filter((c) => !c.name.startsWith('the breaker opened')),
  },
  {
    name: 'pause-writes',
    title: 'CLIENT PAUSE WRITE for 2 s',
    faults: [
      {
        name: 'writes paused',
        ...FAULT,
        start: async ({ admin }) => {
          await admin.call('CLIENT', 'PAUSE', String(FAULT.untilMs - FAULT.atMs), 'WRITE');
        },
        stop: async ({ admin }) => {
          await admin.call('CLIENT', 'UNPAUSE');
        },
      },
    ],
    maxExcess: 0,
    checks: opensAndCloses,
  },
  {
    name: 'busy-script',
    title: 'A busy script (-BUSY replies)',
    faults: [busyScript()],
    maxExcess: 0,
    checks: opensAndCloses,
  },
];

/** Scenarios of one limiter that need more than the common setting. */
export const moreScenarios: readonly ScenarioSpec[] = [
  {
    name: 'misconf',
    title: 'Redis cannot persist (MISCONF on every write)',
    faults: [
      {
        name: 'save failed',
        ...FAULT,
        start: async (c) => {
          const faults = processFaults(c);
          if (faults.failSave === undefined) throw new Error(`the ${c.backend.kind} backend cannot fail a save`);
          await faults.failSave();
        },
        stop: async (c) => processFaults(c).allowWrites?.(),
      },
    ],
    // MISCONF is Redis unable to take the call, as OOM or READONLY: the breaker opens, the calls
    // answered locally are journalled and written back, and nothing is read as the caller's bug.
    maxExcess: 0,
    checks: (r) => [
      ...opensAndCloses(r),
      {
        name: 'no call read as a reply error',
        pass: (r.metrics.byReason['redis-reply-error'] ?? 0) === 0,
        detail: `${r.metrics.byReason['redis-reply-error'] ?? 0} reply errors`,
      },
    ],
  },
  {
    name: 'long-outage-many-keys',
    title: 'A 5 s network cut over 200 keys, 10 s windows',
    // 2,000 calls/s over 200 keys: 100 calls per key per window, 5× the limit; the outage's calls of
    // every key are journalled (about 4,000) and written back, Redis kept its data: nothing to re-seed.
    keys: 200,
    rate: 2000,
    windowMs: 10_000,
    durationMs: 9000,
    faults: [
      {
        name: 'proxy disabled',
        atMs: 1500,
        untilMs: 6500,
        start: (c) => setEnabled(c, false).then(() => undefined),
        stop: (c) => setEnabled(c, true).then(() => undefined),
      },
    ],
    maxExcess: 0,
    checks: (r) => opensAndCloses(r),
  },
];

/** The multi-instance scenarios: 4 limiters sharing the limit, 2x the limit offered, an outage in the middle. */
export const multiInstance: readonly ScenarioSpec[] = [true, false].map(
  (reconcile): ScenarioSpec => ({
    name: `four-instances-${reconcile ? 'reconciled' : 'not-reconciled'}`,
    title: `4 instances, outage, ${reconcile ? 'with' : 'without'} reconciliation`,
    instances: 4,
    reconcile,
    faults: [
      {
        name: 'proxy disabled',
        ...FAULT,
        start: (c) => setEnabled(c, false).then(() => undefined),
        stop: (c) => setEnabled(c, true).then(() => undefined),
      },
    ],
    // ceil(20 / 4) = 5 per instance: during the outage at most 4 x 5 = limit. Instances recover one
    // by one, each writing its own calls before Redis decides for it; until the last has, the others
    // still admit up to their share locally: at most (4 - 1) x 5 over the limit. Without
    // reconciliation, Redis also grants a fresh limit on top of the outage's calls.
    ...(reconcile ? { maxExcess: 15 } : {}),
    checks: opensAndCloses,
  }),
);

function processFaults(context: ScenarioContext) {
  const faults = context.backend.process;
  if (faults === undefined) throw new Error(`the ${context.backend.kind} backend cannot touch the Redis process`);
  return faults;
}

/** A script that loops until killed; with busy-reply-threshold at 100 ms, other clients get -BUSY. */
function busyScript(): PhaseSpec {
  let looping: Redis | undefined;
  let settled: Promise<unknown> | undefined;
  return {
    name: 'busy script',
    ...FAULT,
    start: async ({ admin, backend }) => {
      await admin.config('SET', 'busy-reply-threshold', '100');
      looping = new Redis({ host: backend.redis.host, port: backend.redis.port, maxRetriesPerRequest: 0 });
      looping.on('error', () => undefined);
      settled = looping.eval('while true do end', 0).catch(() => undefined);
    },
    stop: async ({ admin }) => {
      for (let i = 0; i < 20; i++) {
        try {
          await admin.script('KILL');
          break;
        } catch {
          await sleep(20);
        }
      }
      await settled;
      looping?.disconnect();
      await admin.config('SET', 'busy-reply-threshold', '5000');
    },
  };
}

/** Scenarios that need to touch the Redis process, skipped (and said so) where the backend cannot. */
export const needsProcess = new Set(['frozen', 'killed', 'misconf']);
