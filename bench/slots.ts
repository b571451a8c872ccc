/**
 * Concurrency limits and budgets: resilimit's `ConcurrencyLimiter` beside redis-semaphore's `Semaphore`,
 * and `Budget`'s reserve+settle beside a `limit()` call (issue 38's "What must show"), on one
 * redis-server child, in one run.
 *
 * 1. Redis CPU per operation, keys in steady state: `KEY_COUNT` keys, each warmed through each
 *    contender's own API before measuring (never a freshly flushed Redis): 3 slots held (max 10 a
 *    key), 3 operations of the rate limiter or the budget, a consume of 3 points. One operation is an
 *    acquire and its release (resilimit; redis-semaphore, on an ioredis client), a `limit()` call of
 *    `ResilientLimiter`, a `Budget.reserve` of `ESTIMATE` and its `settle` (below the estimate for
 *    half of the operations, above it for the other half), or one `consume` of rate-limiter-flexible's
 *    `RateLimiterRedis` (the reference). Closed loop, 1 and 16 callers on random keys, a fixed number
 *    of operations after a warm-up; rounds rotate the contenders' order and are pooled. Redis µs: the
 *    redis-server's CPU (`INFO cpu`, every thread) per operation over the measured operations; command
 *    µs: what `INFO commandstats` timed inside the commands of the operations (admin commands left out).
 * 2. A Redis freeze, side by side: for each subject in turn (same timeline, same server), 4
 *    in-process "workers" (each its own client and limiter or semaphores) of 5 lanes each run tasks
 *    of 20–50 ms holding a slot of one key, max 10; SIGSTOP of the redis-server after `HEALTHY_MS`,
 *    SIGCONT `FREEZE_MS` later. Held is counted in this process, from the moment a holder's acquire
 *    resolves to the end of its task (before its release is sent): the most held at any moment,
 *    healthy (before the freeze, and from 1 s after the thaw), during the freeze, and in the first
 *    second after the thaw. Also: tasks done, acquires refused (no slot within the wait), errors
 *    thrown by acquire and by release, leases reported lost, unhandled rejections and exceptions,
 *    and the latency of the acquires that started during the freeze.
 *
 *   node bench/slots.ts           # about 2–3 minutes
 *   node bench/slots.ts --quick   # about 30 s: fewer keys and operations, a shorter timeline
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { Semaphore } from 'redis-semaphore';
import type { HeldSlot, LimiterDecision } from '../src/index.ts';
import { waitReady, type ClientOptions } from '../test/support/redis.ts';
import { ms, perSecond, ratio, table } from './support/format.ts';
import { makeKeys } from './support/keys.ts';
import { Bench, main } from './support/report.ts';
import { Budget, ConcurrencyLimiter, createRedisClient, ResilientLimiter } from './support/resilimit.ts';
import { Samples } from './support/samples.ts';
import { startServer, type BenchServer } from './support/server.ts';
import { nodeCpuUs, redisNow } from './support/steadyCell.ts';

const USAGE = `Usage: node bench/slots.ts [--quick] [--help]

Redis CPU per acquire+release (resilimit ConcurrencyLimiter, redis-semaphore Semaphore), per
reserve+settle (resilimit Budget) and per limit() (resilimit ResilientLimiter) beside
rate-limiter-flexible's consume, then both concurrency limits side by side through a 3 s Redis freeze.
  --quick  about 40 s instead of about 2–3 minutes (fewer keys and operations, shorter timeline)
  --help   this text`;

if (process.argv.includes('--help')) {
  console.log(USAGE);
  process.exit(0);
}
const unknownArgs = process.argv.slice(2).filter((a) => a !== '--quick');
if (unknownArgs.length > 0) {
  console.error(`Unknown argument(s): ${unknownArgs.join(' ')}\n\n${USAGE}`);
  process.exit(2);
}
const QUICK = process.argv.includes('--quick');

// Part 1: CPU per operation.
const KEY_COUNT = QUICK ? 1_000 : 2_000;
const HELD_PER_KEY = 3;
const MAX = 10;
const CALLERS = [1, 16] as const;
const WARMUP_OPS = QUICK ? 500 : 1_000;
const MEASURED_OPS = QUICK ? 3_000 : 10_000;
const ROUNDS = QUICK ? 1 : 2;
/** Leases of part 1: longer than the run, so that the slots held in the keys stay held (no renewal on the way). */
const CPU_LEASE_MS = 600_000;
/**
 * The rate limiter's window in part 1 (`limit()`, and the budget over it): as RLF's, never full in the
 * run and as long as the leases, so that no call leaves it while measured.
 */
