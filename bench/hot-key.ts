/**
 * One hot key: decisions/s on a single key of limit 1,000,000 per 60 s against the number of
 * processes (1, 2, 4, 8) sharing it, each with 16 callers, for resilimit (`resolutionMs: 'auto'`:
 * slices at this limit; the exact log would keep a million members) and rate-limiter-flexible's
 * `RateLimiterRedis`, one redis-server. Also Redis calls (script calls) and Redis CPU per decision:
 * a hot key is one Redis core's work whatever the Cluster's size, so what a decision costs there
 * bounds the key. Each cell is a fresh key, measured for 1.5 s after a warm-up, contenders
 * alternating. A third contender, `leases`, is resilimit with `hotKeys: true`: calls admitted on
 * permits leased ahead (the exact log); for it and resilimit, a brute check of every window.
 *
 *   node bench/hot-key.ts
 */
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { waitReady } from '../test/support/redis.ts';
import { perSecond, ratio, table } from './support/format.ts';
import { scaled } from './support/keys.ts';
import { Bench, main } from './support/report.ts';
import { createRedisClient, ResilientLimiter } from './support/resilimit.ts';
import { startServer } from './support/server.ts';

const LIMIT = 1_000_000;
const WINDOW_MS = 60_000;
const CALLERS = 16;
const PROCESSES = [1, 2, 4, 8];
const WARMUP_MS = scaled(300);
const MEASURE_MS = scaled(1_500);
const CONTENDERS = ['resilimit', 'leases', 'RLF'] as const;
type Name = (typeof CONTENDERS)[number];
/**
 * A process's count: decisions and admissions measured, and for the brute check every admission of
 * the run (warm-up included) by the millisecond it was answered in, and its first refusal's.
 */
type Result = { decisions: number; admitted: number; byMs: [number, number][]; firstRefusalAt: number | undefined };

/** A worker: one process, ready once connected; 16 callers on `key` from the parent's go, counted for MEASURE_MS from `startAt` (epoch ms). */
async function worker(name: Name, url: string, key: string): Promise<Result> {
  const redis = createRedisClient(url);
  await waitReady(redis as never);
  let decide: () => Promise<boolean>;
  let close: () => Promise<void>;
  if (name !== 'RLF') {
    const limiter = new ResilientLimiter({
      redis,
      limit: LIMIT,
      windowMs: WINDOW_MS,
      // Leases are members of the exact log; without them, 'auto' counts this limit by slices.
      ...(name === 'leases'
        ? { hotKeys: true, local: { instances: PROCESSES.at(-1) as number } }
        : { resolutionMs: 'auto', local: { instances: 1 } }),
    });
    decide = async () => {
      const d = await limiter.limit(key);
      // Redis's decisions, and its refusals the deny cache remembers (a full key): never the local tier's.
      if (d.reason !== 'decided' && d.reason !== 'deny-cache') throw new Error(`a decision not made by Redis (${d.reason})`);
      return d.allowed;
    };
    close = () => limiter.close();
  } else {
    const rlf = new RateLimiterRedis({ storeClient: redis, points: LIMIT, duration: WINDOW_MS / 1000, keyPrefix: 'hot' });
    decide = () =>
      rlf.consume(key).then(
        () => true,
        (e: unknown) => {
          if (e instanceof RateLimiterRes) return false;
          throw e;
        },
      );
    close = async () => {};
  }
  // Every process is started and connected before any calls: the parent answers with the start time.
  const startAt = await new Promise<number>((resolve) => {
    process.once('message', (m) => resolve(Number(m)));
    process.send?.('ready');
  });
  const result: Result = { decisions: 0, admitted: 0, byMs: [], firstRefusalAt: undefined };
  const byMs = new Map<number, number>();
  const endAt = startAt + MEASURE_MS;
  await Promise.all(
    Array.from({ length: CALLERS }, async () => {
      for (;;) {
        const now = Date.now();
        if (now >= endAt) return;
        const allowed = await decide();
        const at = Date.now();
        if (allowed) byMs.set(at, (byMs.get(at) ?? 0) + 1);
        else result.firstRefusalAt ??= at;
        if (now >= startAt) {
          result.decisions += 1;
          if (allowed) result.admitted += 1;
        }
      }
    }),
  );
  await close();
  redis.disconnect();
  result.byMs = [...byMs];
  return result;
}

