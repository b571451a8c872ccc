/**
 * One service instance of a fleet (`./fleet.ts`: fleetChange, clusterApart), in a process of its own, as users
 * run them: its own ioredis client (`createRedisClient`) and `ResilientLimiter` from the built package,
 * `instances: 'auto'`. The parent sends `setup`, waits until every worker counted all instances, sends
 * `go` (the load starts), then `stop`; the worker answers with every call it made and exits.
 */
import { Cluster, type Redis } from 'ioredis';
import { loadLibrary } from '../library.ts';
import type { Mode } from '../../src/index.ts';

export type Setup = {
  readonly port: number;
  readonly prefix: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly mode: Mode;
  /** Calls per second offered by this worker, over `keys` keys in turn. */
  readonly perSecond: number;
  readonly keys: number;
  readonly instances: number;
  /** A Redis Cluster's nodes, instead of `port`: the worker makes an ioredis Cluster client with the settings the docs give. */
  readonly cluster?: readonly { readonly host: string; readonly port: number }[];
  /** More limiter options (heartbeatMs, local.leaseMs, local.afterLease, breaker), merged over the ones above. */
  readonly options?: {
    readonly heartbeatMs?: number;
    readonly local?: Readonly<Record<string, unknown>>;
    readonly breaker?: Readonly<Record<string, number>>;
  };
};

/** One call: [issued (epoch ms), latency (ms), key index, allowed (0/1), source, reason, admitted at (epoch ms on the deciding tier's clock, -1 when not admitted), threw (0/1)]. */
export type CallRecord = [number, number, number, number, string, string, number, number];

export type FromWorker =
  | { readonly kind: 'counted'; readonly instances: number }
  | {
      readonly kind: 'done';
      readonly calls: CallRecord[];
      /** This process's event-loop stalls: [start (epoch ms), length (ms)]. */
      readonly stalls: [number, number][];
      readonly errors: string[];
    };

export type ToWorker = { readonly kind: 'setup'; readonly setup: Setup } | { readonly kind: 'go' } | { readonly kind: 'stop' };

const errors: string[] = [];
process.on('unhandledRejection', (reason) => errors.push(`unhandled rejection: ${String(reason)}`));
process.on('uncaughtException', (error) => errors.push(`uncaught exception: ${String(error)}`));

const lib = await loadLibrary();
let setup: Setup | undefined;
let limiter: InstanceType<typeof lib.ResilientLimiter> | undefined;
let redis: ReturnType<typeof lib.createRedisClient> | undefined;
let running = false;
const calls: CallRecord[] = [];
const stalls: [number, number][] = [];
const pending = new Set<Promise<void>>();

function send(message: FromWorker): void {
  process.send?.(message);
}

async function start(s: Setup): Promise<void> {
  setup = s;
  redis =
    s.cluster === undefined
      ? lib.createRedisClient({ host: '127.0.0.1', port: s.port })
      : (new Cluster([...s.cluster], {
          enableOfflineQueue: false,
          redisOptions: { maxRetriesPerRequest: 0 },
          retryDelayOnFailover: 0,
          retryDelayOnClusterDown: 0,
        }) as unknown as Redis);
  redis.on('error', () => undefined);
  limiter = new lib.ResilientLimiter({
    redis,
    prefix: s.prefix,
    limit: s.limit,
    windowMs: s.windowMs,
    mode: s.mode,
    ...s.options,
    local: { instances: 'auto', ...s.options?.local },
  });
  // Counted once every instance beat (once a second): the shares are right before the load starts.
  while (limiter.stats().instances < s.instances) await new Promise((resolve) => setTimeout(resolve, 20));
  send({ kind: 'counted', instances: limiter.stats().instances });
}

function issue(key: number): void {
  const l = limiter as NonNullable<typeof limiter>;
  const { windowMs } = setup as Setup;
  const issued = Date.now();
  const started = performance.now();
  const call = l.limit(`k${key}`).then(
    (d) => {
      const admitted = d.allowed && (d.source === 'redis' || d.source === 'local') ? d.resetAtMs - windowMs : d.allowed ? issued : -1;
      calls.push([issued, performance.now() - started, key, d.allowed ? 1 : 0, d.source, d.reason, admitted, 0]);
    },
    (error: unknown) => {
      errors.push(`limit() threw: ${String(error)}`);
      calls.push([issued, performance.now() - started, key, 0, 'none', 'none', -1, 1]);
    },
  );
  pending.add(call);
  void call.finally(() => pending.delete(call));
}

/** Offers the load: wakes about every ms (a longer gap is this process's own event-loop stall). */
async function load(): Promise<void> {
  const s = setup as Setup;
  const t0 = performance.now();
  let issued = 0;
  let last = t0;
  running = true;
  while (running) {
    const wake = performance.now();
    if (wake - last > 3) stalls.push([performance.timeOrigin + last, wake - last - 1]);
    last = wake;
    const due = Math.floor(((wake - t0) * s.perSecond) / 1000);
    while (issued < due) issue(issued++ % s.keys);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

process.on('message', (message: ToWorker) => {
  if (message.kind === 'setup') {
    void start(message.setup).catch((error: unknown) => {
      // The parent is waiting for 'counted': say why it will not come.
      console.error(`bound worker: setup failed: ${String(error)}`);
      errors.push(`setup: ${String(error)}`);
    });
  }
  if (message.kind === 'go') void load();
  if (message.kind === 'stop') {
    running = false;
    // Alive until the calls are sent (the limiter's timers are unref'd).
    const alive = setInterval(() => undefined, 1000);
    void (async () => {
      await Promise.allSettled([...pending]);
      await limiter?.close().catch((error: unknown) => errors.push(`close: ${String(error)}`));
      redis?.disconnect();
      // Disconnected once the message is out: a large one (a long run's calls) is not sent at once.
      process.send?.({ kind: 'done', calls, stalls, errors } satisfies FromWorker, () => {
        clearInterval(alive);
        process.disconnect();
      });
    })();
  }
});