const RATE_LIMIT = 1_000_000_000;
/** What a reservation of part 1 reserves. */
const ESTIMATE = 40;
/**
 * What its settle charges, in turn: below the estimate (the actual charged, then the reservation given
 * back: two script calls) and above it (the extra charged: one). Equal to it would send nothing.
 */
const ACTUALS = [15, 70] as const;

// Part 2: the freeze.
const WORKERS = 4;
const LANES = 5;
const HEALTHY_MS = QUICK ? 1_500 : 3_000;
const FREEZE_MS = QUICK ? 2_000 : 3_000;
/** Past a lease (LEASE_MS) in the full run: what each holds in Redis after the thaw has time to end. */
const AFTER_MS = QUICK ? 2_500 : 12_000;
/** The first part of AFTER_MS, reported apart: what was held while the clients caught up. */
const RECOVERY_MS = 1_000;
const TASK_MS = [20, 50] as const;
/** How long a lane waits for a slot: resilimit's `maxWaitMs`, redis-semaphore's `acquireTimeout`. */
const WAIT_MS = 1_000;
/** The lease of both (resilimit's `ttlMs`, redis-semaphore's `lockTimeout`, whose default it is). */
const LEASE_MS = 10_000;

/** The whole run stops by itself past this. */
const TIME_LIMIT_MS = QUICK ? 120_000 : 280_000;

const load = (): string =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(', ');

// ---------------------------------------------------------------------------------------------
// Part 1

type CpuContender = {
  readonly name: string;
  /** One operation on `key`. */
  op(key: string): Promise<void>;
  /** The commands of its operations, as `INFO commandstats` names them. */
  readonly commands: readonly string[];
  /** resilimit's rate limiter only: its decisions so far that Redis did not make (`stats()`: answered locally), and its settles left pending. */
  notByRedis?(): number;
  close(): Promise<void>;
};

type CpuFactory = { readonly name: string; create(server: BenchServer, keys: readonly string[]): Promise<CpuContender> };

async function plainClient(server: BenchServer, options: ClientOptions = {}): Promise<Redis> {
  const client = server.redis.client(options);
  await waitReady(client);
  return client;
}

/** Runs `fill` on every key, `width` at a time. */
async function eachKey(keys: readonly string[], width: number, fill: (key: string) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < keys.length) await fill(keys[next++] as string);
    }),
  );
}

const resilimitCpu: CpuFactory = {
  name: 'resilimit ConcurrencyLimiter acquire+release',
  async create(server, keys) {
    const redis = createRedisClient(server.redis.url);
    await waitReady(redis);
    // A fixed instance count: no heartbeats in the measured interval.
    const limiter = new ConcurrencyLimiter({ redis, max: MAX, ttlMs: CPU_LEASE_MS, instances: 1, prefix: 'cpu:' });
    const background: HeldSlot[] = [];
    await eachKey(keys, 32, async (key) => {
      for (let i = 0; i < HELD_PER_KEY; i += 1) background.push((await limiter.acquire(key)) as HeldSlot);
    });
    return {
      name: this.name,
      commands: ['evalsha', 'eval'],
      async op(key) {
        const slot = await limiter.acquire(key);
        if (slot === undefined) throw new Error(`resilimit refused a slot of ${key}`);
        await slot.release();
      },
      async close() {
        await limiter.close();
        redis.disconnect();
      },
    };
  },
};

/** A `ResilientLimiter` of part 1 on its own client, under `prefix`: a fixed instance count (no heartbeats). */
async function rateLimiter(
  server: BenchServer,
  prefix: string,
): Promise<{ limiter: InstanceType<typeof ResilientLimiter>; notByRedis(): number; close(): Promise<void> }> {
  const redis = createRedisClient(server.redis.url);
  await waitReady(redis);
  const limiter = new ResilientLimiter({ redis, limit: RATE_LIMIT, windowMs: CPU_LEASE_MS, local: { instances: 1 }, prefix });
  return {
    limiter,
    notByRedis() {
      const stats = limiter.stats();
      return stats.decisions - stats.bySource.redis;
    },
    async close() {
      await limiter.close();
      redis.disconnect();
    },
  };
}

