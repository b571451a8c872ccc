/**
 * The bound the library holds itself to, end to end: 4 service processes sharing one limit, offered
 * 2× (and 4×) the limit, through a healthy phase, Redis frozen (SIGSTOP), resumed, frozen again one
 * second later, killed and restarted empty, and healthy again. In every sliding window of every key:
 * admitted ≤ 1.1 × limit in mode `local`, ≤ limit in `fail-closed`; Redis-decided admissions alone ≤
 * limit always. No exception, no unhandled rejection, every decision within the deadline plus the
 * process's own event-loop stalls.
 *
 * Each instance is a process of its own (`chaos/bound/worker.ts`, the built package), as users run
 * them, so that instances recover one after another as their clients reconnect: the staggered
 * recovery that heartbeats must cover (`InstanceCounter`).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisChild } from '../test/support/redis.ts';
import type { CallRecord, FromWorker, Setup, ToWorker } from './bound/worker.ts';
import { netOfStallsMax, overLimit, type Call } from './metrics.ts';

const WORKER = fileURLToPath(new URL('./bound/worker.ts', import.meta.url));
const INSTANCES = 4;
const LIMIT = 40;
const WINDOW_MS = 1000;
const KEYS = 2;
/** The library's default deadline. */
const TIMEOUT_MS = 50;
/** Slack on a decision's latency over the deadline, net of the process's own stalls: timers and one I/O poll on a loaded machine (as the chaos runner's). */
const LATENCY_SLACK_MS = 40;

/** What happens when, in ms from the start of the load. */
const TIMELINE = { freeze: 2000, thaw: 4000, freezeAgain: 5000, thawAgain: 6500, kill: 8000, restart: 8500, end: 12_000 };

let server: RedisChild;

beforeAll(async () => {
  server = await startRedisServer();
});

afterAll(async () => {
  await server?.stop();
});

type Run = { calls: Call[]; stalls: { atMs: number; gapMs: number }[][]; errors: string[]; t0: number };

/** Forks the workers, runs the timeline, and gathers every call they made. */
async function run(mode: Setup['mode'], offered: number): Promise<Run> {
  const setup: Setup = {
    port: server.port,
    prefix: `bound:${randomUUID()}:`,
    limit: LIMIT,
    windowMs: WINDOW_MS,
    mode,
    perSecond: (offered * LIMIT * KEYS * 1000) / WINDOW_MS / INSTANCES,
    keys: KEYS,
    instances: INSTANCES,
  };
  const workers: ChildProcess[] = [];
  const done: Promise<Extract<FromWorker, { kind: 'done' }>>[] = [];
  const counted: Promise<void>[] = [];
  try {
    for (let i = 0; i < INSTANCES; i++) {
      const worker = fork(WORKER, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      workers.push(worker);
      const messages = (kind: FromWorker['kind']) =>
        new Promise<FromWorker>((resolve, reject) => {
          const onMessage = (m: FromWorker) => m.kind === kind && (worker.off('message', onMessage), resolve(m));
          worker.on('message', onMessage);
          worker.once('exit', (code) => reject(new Error(`worker ${i} exited (${code}) before '${kind}'`)));
        });
      counted.push(messages('counted').then(() => undefined));
      done.push(messages('done') as Promise<Extract<FromWorker, { kind: 'done' }>>);
      worker.send({ kind: 'setup', setup } satisfies ToWorker);
    }
    // Instances beat once a second; all four count each other within a few beats (reason: 3 beats, and a loaded machine).
    await Promise.race([Promise.all(counted), sleep(10_000).then(() => Promise.reject(new Error('the workers did not count 4 instances in 10 s')))]);
    for (const w of workers) w.send({ kind: 'go' } satisfies ToWorker);
    const t0 = performance.now();
    const epoch0 = Date.now();
    const at = (ms: number) => sleep(Math.max(0, ms - (performance.now() - t0)));
    await at(TIMELINE.freeze);
    server.freeze();
    await at(TIMELINE.thaw);
    server.thaw();
    await at(TIMELINE.freezeAgain);
    server.freeze();
    await at(TIMELINE.thawAgain);
    server.thaw();
    await at(TIMELINE.kill);
    await server.kill();
    await at(TIMELINE.restart);
    await server.restart();
    await at(TIMELINE.end);
    for (const w of workers) w.send({ kind: 'stop' } satisfies ToWorker);
    const results = await Promise.all(done);
    const calls: Call[] = results.flatMap((r, instance) => r.calls.map((c) => toCall(c, instance)));
    return {
      calls,
      stalls: results.map((r) => r.stalls.map(([atMs, gapMs]) => ({ atMs, gapMs }))),
      errors: results.flatMap((r) => r.errors),
      t0: epoch0,
    };
  } finally {
    server.thaw();
    for (const w of workers) if (w.exitCode === null) w.kill('SIGKILL');
  }
}

function toCall([issuedMs, latencyMs, key, allowed, source, reason, admittedAt, threw]: CallRecord, instance: number): Call {
  return {
    issuedMs,
    latencyMs,
    instance,
    key: `k${key}`,
    allowed: allowed === 1,
    source: source as Call['source'],
    reason: reason as Call['reason'],
    admittedAtMs: admittedAt < 0 ? undefined : admittedAt,
    threw: threw === 1,
  };
}

function summary(name: string, r: Run): { all: ReturnType<typeof overLimit>; redis: ReturnType<typeof overLimit>; latencyNet: number } {
  const all = overLimit(r.calls, WINDOW_MS, LIMIT);
  const redis = overLimit(
    r.calls.filter((c) => c.source === 'redis'),
    WINDOW_MS,
    LIMIT,
  );
  const latencyNet = Math.max(...r.stalls.map((stalls, i) => netOfStallsMax(r.calls.filter((c) => c.instance === i), stalls)));
  const bySource: Record<string, number> = {};
  for (const c of r.calls) bySource[c.source ?? 'none'] = (bySource[c.source ?? 'none'] ?? 0) + 1;
  console.log(
    `${name}: ${r.calls.length} calls ${JSON.stringify(bySource)}; most admitted in a ${WINDOW_MS} ms window: ${LIMIT + all.maxExcess} ` +
      `(limit ${LIMIT}), Redis alone ${LIMIT + redis.maxExcess}; slowest decision net of stalls ${latencyNet.toFixed(1)} ms` +
      (all.firstOver === undefined
        ? ''
        : `; first window over, its last calls (ms from the start): ${all.firstOver.calls
            .slice(-8)
            .map((c) => `${Math.round(c.atMs - r.t0)} #${c.instance} ${c.source}/${c.reason}`)
            .join(', ')}`),
  );
  return { all, redis, latencyNet };
}

describe('4 processes through a freeze, a second freeze and a restart', () => {
  it.each([
    ['local', 2, Math.floor(LIMIT * 0.1)],
    ['local', 4, Math.floor(LIMIT * 0.1)],
    ['fail-closed', 4, 0],
  ] as const)('mode %s offered %i× the limit: admitted within %i over the limit in every window', async (mode, offered, maxExcess) => {
    const r = await run(mode, offered);
    const { all, redis, latencyNet } = summary(`${mode} ${offered}×`, r);
    expect(r.errors).toEqual([]);
    expect(r.calls.filter((c) => c.threw)).toEqual([]);
    expect(redis.maxExcess).toBe(0);
    expect(all.maxExcess).toBeLessThanOrEqual(maxExcess);
    expect(latencyNet).toBeLessThanOrEqual(TIMEOUT_MS + LATENCY_SLACK_MS);
  }, 60_000);
});
