/**
 * The fault scenarios of the public harness. Each runs healthy, then the fault, then recovery, with the
 * fault done through the proxies in front of Redis (one per instance) or to the Redis server itself.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { openResp } from './resp.js';
import type { ToxicStream } from './toxiproxyClient.js';
import type { FaultContext, LimiterProfile, ServerControl, Timing } from './types.js';

export type { FaultContext, ServerControl, Timing } from './types.js';

export type Scenario = {
  readonly name: string;
  readonly title: string;
  /** In the default set (which ends within 2 minutes on 2 cores). */
  readonly inDefault: boolean;
  /** Destroys data or stops the server for everyone: refused against an external Redis without `destructive`. */
  readonly destructive: boolean;
  /** Needs the Redis process (a `redis-server` the harness started). */
  readonly needsServer: boolean;
  readonly minInstances: number;
  /** The phases' lengths; undefined: it cannot run with this limiter (the reason given by `why`). */
  timing?(profile: LimiterProfile): Timing | string;
  start(context: FaultContext): Promise<void>;
  stop?(context: FaultContext): Promise<void>;
};

/** About 9 s: 2.5 s healthy (the windows fill), a 3 s fault, 3.5 s to recover. */
export const STANDARD: Timing = { healthyMs: 2500, faultMs: 3000, recoveryMs: 3500 };

const all = (c: FaultContext, each: (proxy: string) => Promise<unknown>): Promise<void> =>
  Promise.all(c.proxies.map(each)).then(() => undefined);
const enable = (c: FaultContext, on: boolean): Promise<void> => all(c, (p) => c.api.setEnabled(p, on));
const reset = (c: FaultContext): Promise<void> => c.api.reset();

function toxic(
  name: string,
  title: string,
  type: string,
  attributes: (p: LimiterProfile) => Record<string, number>,
  stream: ToxicStream = 'downstream',
): Scenario {
  return {
    name,
    title,
    inDefault: false,
    destructive: false,
    needsServer: false,
    minInstances: 1,
    start: (c) => all(c, (p) => c.api.addToxic(p, { name, type, stream, toxicity: 1, attributes: attributes(c.profile) })),
    stop: reset,
  };
}

async function admin(c: FaultContext, ...args: (string | number)[]): Promise<void> {
  const conn = await openResp({ ...c.admin, timeoutMs: 2000 });
  try {
    await conn.command(...args);
  } finally {
    conn.close();
  }
}

function server(c: FaultContext): ServerControl {
  if (c.server === undefined) throw new Error('this scenario needs a redis-server the harness started');
  return c.server;
}

/** A script that loops until killed: other clients get `-BUSY` past `busy-reply-threshold`. */
function busyScript(): Scenario {
  let looping: Awaited<ReturnType<typeof openResp>> | undefined;
  let settled: Promise<unknown> | undefined;
  return {
    name: 'busy-script',
    title: 'A busy script (-BUSY replies)',
    inDefault: false,
    destructive: true,
    needsServer: false,
    minInstances: 1,
    async start(c) {
      await admin(c, 'CONFIG', 'SET', 'busy-reply-threshold', '100');
      looping = await openResp({ ...c.admin, timeoutMs: c.timing.faultMs + 10_000 });
      settled = looping.command('EVAL', 'while true do end', 0).catch(() => undefined);
    },
    async stop(c) {
      for (let i = 0; i < 50; i++) {
        try {
          await admin(c, 'SCRIPT', 'KILL');
          break;
        } catch {
          await sleep(20);
        }
      }
      await settled;
      looping?.close();
      await admin(c, 'CONFIG', 'SET', 'busy-reply-threshold', '5000');
    },
  };
}

const base = { inDefault: true, destructive: false, needsServer: false, minInstances: 1 } as const;