/**
 * Throws unless `decision` admitted the call. One answered locally while Redis is healthy is counted
 * (`notByRedis`), not thrown: a settle's charge is recorded in the local window before Redis has it, and
 * a decision of the same key that Redis makes meanwhile looks like a loss (reason `'reconciling'`).
 */
function admitted(decision: LimiterDecision, what: string): void {
  if (!decision.allowed || decision.id === undefined) {
    throw new Error(`${what}: not admitted (${decision.source}, ${decision.reason})`);
  }
}

const limitCpu: CpuFactory = {
  name: 'resilimit ResilientLimiter limit()',
  async create(server, keys) {
    const { limiter, notByRedis, close } = await rateLimiter(server, 'cpu-limit:');
    const op = async (key: string): Promise<void> => admitted(await limiter.limit(key), `limit(${key})`);
    await eachKey(keys, 32, async (key) => {
      for (let i = 0; i < HELD_PER_KEY; i += 1) await op(key);
    });
    return { name: this.name, commands: ['evalsha', 'eval'], op, notByRedis, close };
  },
};

const budgetCpu: CpuFactory = {
  name: `resilimit Budget reserve+settle (estimate ${ESTIMATE}, actual ${ACTUALS.join(' or ')})`,
  async create(server, keys) {
    const { limiter, notByRedis, close } = await rateLimiter(server, 'cpu-budget:');
    const budget = new Budget(limiter);
    let turn = 0;
    let pending = 0;
    const op = async (key: string): Promise<void> => {
      const actual = ACTUALS[turn++ % ACTUALS.length] as number;
      const handle = await budget.reserve(key, ESTIMATE);
      admitted(handle.decision, `reserve(${key})`);
      const settled = await budget.settle(handle, actual);
      if (settled.pending) pending += 1;
      if (settled.late || settled.charged !== actual) {
        throw new Error(`settle(${key}, ${actual}): ${JSON.stringify(settled)}`);
      }
    };
    await eachKey(keys, 32, async (key) => {
      for (let i = 0; i < HELD_PER_KEY; i += 1) await op(key);
    });
    return { name: this.name, commands: ['evalsha', 'eval'], op, notByRedis: () => notByRedis() + pending, close };
  },
};

const semaphoreCpu: CpuFactory = {
  name: 'redis-semaphore Semaphore acquire+release',
  async create(server, keys) {
    const client = await plainClient(server);
    // One lockTimeout for every holder of a key: its acquire drops holders older than its own lockTimeout.
    const options = { lockTimeout: CPU_LEASE_MS, acquireTimeout: 1_000 };
    const background: Semaphore[] = [];
    await eachKey(keys, 32, async (key) => {
      for (let i = 0; i < HELD_PER_KEY; i += 1) {
        const s = new Semaphore(client, key, MAX, options);
        await s.acquire();
        background.push(s);
      }
    });
    return {
      name: this.name,
      commands: ['evalsha', 'eval', 'zrem'],
      async op(key) {
        const s = new Semaphore(client, key, MAX, options);
        if (!(await s.tryAcquire())) throw new Error(`redis-semaphore refused a slot of ${key}`);
        await s.release();
      },
      async close() {
        await Promise.all(background.map((s) => s.release()));
        client.disconnect();
      },
    };
  },
};

const rlfCpu: CpuFactory = {
  name: 'rate-limiter-flexible RateLimiterRedis consume',
  async create(server, keys) {
    const client = await plainClient(server);
    const limiter = new RateLimiterRedis({ storeClient: client, points: 1_000_000_000, duration: CPU_LEASE_MS / 1000 });
    await eachKey(keys, 32, async (key) => {
      await limiter.consume(key, HELD_PER_KEY);
    });
    return {
      name: this.name,
      commands: ['evalsha', 'eval', 'incrby', 'pttl', 'set', 'multi', 'exec'],
      async op(key) {
        await limiter.consume(key);
      },
      async close() {
        client.disconnect();
      },
    };
  },
};

const CPU_FACTORIES: readonly CpuFactory[] = [resilimitCpu, semaphoreCpu, budgetCpu, limitCpu, rlfCpu];
const REFERENCE = rlfCpu;

/** `total` operations by `callers` closed-loop callers on random keys: elapsed ms. */
async function runOps(contender: CpuContender, keys: readonly string[], callers: number, total: number): Promise<number> {
  let left = total;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (left > 0) {
        left -= 1;
        await contender.op(keys[(Math.random() * keys.length) | 0] as string);
      }
    }),
  );
  return performance.now() - started;
}