/**
 * The most admissions in any window, those before the first refusal (as a share of the limit), all
 * of them, and how fast they came while the key had room (until the first refusal).
 */
function bruteCheck(done: readonly Result[]): { cells: string[]; admittingPerSecond: number } {
  const byMs = new Map<number, number>();
  for (const r of done) for (const [ms, n] of r.byMs) byMs.set(ms, (byMs.get(ms) ?? 0) + n);
  const sorted = [...byMs].sort((a, b) => a[0] - b[0]);
  let most = 0;
  let sum = 0;
  let start = 0;
  for (const [ms, n] of sorted) {
    sum += n;
    while ((sorted[start] as [number, number])[0] <= ms - WINDOW_MS) sum -= (sorted[start++] as [number, number])[1];
    most = Math.max(most, sum);
  }
  const refusals = done.flatMap((r) => (r.firstRefusalAt === undefined ? [] : [r.firstRefusalAt]));
  const firstRefusal = refusals.length === 0 ? undefined : Math.min(...refusals);
  const before = firstRefusal === undefined ? undefined : sorted.filter(([ms]) => ms < firstRefusal).reduce((n, [, c]) => n + c, 0);
  const all = sorted.reduce((n, [, c]) => n + c, 0);
  const share = (n: number): string => `${n.toLocaleString('en-US')} (${((100 * n) / LIMIT).toFixed(2)} %)`;
  const firstAt = sorted[0]?.[0] ?? 0;
  const lastAt = sorted.at(-1)?.[0] ?? 0;
  const admittingPerSecond =
    firstRefusal === undefined ? all / ((lastAt - firstAt + 1) / 1000) : (before as number) / ((firstRefusal - firstAt + 1) / 1000);
  return {
    cells: [share(most), before === undefined ? 'no refusal' : share(before), share(all), perSecond(admittingPerSecond)],
    admittingPerSecond,
  };
}

