/**
 * One hot key: decisions/s on a single key of limit 1,000,000 per 60 s against the number of
 * processes (1, 2, 4, 8) sharing it, each with 16 callers, for resilimit (`resolutionMs: 'auto'`:
 * slices at this limit; the exact log would keep a million members) and rate-limiter-flexible's
 * `RateLimiterRedis`, one redis-server. Also Redis calls (script calls) and Redis CPU per decision:
 * a hot key is one Redis core's work whatever the Cluster's size, so what a decision costs there
 * bounds the key. Each cell is a fresh key, measured for 1.5 s after a warm-up, contenders
 * alternating. No lease of permits yet (issue 27 §2): every decision reaches Redis, coalesced.
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
const CONTENDERS = ['resilimit', 'RLF'] as const;
type Name = (typeof CONTENDERS)[number];
type Result = { decisions: number; admitted: number };

/** A worker: one process, ready once connected; 16 callers on `key` from the parent's go, counted for MEASURE_MS from `startAt` (epoch ms). */
async function worker(name: Name, url: string, key: string): Promise<Result> {
  const redis = createRedisClient(url);
  await waitReady(redis as never);
  let decide: () => Promise<boolean>;
  let close: () => Promise<void>;
  if (name === 'resilimit') {
    const limiter = new ResilientLimiter({ redis, limit: LIMIT, windowMs: WINDOW_MS, resolutionMs: 'auto', local: { instances: 1 } });
    decide = async () => {
      const d = await limiter.limit(key);
      if (d.source !== 'redis') throw new Error(`a decision not made by Redis (${d.reason})`);
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
  const result: Result = { decisions: 0, admitted: 0 };
  const endAt = startAt + MEASURE_MS;
  await Promise.all(
    Array.from({ length: CALLERS }, async () => {
      for (;;) {
        const now = Date.now();
        if (now >= endAt) return;
        const allowed = await decide();
        if (now >= startAt) {
          result.decisions += 1;
          if (allowed) result.admitted += 1;
        }
      }
    }),
  );
  await close();
  redis.disconnect();
  return result;
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
    const data: unknown[] = [];
    for (const processes of PROCESSES) {
      const cells = new Map<Name, { perSecond: number; scriptCalls: number; cpuUs: number; admitted: number }>();
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
      }
      const r = cells.get('resilimit') as { perSecond: number; scriptCalls: number; cpuUs: number };
      const f = cells.get('RLF') as { perSecond: number; scriptCalls: number; cpuUs: number };
      rows.push([
        String(processes),
        perSecond(r.perSecond),
        perSecond(f.perSecond),
        ratio(r.perSecond, f.perSecond),
        r.scriptCalls.toFixed(3),
        f.scriptCalls.toFixed(3),
        r.cpuUs.toFixed(2),
        f.cpuUs.toFixed(2),
      ]);
      data.push({ processes, resilimit: r, rlf: f });
    }
    bench.note(
      `Command: \`node bench/hot-key.ts\`. Node ${process.version}, redis-server ${server.version}. One key of limit ${LIMIT.toLocaleString('en-US')} per ${WINDOW_MS / 1000} s, ${CALLERS} callers a process, ${MEASURE_MS} ms measured after a ${WARMUP_MS} ms warm-up; resilimit with \`resolutionMs: 'auto'\` (60 slices a window at this limit). Load average ${startLoad} at the start, ${load()} at the end.`,
    );
    bench.section(
      'Decisions/s on one key',
      `${table(['processes', 'decisions/s resilimit', 'RLF', 'resilimit ÷ RLF', 'script calls/decision resilimit', 'RLF', 'Redis µs/decision resilimit', 'RLF'], rows)}\n\nEvery decision reaches Redis: resilimit's are coalesced into script calls of several decisions of the key (one process's calls of one event-loop turn); RLF makes one script call a decision. Script calls and Redis CPU per decision count the warm-up too.`,
    );
    await bench.finish(data);
    await server.close();
  });
}