type CpuCell = {
  ops: number;
  elapsedMs: number;
  redisUs: number;
  commandUs: number;
  commandCalls: number;
  nodeUs: number;
  /** Decisions Redis did not make (resilimit's rate limiter; 0 for the others). */
  notByRedis: number;
};

async function commandTotals(server: BenchServer, commands: readonly string[]): Promise<{ calls: number; usec: number }> {
  const stats = await server.commandStats();
  let calls = 0;
  let usec = 0;
  for (const name of commands) {
    const s = stats.get(name);
    if (s !== undefined) {
      calls += s.calls;
      usec += s.usec;
    }
  }
  return { calls, usec };
}

async function cpuCell(server: BenchServer, contender: CpuContender, keys: readonly string[], callers: number): Promise<CpuCell> {
  await runOps(contender, keys, callers, WARMUP_OPS);
  const commands0 = await commandTotals(server, contender.commands);
  const redis0 = await redisNow(server);
  const node0 = nodeCpuUs();
  const local0 = contender.notByRedis?.() ?? 0;
  const elapsedMs = await runOps(contender, keys, callers, MEASURED_OPS);
  const nodeUs = nodeCpuUs() - node0;
  const notByRedis = (contender.notByRedis?.() ?? 0) - local0;
  const redis1 = await redisNow(server);
  const commands1 = await commandTotals(server, contender.commands);
  return {
    ops: MEASURED_OPS,
    elapsedMs,
    redisUs: redis1.cpuUs - redis0.cpuUs,
    commandUs: commands1.usec - commands0.usec,
    commandCalls: commands1.calls - commands0.calls,
    nodeUs,
    notByRedis,
  };
}

async function cpuPart(bench: Bench, server: BenchServer): Promise<unknown> {
  const keys = makeKeys(KEY_COUNT, 'job:');
  const loadBefore = load();
  const live: CpuContender[] = [];
  for (const factory of CPU_FACTORIES) {
    bench.progress(`warming ${KEY_COUNT} keys with ${HELD_PER_KEY} each: ${factory.name}`);
    live.push(await factory.create(server, keys));
  }
  const pooled = new Map<string, CpuCell>();
  for (let r = 0; r < ROUNDS; r += 1) {
    for (const callers of CALLERS) {
      const order = [...live.slice(r % live.length), ...live.slice(0, r % live.length)];
      for (const contender of order) {
        bench.progress(`round ${r + 1}/${ROUNDS}, ${callers} callers: ${contender.name}`);
        const cell = await cpuCell(server, contender, keys, callers);
        const id = `${contender.name}|${callers}`;
        const sum = pooled.get(id);
        if (sum === undefined) pooled.set(id, cell);
        else for (const k of Object.keys(cell) as (keyof CpuCell)[]) sum[k] += cell[k];
      }
    }
  }
  for (const contender of live) await contender.close();
  const loadAfter = load();
  const rows: string[][] = [];
  const data: Record<string, unknown>[] = [];
  for (const callers of CALLERS) {
    const ref = pooled.get(`${REFERENCE.name}|${callers}`) as CpuCell;
    for (const factory of CPU_FACTORIES) {
      const c = pooled.get(`${factory.name}|${callers}`) as CpuCell;
      const per = (x: number): number => x / c.ops;
      rows.push([
        String(callers),
        factory.name,
        perSecond((c.ops * 1000) / c.elapsedMs),
        (c.commandCalls / c.ops).toFixed(2),
        per(c.redisUs).toFixed(2),
        ratio(per(c.redisUs), ref.redisUs / ref.ops),
        per(c.commandUs).toFixed(2),
        ratio(per(c.commandUs), ref.commandUs / ref.ops),
        per(c.nodeUs).toFixed(2),
        ratio(per(c.nodeUs), ref.nodeUs / ref.ops),
        live.find((l) => l.name === factory.name)?.notByRedis === undefined ? '–' : c.notByRedis.toLocaleString('en-US'),
      ]);
      data.push({ callers, contender: factory.name, ...c });
    }
  }
  bench.section(
    `Redis CPU per operation, keys in steady state (${KEY_COUNT.toLocaleString('en-US')} keys, each holding ${HELD_PER_KEY} slots of max ${MAX}, or warmed with ${HELD_PER_KEY} operations; ${ROUNDS} round(s) of ${MEASURED_OPS.toLocaleString('en-US')} operations per cell after ${WARMUP_OPS.toLocaleString('en-US')} of warm-up, pooled; redis-server ${server.version})`,
    `${table(
      [
        'callers',
        'operation',
        'ops/s',
        'commands/op',
        'Redis µs/op',
        `÷ RLF`,
        'command µs/op',
        '÷ RLF',
        'Node µs/op',
        '÷ RLF',
        'not by Redis',
      ],
      rows,
      'llrrrrrrrrr',
    )}\n\nOne operation: an acquire and its release (two commands: resilimit two script calls, redis-semaphore a script call and a ZREM); a reserve of ${ESTIMATE} and its settle, at ${ACTUALS[0]} (below: the actual charged, then the reservation given back) and at ${ACTUALS[1]} (above: the extra charged) in turn, a settle at the estimate sending nothing; a limit() call (limit ${RATE_LIMIT.toLocaleString('en-US')} per ${CPU_LEASE_MS / 1000} s, never full); or one consume (the reference, RLF). Commands/op: the script calls and commands Redis ran per operation (resilimit's calls of one event-loop turn share script calls). Not by Redis: the measured limit() and reserve() calls that resilimit's limiter answered locally on a healthy Redis (its stats(); a charge of a settle is recorded locally before Redis has it, and a decision of the same key Redis makes meanwhile looks like a loss: reason 'reconciling'), and the settles left pending (Redis did not answer within the breaker's timeoutMs: journalled, written later). Redis µs: the redis-server's CPU (used_cpu_user + used_cpu_sys, every thread) over the measured operations, per operation; command µs: the time INFO commandstats counted inside those commands. Leases of ${CPU_LEASE_MS / 1000} s (resilimit ttlMs, redis-semaphore lockTimeout) so the held slots stay held; resilimit's limiters with instances: 1 (no heartbeats). Load average (1, 5, 15 min) before: ${loadBefore}; after: ${loadAfter}.`,
  );
  return data;
}