/** Every scenario, in the order a run takes them. */
export const SCENARIOS: readonly Scenario[] = [
  {
    ...toxic('latency-below', 'Latency at a fifth of the deadline', 'latency', (p) => ({
      latency: Math.max(1, Math.floor(p.timeoutMs / 5)),
      jitter: 0,
    })),
  },
  {
    ...toxic('latency-above', 'Latency at 4× the deadline', 'latency', (p) => ({ latency: 4 * p.timeoutMs, jitter: 0 })),
    inDefault: true,
  },
  { ...base, name: 'outage', title: 'Hard outage (every proxy disabled)', start: (c) => enable(c, false), stop: (c) => enable(c, true) },
  { ...toxic('black-hole', 'Black hole (data dropped, connections open)', 'timeout', () => ({ timeout: 0 })), inDefault: true },
  toxic('reset-peer', 'Connections reset (reset_peer)', 'reset_peer', () => ({ timeout: 0 }), 'upstream'),
  toxic('truncated', 'Truncated replies (limit_data 20 bytes)', 'limit_data', () => ({ bytes: 20 })),
  toxic('fragmented', 'Fragmented replies (slicer 3 bytes)', 'slicer', () => ({ average_size: 3, size_variation: 1, delay: 0 })),
  toxic('bandwidth', 'Low bandwidth (1 KB/s)', 'bandwidth', () => ({ rate: 1 })),
  {
    ...base,
    inDefault: false,
    name: 'flapping',
    title: 'Flapping (proxies toggled every 300 ms)',
    async start(c) {
      const until = Date.now() + c.timing.faultMs - 50;
      for (let on = false; Date.now() < until; on = !on) {
        await enable(c, on);
        await sleep(300);
      }
      await enable(c, true);
    },
  },
  {
    ...base,
    needsServer: true,
    name: 'frozen',
    title: 'Redis frozen (SIGSTOP, then SIGCONT)',
    start: async (c) => server(c).freeze(),
    stop: async (c) => server(c).thaw(),
  },
  {
    ...base,
    needsServer: true,
    destructive: true,
    name: 'killed',
    title: 'Redis killed and restarted empty',
    start: async (c) => {
      await server(c).kill();
      await server(c).restart();
    },
  },
  {
    ...base,
    destructive: true,
    name: 'pause-writes',
    title: 'CLIENT PAUSE WRITE',
    start: (c) => admin(c, 'CLIENT', 'PAUSE', c.timing.faultMs, 'WRITE'),
    stop: (c) => admin(c, 'CLIENT', 'UNPAUSE'),
  },
  busyScript(),
  {
    ...base,
    inDefault: false,
    needsServer: true,
    destructive: true,
    name: 'misconf',
    title: 'Redis cannot persist (MISCONF on every write)',
    start: async (c) => {
      const s = server(c);
      if (s.failSave === undefined) throw new Error('this Redis cannot fail a save');
      await s.failSave();
    },
    stop: async (c) => server(c).allowWrites?.(),
  },
  {
    ...base,
    destructive: true,
    name: 'flushall',
    title: 'FLUSHALL: Redis loses every key',
    timing: () => ({ healthyMs: 2500, faultMs: 200, recoveryMs: 5300 }),
    start: (c) => admin(c, 'FLUSHALL'),
  },
  {
    ...base,
    minInstances: 2,
    name: 'one-cut-off',
    title: 'One instance cut off, the others healthy',
    start: (c) => c.api.setEnabled(c.proxies[0] as string, false).then(() => undefined),
    stop: (c) => c.api.setEnabled(c.proxies[0] as string, true).then(() => undefined),
  },
  {
    ...base,
    minInstances: 2,
    name: 'staggered',
    title: 'Every instance cut off, back one at a time 750 ms apart',
    timing: () => ({ healthyMs: 2500, faultMs: 3000, recoveryMs: 4500 }),
    start: (c) => enable(c, false),
    async stop(c) {
      for (const [i, proxy] of c.proxies.entries()) {
        if (i > 0) await sleep(750);
        await c.api.setEnabled(proxy, true);
      }
    },
  },
  {
    ...base,
    inDefault: false,
    name: 'long-outage',
    title: 'An outage longer than the lease',
    timing: (p) =>
      p.leaseMs === undefined
        ? 'no lease: the limiter has a fixed local.instances'
        : p.leaseMs > 60_000
          ? `the lease is ${p.leaseMs} ms: set local.leaseMs to 60000 or less in the config to run it (it lasts the lease + 7 s)`
          : { healthyMs: 2500, faultMs: p.leaseMs + 2000, recoveryMs: 3000 },
    start: (c) => enable(c, false),
    stop: (c) => enable(c, true),
  },
];

/** The scenario names, for `--scenarios` and its error message. */
export const scenarioNames = (): string[] => SCENARIOS.map((s) => s.name);
