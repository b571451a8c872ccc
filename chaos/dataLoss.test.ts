/**
 * Redis losing data without a reconnect:
 * - `FLUSHALL` mid-traffic, three times, under two service processes sharing one limit, on the public
 *   harness (`resilimit/chaos`, the built package) with a scenario of our own: before, 39 admitted in
 *   a window of 20 in one run of five;
 * - `maxmemory 4mb` with `volatile-lru`, a limit of 1 a minute and 20,000 users each calling twice:
 *   before, about 4,000 users were admitted a second time within the minute, and nothing warned. One
 *   limiter in this process on a `redis-server` child: the harness's load takes at most 1,000 keys,
 *   and its instances start before a scenario can set `maxmemory` (the limiter reads the eviction
 *   settings a beat after its client is ready, then once a minute while they cannot evict).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as Chaos from '../src/chaos.ts';
import type { ChaosReport, ChaosScenario, FaultContext, ScenarioFigures, ScenarioOutcome } from '../src/chaos.ts';
import { respOnce } from '../src/chaos/resp.ts';
import { createRedisClient, ResilientLimiter } from '../src/index.ts';
import { startRedisServer, waitReady, type RedisChild } from '../test/support/redis.ts';

const { runChaos } = (await import(new URL('../dist/chaos.js', import.meta.url).href)) as typeof Chaos;
const CONFIG = fileURLToPath(new URL('./configs/repo.mjs', import.meta.url));
/** The library's defaults, over the repository config's shorter ones. */
const BREAKER = { timeoutMs: 50, resetTimeoutMs: 1000, maxResetTimeoutMs: 30_000, volumeThreshold: 10 };

/** One scenario on `instances` processes, with `env` (the repository config's CHAOS_OPTIONS, CHAOS_KEYS, CHAOS_RATE) set around it. */
async function run(instances: number, scenario: ChaosScenario, env: Record<string, string>): Promise<ScenarioOutcome> {
  const saved = { ...process.env };
  Object.assign(process.env, env);
  let report: ChaosReport;
  try {
    report = await runChaos({ config: CONFIG, instances, scenarios: [scenario], seed: 1 });
  } finally {
    for (const key of Object.keys(env)) {
      if (saved[key] === undefined) delete process.env[key];
      else process.env[key] = saved[key];
    }
  }
  const [o] = report.scenarios;
  if (o?.figures === undefined) throw new Error(`no figures for ${scenario.name}: ${o?.skipped ?? 'no outcome'}`);
  return o;
}

const command = (c: FaultContext, ...args: (string | number)[]): Promise<unknown> => respOnce({ ...c.admin, timeoutMs: 2000 }, ...args);
/** The instances' errors but for the limiter's own warnings. */
const errorsOf = (o: ScenarioOutcome): string[] => o.errors.filter((e) => !/^instance \d+: warning /.test(e));

describe('FLUSHALL mid-traffic', () => {
  it('two processes, limit 20 a second, flushed three times: within 1.1 × the limit in every window', async () => {
    const limit = 20;
    // FLUSHALL at 2 s, 3.5 s and 5 s from the start; 2 s to the end.
    const flushes: ChaosScenario = {
      name: 'flushall-3',
      title: 'FLUSHALL three times, 1.5 s apart',
      destructive: true,
      phases: { healthyMs: 2000, faultMs: 3000, recoveryMs: 2000 },
      async start(c) {
        await command(c, 'FLUSHALL');
        await sleep(1500);
        await command(c, 'FLUSHALL');
      },
      stop: async (c) => void (await command(c, 'FLUSHALL')),
    };
    // 100 calls/s from each process over 2 keys.
    const o = await run(2, flushes, {
      CHAOS_OPTIONS: JSON.stringify({ limit, windowMs: 1000, mode: 'local', breaker: BREAKER }),
      CHAOS_KEYS: '2',
      CHAOS_RATE: '200',
    });
    const f = o.figures as ScenarioFigures;
    console.log(
      `FLUSHALL ×3: ${f.decisions} decisions, most admitted in a 1000 ms window ${f.mostAdmitted.count} (limit ${limit}), ` +
        `Redis alone ${f.mostAdmittedByRedis.count}; slowest net of stalls ${f.latencyNetOfStallsMax.toFixed(1)} ms; ${JSON.stringify(f.byReason)}; ` +
        `verdicts ${o.verdicts.map((v) => `${v.name} ${v.pass}`).join(', ')}`,
    );
    // Redis's own decisions are not held to the limit here: re-seeded from the warm windows after a
    // flush, Redis alone admitted 21 in a window of 20 in one run of four (2 CPUs busy).
    const failed = (name: string): boolean => o.verdicts.find((v) => v.name === name)?.pass !== true;
    expect(['bound', 'lost'].filter(failed), JSON.stringify(o.verdicts)).toEqual([]);
    expect(errorsOf(o)).toEqual([]);
    expect(f.mostAdmitted.count).toBeLessThanOrEqual(Math.floor(limit * 1.1));
    expect(f.mostAdmitted.count).toBeGreaterThanOrEqual(limit); // the load reached the limit
  }, 60_000);
});