// ---------------------------------------------------------------------------------------------
// Part 2

type Counters = {
  acquires: number;
  tasksDone: number;
  refused: number;
  acquireErrors: number;
  releaseErrors: number;
  lost: number;
  unhandled: number;
  firstErrors: string[];
};

/** A slot a lane holds: its id in Redis's set, who gave it (resilimit), and its release. */
type LaneSlot = { readonly id: string; readonly source?: string; release(): Promise<unknown> };

/** A lane's way to hold a slot: undefined when none came within the wait. Throws what the library throws. */
type Acquire = () => Promise<LaneSlot | undefined>;

type FreezeWorker = { acquire: Acquire; close: () => Promise<void> };

type FreezeSubject = {
  readonly name: string;
  readonly options: string;
  create(server: BenchServer, key: string, counters: Counters): Promise<FreezeWorker>;
  /** The ids of the holders Redis counts for `key` now. */
  redisHeld(server: BenchServer, key: string): Promise<string[]>;
};

function note(counters: Counters, what: string, error: unknown): void {
  if (counters.firstErrors.length < 3) counters.firstErrors.push(`${what}: ${error instanceof Error ? error.message : String(error)}`);
}

const resilimitFreeze: FreezeSubject = {
  name: 'resilimit ConcurrencyLimiter',
  options: `createRedisClient(); max ${MAX}, ttlMs ${LEASE_MS} (renewEveryMs default: a third), maxWaitMs ${WAIT_MS}; defaults otherwise: mode 'local', instances 'auto', pollMs 50, breaker timeoutMs 50`,
  async create(server, key, counters) {
    const redis = createRedisClient(server.redis.url);
    await waitReady(redis);
    const limiter = new ConcurrencyLimiter({ redis, max: MAX, ttlMs: LEASE_MS, prefix: `freeze:${key}:` });
    limiter.on('lost', () => {
      counters.lost += 1;
    });
    return {
      acquire: () => limiter.acquire(key, { maxWaitMs: WAIT_MS }),
      async close() {
        await limiter.close();
        redis.disconnect();
      },
    };
  },
  async redisHeld(server, key) {
    // Members are `<cost>*<id>`, or the id alone for cost 1 (every slot here); "*" holds the costs' sum.
    return (await server.admin.zrange(`freeze:${key}:{${key}}:c`, '0', '-1')).filter((m) => m !== '*');
  },
};

