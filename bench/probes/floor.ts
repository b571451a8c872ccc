/**
 * What the design costs at the least, on each side, against rate-limiter-flexible's counters: the
 * floor under the targets docs/benchmarks.md states (its section "What bounds the targets").
 *
 * - Redis: CPU per command of what an admitted call of the exact sliding log must do to its key's
 *   sorted set (`ZADD NX` of a new newest member, `ZCARD`) against rate-limiter-flexible's string
 *   counter (`INCRBY`), timed inside one script call per case on Redis's own clock (`TIME`), so no
 *   network, parsing or client is counted: at 10, 50 and 100 members (a listpack, Redis's encoding
 *   up to `zset-max-listpack-entries`, 128 by default), where `ZADD` must scan the members for the
 *   new one and for its place. Each `ZADD NX` is paired with the `ZREM` of the same member, to keep
 *   the set's size; the pair's time is halved (a `ZREM` costs about what a `ZADD` does).
 * - This process: decisions/s of the least an exact sliding log with the warm standby keeps per call
 *   (a key's log in an lru-cache bounded store, its time and its generated id, decided and awaited
 *   through an async function, with the decision object a caller gets), against
 *   `RateLimiterMemory.consume()` awaited, `LocalWindow` (synchronous) and `ResilientLimiter` with
 *   the breaker held open; 10,000 keys, limit 100 per 60 s, every key touched once then 200,000
 *   calls at random (all admitted); rounds interleaved in one process, median of each.
 *
 *   node bench/probes/floor.ts
 */
import { LRUCache } from 'lru-cache';
import { performance } from 'node:perf_hooks';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { perSecond, ratio, table } from '../support/format.ts';
import { makeKeys } from '../support/keys.ts';
import { Bench, main } from '../support/report.ts';
import { createRedisClient, LocalWindow, ResilientLimiter } from '../support/resilimit.ts';
import { startServer } from '../support/server.ts';

const ITERATIONS = 50_000;
const SIZES = [10, 50, 100];

/** Times `ARGV[2]` iterations of one case on a key of `ARGV[1]` members; replies µs per command. */
const COMMAND_COST = `
local n, iterations, case = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local key = KEYS[1]
redis.call('DEL', key, key .. ':n')
local base = 1764000000000
for i = 1, n do redis.call('ZADD', key, base + i, 'c' .. i .. 'Xy7_Qa9-') end
local t0 = redis.call('TIME')
for i = 1, iterations do
  if case == 'zadd' then
    redis.call('ZADD', key, 'NX', base + n + 1, 'newest_Xy7_Qa9-')
    redis.call('ZREM', key, 'newest_Xy7_Qa9-')
  elseif case == 'zcard' then
    redis.call('ZCARD', key)
    redis.call('ZCARD', key)
  else
    redis.call('INCRBY', key .. ':n', 1)
    redis.call('INCRBY', key .. ':n', 1)
  end
end
local t1 = redis.call('TIME')
local encoding = redis.call('OBJECT', 'ENCODING', key)
redis.call('DEL', key, key .. ':n')
return { encoding, tostring(((t1[1] - t0[1]) * 1e6 + (t1[2] - t0[2])) / iterations / 2) }
`;

const N = 10_000;
const LIMIT = 100;
const WINDOW_MS = 60_000;
const CALLS = 200_000;
const ROUNDS = 9;

type Subject = { decide(key: string): Promise<boolean> | boolean; close(): Promise<void> };

/** The floor model: a key's log of times and generated ids in an lru-cache bounded store. */
class FloorLog {
  times: number[] = [];
  ids: number[] = [];
  head = 0;
}

function floorModel(): Subject {
  const logs = new LRUCache<string, FloorLog>({ max: N });
  // One options object for every get (see LocalWindow): lru-cache makes one per call otherwise.
  const getOptions: LRUCache.GetOptions<string, FloorLog, unknown> = {};
  let seq = 0;
  const decide = async (key: string): Promise<boolean> => {
    const now = Date.now();
    let log = logs.get(key, getOptions);
    if (log === undefined) logs.set(key, (log = new FloorLog()));
    const { times } = log;
    while (log.head < times.length && (times[log.head] as number) <= now - WINDOW_MS) log.head += 1;
    const used = times.length - log.head;
    if (used >= LIMIT) return { allowed: false, remaining: 0, resetAtMs: (times[log.head] as number) + WINDOW_MS }.allowed;
    times.push(now);
    log.ids.push((seq += 1));
    return { allowed: true, remaining: LIMIT - used - 1, resetAtMs: now + WINDOW_MS }.allowed;
  };
  return { decide, close: async () => {} };
}