if (process.argv[2] === '--worker') {
  const [, , , name, url, key] = process.argv;
  worker(name as Name, url as string, key as string).then(
    (r) => process.send?.(r, () => process.exit(0)),
    (e: unknown) => {
      console.error(e);
      process.exit(1);
    },
  );
} else {
  main(async () => {
    const bench = new Bench('hot-key', 'One hot key: decisions/s against the number of processes');
    const server = await startServer();
    const load = (): string =>
      loadavg()
        .map((x) => x.toFixed(2))
        .join(', ');
    const startLoad = load();
    const cpuUs = async (): Promise<number> => {
      const info = await server.redis.info('cpu');
      return (Number(info['used_cpu_user']) + Number(info['used_cpu_sys'])) * 1e6;
    };
    const rows: string[][] = [];
    const bounds: string[][] = [];
    const data: unknown[] = [];
    type Cell = { perSecond: number; scriptCalls: number; cpuUs: number; admitted: number };
    for (const processes of PROCESSES) {
      const cells = new Map<Name, Cell>();
      const admitting = new Map<Name, number>();
      for (const name of processes % 2 === 0 ? CONTENDERS : [...CONTENDERS].reverse()) {
        bench.progress(`${processes} process${processes === 1 ? '' : 'es'}: ${name}`);
        const key = `hot:${name}:${processes}`;
        await server.resetStats();
        const children = Array.from({ length: processes }, () =>
          fork(fileURLToPath(import.meta.url), ['--worker', name, server.redis.url, key], {
            stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
          }),
        );
        const results = children.map(
          (child) =>
            new Promise<Result>((resolve, reject) => {
              child.on('message', (m) => {
                if (m !== 'ready') resolve(m as Result);
              });
              child.once('exit', (code) => (code === 0 ? undefined : reject(new Error(`worker exited ${code}`))));
            }),
        );
        await Promise.all(children.map((child) => new Promise<void>((resolve) => child.once('message', () => resolve()))));
        const startAt = Date.now() + WARMUP_MS;
        for (const child of children) child.send(startAt);
        const cpu0 = await cpuUs();
        const done = await Promise.all(results);
        const cpu = (await cpuUs()) - cpu0;
        const stats = await server.scriptStats();
        const decisions = done.reduce((n, r) => n + r.decisions, 0);
        // The whole run's script calls and CPU (warm-up included) over its decisions (warm-up included, estimated).
        const all = decisions * ((MEASURE_MS + WARMUP_MS) / MEASURE_MS);
        cells.set(name, {
          perSecond: decisions / (MEASURE_MS / 1000),
          scriptCalls: stats.calls / all,
          cpuUs: cpu / all,
          admitted: done.reduce((n, r) => n + r.admitted, 0) / decisions,
        });
        const brute = bruteCheck(done);
        if (name !== 'RLF') bounds.push([String(processes), name, ...brute.cells]);
        admitting.set(name, brute.admittingPerSecond);
      }
      const [r, l, f] = CONTENDERS.map((name) => cells.get(name) as Cell) as [Cell, Cell, Cell];
      rows.push([
        String(processes),
        perSecond(r.perSecond),
        perSecond(l.perSecond),
        perSecond(f.perSecond),
        ratio(r.perSecond, f.perSecond),
        ratio(l.perSecond, f.perSecond),
        `${(100 * l.admitted).toFixed(0)} %`,
        ratio(admitting.get('leases') as number, admitting.get('RLF') as number),
        [r, l, f].map((c) => c.scriptCalls.toFixed(4)).join(' · '),
        [r, l, f].map((c) => c.cpuUs.toFixed(2)).join(' · '),
      ]);
      data.push({ processes, resilimit: r, leases: l, rlf: f });
    }
    bench.note(
      `Command: \`node bench/hot-key.ts\`. Node ${process.version}, redis-server ${server.version}. One key of limit ${LIMIT.toLocaleString('en-US')} per ${WINDOW_MS / 1000} s, ${CALLERS} callers a process, ${MEASURE_MS} ms measured after a ${WARMUP_MS} ms warm-up; resilimit with \`resolutionMs: 'auto'\` (60 slices a window at this limit). Load average ${startLoad} at the start, ${load()} at the end.`,
    );
    bench.section(
      'Decisions/s on one key',
      `${table(['processes', 'decisions/s resilimit', 'leases', 'RLF', 'resilimit ÷ RLF', 'leases ÷ RLF', 'leases admitted', 'admitted/s while room, leases ÷ RLF', 'script calls/decision resilimit · leases · RLF', 'Redis µs/decision resilimit · leases · RLF'], rows)}\n\n\`resilimit\`: every decision reaches Redis, coalesced into script calls of several decisions of the key (one process's calls of one event-loop turn), counted by slices. \`leases\`: \`hotKeys: true\` (the exact log), a process admits calls on permits leased ahead; once the key is full its refusals come from the deny cache. RLF makes one script call a decision. Script calls and Redis CPU per decision count the warm-up too; "leases admitted": the share of its measured decisions admitted (the key fills within the run when leases are fast enough).`,
    );
    bench.section(
      'Never over the limit, and refusals near it',
      `${table(['processes', 'contender', 'most admitted in any window', 'admitted when the first refusal came', 'admitted in all', 'admitted/s while room'], bounds)}\n\nEvery admission of the run (warm-up included) by the millisecond each process received it, all processes together (one host, one clock): the most in any ${WINDOW_MS / 1000} s window (a brute check, at most the limit), and how many had been admitted before the first refusal any process received (as a share of the limit: refusals start that near it).`,
    );
    await bench.finish(data);
    await server.close();
  });
}