function semaphoreFreeze(label: string, clientOptions: ClientOptions): FreezeSubject {
  return {
    name: `redis-semaphore Semaphore, ioredis ${label}`,
    options: `ioredis ${label}; limit ${MAX}, lockTimeout ${LEASE_MS} (its default; refreshInterval default: 0.8 × lockTimeout), acquireTimeout ${WAIT_MS}, retryInterval default (10 ms), onLockLost: counted (its default throws); tryAcquire()`,
    async create(server, key, counters) {
      const client = await plainClient(server, clientOptions);
      const options = {
        lockTimeout: LEASE_MS,
        acquireTimeout: WAIT_MS,
        onLockLost: (error: Error) => {
          counters.lost += 1;
          note(counters, 'lock lost', error);
        },
      };
      return {
        async acquire() {
          const s = new Semaphore(client, key, MAX, options);
          return (await s.tryAcquire()) ? { id: s.identifier, release: () => s.release() } : undefined;
        },
        async close() {
          client.disconnect();
        },
      };
    },
    async redisHeld(server, key) {
      // Holders whose lease has not ended on the client's clock (as its scripts count them).
      return server.admin.zrangebyscore(`semaphore:${key}`, String(Date.now() - LEASE_MS), '+inf');
    },
  };
}

const FREEZE_SUBJECTS: readonly FreezeSubject[] = [
  resilimitFreeze,
  semaphoreFreeze('defaults', {}),
  semaphoreFreeze('commandTimeout 100', { commandTimeout: 100 }),
];

/** Holders Redis counts of the key, and the slots the lanes hold (by who gave them: resilimit's `source`). */
type Snapshot = { held: number; redis: number; holders: Record<string, number>; heldBy: Record<string, number> };

type FreezeResult = {
  subject: string;
  maxHealthy: number;
  maxFreeze: number;
  maxRecovery: number;
  counters: Counters;
  /** Tasks started before the freeze, during it, and after the thaw. */
  tasks: [number, number, number];
  /** resilimit: its slots by phase and by who gave them (`HeldSlot.source`). */
  sources: Record<string, number>;
  freezeAcquire: { count: number; p50: number; p99: number; max: number };
  /**
   * Holders Redis counted, and those held in this process, RECOVERY_MS after the thaw and at the end;
   * what Redis's holders were: held by a lane, released by one (by source), never handed to one.
   */
  afterThaw: Snapshot;
  atEnd: Snapshot;
  load: string;
};

/** Most held at any moment in [from, to), from the +1/−1 events (sorted by time). */
function mostHeld(events: readonly { at: number; d: number }[], from: number, to: number): number {
  let held = 0;
  let most = 0;
  for (const e of events) {
    if (e.at >= to) break;
    held += e.d;
    if (e.at >= from) most = Math.max(most, held);
    else most = held; // the level carried into the interval
  }
  return Math.max(0, most);
}

let unhandledTo: Counters | undefined;
function onUnhandled(error: unknown): void {
  if (unhandledTo === undefined) {
    console.error('unhandled, outside a freeze run:', error);
    return;
  }
  unhandledTo.unhandled += 1;
  note(unhandledTo, 'unhandled', error);
}