const SUBJECTS: { id: string; name: string; create(): Subject }[] = [
  {
    id: 'rlf-memory',
    name: 'rate-limiter-flexible RateLimiterMemory',
    create() {
      const limiter = new RateLimiterMemory({ points: LIMIT, duration: WINDOW_MS / 1000 });
      return {
        decide: (key) =>
          limiter.consume(key).then(
            () => true,
            () => false,
          ),
        close: async () => {},
      };
    },
  },
  { id: 'floor', name: 'floor model: exact log, lru-cache, time and id per call, awaited', create: floorModel },
  {
    id: 'local-window',
    name: 'resilimit LocalWindow (synchronous)',
    create() {
      const window = new LocalWindow({ limit: LIMIT, windowMs: WINDOW_MS, maxKeys: N });
      return { decide: (key) => window.limit(key).allowed, close: async () => window.clear() };
    },
  },
  {
    id: 'resilient-open',
    name: 'resilimit ResilientLimiter, breaker open',
    create() {
      const redis = createRedisClient({ lazyConnect: true, host: '127.0.0.1', port: 9 });
      const limiter = new ResilientLimiter({ redis, limit: LIMIT, windowMs: WINDOW_MS, local: { instances: 1, maxKeys: N } });
      limiter.forceOpen();
      return {
        decide: (key) => limiter.limit(key).then((d) => d.allowed),
        async close() {
          await limiter.close();
          redis.disconnect();
        },
      };
    },
  },
];

async function rate(subject: Subject, keys: readonly string[]): Promise<number> {
  for (const key of keys) await subject.decide(key);
  let admitted = 0;
  const start = performance.now();
  for (let i = 0; i < CALLS; i += 1) if (await subject.decide(keys[(i * 7919) % N] as string)) admitted += 1;
  const elapsed = performance.now() - start;
  if (admitted !== CALLS) throw new Error(`expected every call admitted, got ${admitted} of ${CALLS}`);
  return (CALLS * 1000) / elapsed;
}

const median = (values: readonly number[]): number => [...values].sort((a, b) => a - b)[values.length >> 1] as number;

main(async () => {
  const bench = new Bench('floor', 'What the design costs at the least, on each side');
  const server = await startServer();
  const costs = new Map<string, { encoding: string; us: number }>();
  try {
    for (const n of SIZES) {
      for (const c of ['zadd', 'zcard', 'incrby']) {
        if (c !== 'zadd' && n !== SIZES[1]) continue;
        bench.progress(`Redis: ${c} at ${n} members`);
        const [encoding, us] = (await server.admin.eval(COMMAND_COST, 1, 'floor:z', n, ITERATIONS, c)) as [string, string];
        costs.set(`${c}/${n}`, { encoding: c === 'incrby' ? 'string' : encoding, us: Number(us) });
      }
    }
  } finally {
    await server.close();
  }
  const incr = costs.get(`incrby/${SIZES[1]}`)?.us ?? Number.NaN;
  bench.section(
    `Redis CPU per command inside a script (${ITERATIONS.toLocaleString('en-US')} iterations per case, Redis's TIME; redis-server ${server.version})`,
    `${table(
      ['command', 'members', 'encoding', 'µs per command', '÷ INCRBY'],
      [...costs].map(([id, cost]) => {
        const [c, n] = id.split('/') as [string, string];
        const name = c === 'zadd' ? 'ZADD NX (a new newest member)' : c === 'zcard' ? 'ZCARD' : 'INCRBY (a counter)';
        return [name, c === 'incrby' ? '–' : n, cost.encoding, cost.us.toFixed(2), ratio(cost.us, incr)];
      }),
    )}\n\nAn admitted call of the exact log costs one ZADD NX on its key's set (plus ZCARD, a read of the lowest member and PEXPIRE GT: lua/sliding-window.lua); rate-limiter-flexible's costs an INCRBY (plus SET NX and PTTL) on a string.`,
  );

  const keys = makeKeys(N);
  const rates = new Map<string, number[]>(SUBJECTS.map((s) => [s.id, []]));
  for (let round = 0; round < ROUNDS; round += 1) {
    for (let j = 0; j < SUBJECTS.length; j += 1) {
      const s = SUBJECTS[(j + round) % SUBJECTS.length] as (typeof SUBJECTS)[number];
      bench.progress(`round ${round + 1}/${ROUNDS}: ${s.name}`);
      const subject = s.create();
      rates.get(s.id)?.push(await rate(subject, keys));
      await subject.close();
    }
  }
  const rlf = median(rates.get('rlf-memory') ?? []);
  bench.section(
    `Decisions/s in this process, breaker open (${N.toLocaleString('en-US')} keys, limit ${LIMIT} per ${WINDOW_MS / 1000} s, all admitted; median of ${ROUNDS} interleaved rounds of ${CALLS.toLocaleString('en-US')} calls)`,
    `${table(
      ['contender', 'decisions/s', '÷ RateLimiterMemory'],
      SUBJECTS.map((s) => {
        const r = median(rates.get(s.id) ?? []);
        return [s.name, perSecond(r), ratio(r, rlf)];
      }),
    )}\n\nThe floor model keeps what an exact log with the warm standby cannot do without; ResilientLimiter adds to it the input checks, the gate, the journal entry, the stats and its decision's id.`,
  );
  await bench.finish({ commandCostUs: Object.fromEntries(costs), decisionsPerSecond: Object.fromEntries(rates) });
});