describe('eviction under maxmemory', () => {
  let server: RedisChild;
  let admin: Redis;

  beforeAll(async () => {
    server = await startRedisServer();
    admin = server.client();
    await waitReady(admin);
  });

  afterAll(async () => {
    await server?.close();
  });

  it('maxmemory 4mb, volatile-lru, limit 1 a minute, 20,000 users calling twice: warned, and no user admitted twice', async () => {
    const users = 20_000;
    await admin.config('SET', 'maxmemory', '4mb', 'maxmemory-policy', 'volatile-lru');
    const codes: string[] = [];
    const onWarning = (w: Error & { code?: string }): void => void (w.code !== undefined && codes.push(w.code));
    process.on('warning', onWarning);
    const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
    await waitReady(redis);
    // The warm window holds every user (local.maxKeys): a key Redis evicted is answered by it.
    // heartbeatMs paces the data watch: it reads the server's eviction settings a beat after the client is ready, then every beat.
    const limiter = new ResilientLimiter({
      redis,
      prefix: `evict:${randomUUID()}:`,
      limit: 1,
      windowMs: 60_000,
      heartbeatMs: 100,
      local: { instances: 1, maxKeys: 50_000 },
      breaker: { timeoutMs: 2_000 },
    });
    const lost: number[] = [];
    limiter.on('dataLost', (loss) => void lost.push(loss.evictedKeys ?? 0));
    try {
      await new Promise((resolve) => setTimeout(resolve, 1000)); // the watch's first read (100 ms), with 900 ms for a loaded machine
      const round = async (): Promise<number> => {
        let admitted = 0;
        for (let i = 0; i < users; i += 500) {
          const ds = await Promise.all(Array.from({ length: 500 }, (_, j) => limiter.limit(`user:${i + j}`)));
          admitted += ds.filter((d) => d.allowed).length;
        }
        return admitted;
      };
      const first = await round();
      const evicted = Number(/^evicted_keys:(\d+)/m.exec(await admin.info('stats'))?.[1]);
      const second = await round();
      await new Promise((resolve) => setTimeout(resolve, 1000)); // a watch read (every beat, 100 ms) and the warnings' tick
      console.log(
        `eviction: first round admitted ${first} of ${users}, Redis evicted ${evicted} keys, second round admitted ${second}; dataLost events ${lost.length}; warnings ${codes.join(', ')}`,
      );
      expect(first).toBe(users);
      expect(evicted).toBeGreaterThan(0);
      expect(second).toBe(0);
      expect(codes).toContain('RESILIMIT_EVICTION_POLICY');
      expect(codes).toContain('RESILIMIT_KEYS_EVICTED');
      expect(lost.length).toBeGreaterThan(0);
    } finally {
      process.off('warning', onWarning);
      await limiter.close();
      redis.disconnect();
      await admin.config('SET', 'maxmemory', '0', 'maxmemory-policy', 'noeviction');
    }
  }, 120_000);
});