async function freezeRun(bench: Bench, server: BenchServer, subject: FreezeSubject, index: number): Promise<FreezeResult> {
  const key = `freeze-${index}-${Date.now()}`;
  const counters: Counters = {
    acquires: 0,
    tasksDone: 0,
    refused: 0,
    acquireErrors: 0,
    releaseErrors: 0,
    lost: 0,
    unhandled: 0,
    firstErrors: [],
  };
  unhandledTo = counters;
  const workers: FreezeWorker[] = [];
  for (let w = 0; w < WORKERS; w += 1) workers.push(await subject.create(server, key, counters));
  const events: { at: number; d: number; source?: string }[] = [];
  const acquireTimes: { at: number; ms: number }[] = [];
  /** Every slot handed to a lane: held, or released (by its source). */
  const slots = new Map<string, string>();
  let held = 0;
  let stopping = false;
  const t0 = performance.now();
  const freezeAt = t0 + HEALTHY_MS;
  const thawAt = freezeAt + FREEZE_MS;
  const endAt = thawAt + AFTER_MS;

  const lane = async (worker: FreezeWorker): Promise<void> => {
    while (!stopping) {
      const started = performance.now();
      let slot: LaneSlot | undefined;
      try {
        counters.acquires += 1;
        slot = await worker.acquire();
      } catch (error) {
        counters.acquireErrors += 1;
        note(counters, 'acquire', error);
        await sleep(10);
        continue;
      } finally {
        acquireTimes.push({ at: started, ms: performance.now() - started });
      }
      if (slot === undefined) {
        counters.refused += 1;
        continue;
      }
      held += 1;
      slots.set(slot.id, slot.source === undefined ? 'held' : `held (${slot.source})`);
      events.push({ at: performance.now(), d: 1, ...(slot.source === undefined ? {} : { source: slot.source }) });
      await sleep(TASK_MS[0] + Math.random() * (TASK_MS[1] - TASK_MS[0]));
      events.push({ at: performance.now(), d: -1 });
      held -= 1;
      slots.set(slot.id, `released (${slot.source ?? 'redis'})`);
      counters.tasksDone += 1;
      try {
        await slot.release();
      } catch (error) {
        counters.releaseErrors += 1;
        note(counters, 'release', error);
      }
    }
  };

  const lanes = workers.flatMap((worker) => Array.from({ length: LANES }, () => lane(worker)));
  bench.progress(`${subject.name}: healthy`);
  await sleep(Math.max(0, freezeAt - performance.now()));
  server.redis.freeze();
  bench.progress(`${subject.name}: Redis frozen (SIGSTOP)`);
  await sleep(Math.max(0, thawAt - performance.now()));
  server.redis.thaw();
  bench.progress(`${subject.name}: thawed (SIGCONT)`);
  await sleep(Math.max(0, thawAt + RECOVERY_MS - performance.now()));
  const snapshot = async (): Promise<Snapshot> => {
    const heldNow = held;
    const heldBy: Record<string, number> = {};
    for (const what of slots.values()) if (what.startsWith('held')) heldBy[what] = (heldBy[what] ?? 0) + 1;
    const ids = await subject.redisHeld(server, key);
    const holders: Record<string, number> = {};
    for (const id of ids) {
      const what = slots.get(id) ?? 'never handed to a lane';
      holders[what] = (holders[what] ?? 0) + 1;
    }
    return { held: heldNow, redis: ids.length, holders, heldBy };
  };
  const afterThaw = await snapshot();
  await sleep(Math.max(0, endAt - performance.now()));
  const atEnd = await snapshot();
  stopping = true;
  // Each lane ends after its task and its release; bounded, in case a release never settles.
  await Promise.race([Promise.all(lanes), sleep(15_000)]);
  for (const worker of workers) await worker.close();
  const loadNow = load();
  // A rejection left by a timer of the subject may come a little after: counted too.
  await sleep(200);
  unhandledTo = undefined;

  events.sort((a, b) => a.at - b.at);
  // The acquires pending at some moment of the freeze: started before the thaw, settled after the SIGSTOP.
  const during = new Samples();
  for (const a of acquireTimes) if (a.at < thawAt && a.at + a.ms >= freezeAt) during.add(a.ms);
  const tasks: [number, number, number] = [0, 0, 0];
  const sources: Record<string, number> = {};
  for (const e of events) {
    if (e.d !== 1) continue;
    const phase = e.at < freezeAt ? 0 : e.at < thawAt ? 1 : 2;
    tasks[phase] += 1;
    if (e.source !== undefined) {
      const name = `${['before', 'in', 'after'][phase]} the freeze, ${e.source}`;
      sources[name] = (sources[name] ?? 0) + 1;
    }
  }
  return {
    subject: subject.name,
    maxHealthy: Math.max(mostHeld(events, t0, freezeAt), mostHeld(events, thawAt + RECOVERY_MS, Number.POSITIVE_INFINITY)),
    maxFreeze: mostHeld(events, freezeAt, thawAt),
    maxRecovery: mostHeld(events, thawAt, thawAt + RECOVERY_MS),
    counters,
    tasks,
    sources,
    freezeAcquire: during.summary(),
    afterThaw,
    atEnd,
    load: loadNow,
  };
}

function holdersText(holders: Record<string, number>): string {
  return (
    Object.entries(holders)
      .map(([what, n]) => `${n} ${what}`)
      .join(', ') || 'none'
  );
}

async function freezePart(bench: Bench, server: BenchServer): Promise<unknown> {
  const loadBefore = load();
  const results: FreezeResult[] = [];
  for (const [i, subject] of FREEZE_SUBJECTS.entries()) results.push(await freezeRun(bench, server, subject, i));
  bench.section(
    `A Redis freeze, side by side (${WORKERS} workers × ${LANES} lanes on one key, max ${MAX}, tasks of ${TASK_MS[0]}–${TASK_MS[1]} ms; healthy ${HEALTHY_MS / 1000} s, SIGSTOP ${FREEZE_MS / 1000} s, then ${AFTER_MS / 1000} s; each subject in turn)`,
    `${table(
      [
        'library',
        'max held healthy',
        'max held in freeze',
        `max held ≤ ${RECOVERY_MS / 1000} s after thaw`,
        'tasks done (before / in / after freeze)',
        'refused',
        'acquire errors',
        'release errors',
        'lost',
        'unhandled',
        'acquires pending in freeze',
        'p99 of those, ms',
        'max ms',
        `Redis counts / held, thaw + ${RECOVERY_MS / 1000} s`,
        'at the end',
      ],
      results.map((r) => [
        r.subject,
        String(r.maxHealthy),
        String(r.maxFreeze),
        String(r.maxRecovery),
        `${r.counters.tasksDone.toLocaleString('en-US')} (${r.tasks.join(' / ')})`,
        r.counters.refused.toLocaleString('en-US'),
        r.counters.acquireErrors.toLocaleString('en-US'),
        String(r.counters.releaseErrors),
        String(r.counters.lost),
        String(r.counters.unhandled),
        String(r.freezeAcquire.count),
        ms(r.freezeAcquire.p99),
        ms(r.freezeAcquire.max),
        `${r.afterThaw.redis} / ${r.afterThaw.held}`,
        `${r.atEnd.redis} / ${r.atEnd.held}`,
      ]),
    )}\n\nHeld: counted in this process from an acquire's resolution to its task's end (before the release is sent). Tasks are placed by when their slot came. Acquires pending in freeze: those started before the thaw and settled after the SIGSTOP (their latency runs to their settling, thaw or not). Refused: no slot within ${WAIT_MS} ms. Options:\n\n${FREEZE_SUBJECTS.map((s) => `- ${s.name}: ${s.options}.`).join('\n')}\n\nWhat the holders Redis counted were (${RECOVERY_MS / 1000} s after the thaw; at the end, ${(AFTER_MS / 1000).toFixed(1)} s after it):\n\n${results.map((r) => `- ${r.subject}: ${holdersText(r.afterThaw.holders)} (the lanes: ${holdersText(r.afterThaw.heldBy)}); ${holdersText(r.atEnd.holders)} (the lanes: ${holdersText(r.atEnd.heldBy)})`).join('\n')}\n\nWho gave resilimit's slots: ${results
      .map((r) => holdersText(r.sources))
      .filter((t) => t !== 'none')
      .join(
        '; ',
      )}.\n\nFirst errors seen:\n\n${results.map((r) => `- ${r.subject}: ${r.counters.firstErrors.length === 0 ? 'none' : r.counters.firstErrors.join('; ')}`).join('\n')}\n\nLoad average (1, 5, 15 min) before: ${loadBefore}; after each subject: ${results.map((r) => r.load).join(' | ')}.`,
  );
  return results;
}

main(async () => {
  const hardStop = setTimeout(() => {
    console.error(`bench/slots.ts: stopped after ${TIME_LIMIT_MS / 1000} s (time limit)`);
    process.exit(1);
  }, TIME_LIMIT_MS);
  hardStop.unref();
  process.on('unhandledRejection', onUnhandled);
  process.on('uncaughtException', onUnhandled);
  const bench = new Bench('slots', 'Concurrency limits and budgets: resilimit ConcurrencyLimiter, redis-semaphore, Budget');
  bench.note(`Load average (1, 5, 15 min) at the start: ${load()}${QUICK ? ' (--quick)' : ''}.`);
  const server = await startServer();
  try {
    const cpu = await cpuPart(bench, server);
    const freeze = await freezePart(bench, server);
    bench.note(`Load average (1, 5, 15 min) at the end: ${load()}.`);
    await bench.finish({ quick: QUICK, cpu, freeze });
  } finally {
    server.redis.thaw();
    await server.close();
  }
});
