/**
 * Redis Sentinel, for real: a master, one replica and three Sentinels (quorum 2,
 * down-after-milliseconds 1 s), all `redis-server` child processes, and clients from
 * `createRedisClient({ sentinels, name })`, with the breaker's default settings.
 *
 * - The master killed (SIGKILL) under load from two processes, each with its own limiter (mode
 *   'local', instances counted by heartbeats): every decision within the deadline, no window over the
 *   bound, and Redis deciding again soon after the Sentinels promote the replica. The timeline is
 *   printed (kill → promotion → each process's breaker, client and first Redis decision), as the
 *   README quotes it. The processes exit by themselves once they quit their clients.
 * - A failover that leaves the old master running (`SENTINEL FAILOVER`): the client follows the
 *   announcement at once (`followFailovers`), instead of staying on the old master until the
 *   Sentinels demote it (about 10 s, measured), and the old master gets no more calls.
 * - A frozen Sentinel first in the list when the master dies: the client still reaches the new
 *   master (`sentinelCommandTimeout`), and is not ended by the announcement (as it was with
 *   ioredis's own `failoverDetector`).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter, type LimiterDecision } from '../../src/index.js';
import { withProbe, type RedisChild } from '../support/redis.js';
import { startSentinels, type SentinelDeployment } from '../support/sentinel.js';
import type { Row, WorkerConfig, WorkerReport } from '../support/sentinelWorker.js';

const WORKER = fileURLToPath(new URL('../support/sentinelWorker.ts', import.meta.url));
const LIMIT = 50;
const WINDOW_MS = 2000;
const KEYS = ['k0', 'k1', 'k2', 'k3'];
/** One call per key every 40 ms in each of the two processes: 100 calls per window and key, twice the limit. */
const TICK_MS = 40;
const DEADLINE_MS = 50; // breaker.timeoutMs, the default
const SLACK_MS = 40; // timer slack on top of the deadline, as in the chaos suite and the Cluster failover test
/** The bound of mode 'local' for admissions across both processes in any window (the Redis-decided ones alone stay within LIMIT). */
const LOCAL_BOUND = Math.floor(1.1 * LIMIT);
/**
 * From the promotion (the first `+promoted-slave` or `+switch-master`) to each process's first Redis
 * decision. The client retries the dead master every second by then (back-off 50 ms doubling to a
 * 1 s cap, plus up to 50 ms jitter, and the promotion comes about 2 s after the kill), so it connects
 * to the new master within about 1.05 s; its ready check, the breaker's PING trial and the write-back
 * of the outage's calls take milliseconds here. The rest is room for a loaded two-core machine.
 */
const BACK_WITHIN_MS = 3000;
/**
 * From the announcement to the client ready on the new master, the old one still running: the
 * reconnect waits the back-off's first step (50–100 ms), then the Sentinel's answer, a connection and
 * the ready check (a few ms here). The rest is room for a loaded machine.
 */
const FOLLOW_WITHIN_MS = 1500;
/**
 * The same with the first Sentinel frozen and the master dead: the client retries every second by
 * then (the back-off's cap, plus up to 50 ms of jitter), and each attempt asks the frozen Sentinel
 * first, for up to sentinelCommandTimeout (500 ms). The rest is room for a loaded machine.
 */
const FROZEN_WITHIN_MS = 3000;
/** How long a worker may take to exit once it reported: ioredis gives a closing socket up to 2 s (disconnectTimeout) before it destroys it. */
const EXIT_WITHIN_MS = 3000;

/** Decisions by `source/reason`. */
function counts(rows: readonly Row[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of rows) {
    const name = r.error === undefined ? `${r.source}/${r.reason}` : 'error';
    out[name] = (out[name] ?? 0) + 1;
  }
  return out;
}

/** A call's latency less its overlap with this process's event-loop stalls (they delay every pending answer and timer alike). */
function netLatency(row: Row, stalls: WorkerReport['stalls']): number {
  const end = row.at + row.latencyMs;
  let stalled = 0;
  for (const s of stalls) stalled += Math.max(0, Math.min(end, s.at + s.gapMs) - Math.max(row.at, s.at));
  return row.latencyMs - stalled;
}

/**
 * The most permits admitted over `limit` in any window (t − WINDOW_MS, t] of any key, across both
 * processes, from each admitted call's time on the tier that admitted it (resetAtMs − WINDOW_MS: an
 * admitted call is the newest of its window; Redis's clock and the processes' are this host's).
 */
function maxInWindow(rows: readonly Row[], admitted: (r: Row) => boolean): number {
  let worst = 0;
  for (const key of KEYS) {
    const times = rows
      .filter((r) => r.key === key && r.allowed === true && admitted(r))
      .map((r) => (r.resetAtMs as number) - WINDOW_MS)
      .sort((a, b) => a - b);
    let start = 0;
    for (let end = 0; end < times.length; end++) {
      while ((times[start] as number) <= (times[end] as number) - WINDOW_MS) start++;
      worst = Math.max(worst, end - start + 1);
    }
  }
  return worst;
}

const round = (value: number | undefined): number | undefined => (value === undefined ? undefined : Math.round(value));

/** Polls `value` every 10 ms until it is defined; rejects after `ms` (a cap on waiting, not a measured bound). */
async function eventually<T>(value: () => T | undefined, ms: number, what: string): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = value();
    if (v !== undefined) return v;
    if (performance.now() > deadline) throw new Error(`${what} within ${ms} ms`);
    await sleep(10);
  }
}

/** `promise`, or a rejection saying that `what` did not happen within `ms` (a cap on waiting, not a measured bound). */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

describe('a Sentinel master killed under load from two processes', () => {
  let d: SentinelDeployment;
  const workers: ChildProcess[] = [];

  beforeAll(async () => {
    d = await startSentinels({ downAfterMs: 1000, failoverTimeoutMs: 5000 });
  });
  afterAll(async () => {
    for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
    await d?.close(); // checks that every redis-server it started has exited
  });

  it('answers every call within the deadline, keeps the bound, and has Redis decide again soon after the promotion', async () => {
    const config: WorkerConfig = {
      sentinels: [...d.addresses],
      name: d.name,
      prefix: `s:${randomUUID()}:`,
      keys: KEYS,
      limit: LIMIT,
      windowMs: WINDOW_MS,
      tickMs: TICK_MS,
    };
    const now = (): number => performance.timeOrigin + performance.now();
    const backs: (number | undefined)[] = [undefined, undefined];
    const reports: Promise<WorkerReport>[] = [];
    const readies: Promise<unknown>[] = [];
    for (let i = 0; i < 2; i++) {
      const w = fork(WORKER, [JSON.stringify(config)], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      workers.push(w);
      readies.push(new Promise((resolve) => w.on('message', (m: { type: string }) => m.type === 'ready' && resolve(undefined))));
      reports.push(new Promise((resolve) => w.on('message', (m: WorkerReport) => m.type === 'report' && resolve(m))));
      w.on('message', (m: { type: string; at: number }) => {
        if (m.type === 'back') backs[i] = m.at;
      });
    }
    // Each worker is ready once its client is and its limiter counts both (heartbeats every second):
    // about 2 s here; 15 s only caps the wait.
    await within(Promise.all(readies), 15_000, 'the workers were not ready');
    const [master, replica] = d.nodes;
    if (master === undefined || replica === undefined) throw new Error('no master or replica');

    for (const w of workers) w.send({ type: 'start' });
    // More than one window of healthy load: the warm windows hold a full window when the master dies.
    await sleep(WINDOW_MS + 500);
    await master.kill(); // resolves once the process has exited
    const tKill = now();
    for (const w of workers) w.send({ type: 'killed' });

    // The promotion, from when a Sentinel could first name the replica as the master (+promoted-slave
    // from the failover's leader, or +switch-master): about 2.2 s after the kill here; 15 s only caps the wait.
    const tPromoted = performance.timeOrigin + (await eventually(() => d.promotedAt(replica.port), 15_000, 'no promotion'));
    // Both processes back on Redis (10 s only caps the wait), then two more windows of load: what
    // recovery admits, and Redis in charge again.
    const backBy = now() + 10_000;
    while (backs.some((b) => b === undefined) && now() < backBy) await sleep(20);
    await sleep(2 * WINDOW_MS);
    for (const w of workers) w.send({ type: 'stop' });
    // A worker reports once its pending calls are answered and its limiter closed: milliseconds; 15 s only caps the wait.
    const results = await within(Promise.all(reports), 15_000, 'the workers did not report');
    // Each worker closed its limiter and quit its client: nothing is left to keep it alive. (With
    // ioredis's own failoverDetector its Sentinel connections outlived quit() and it never exited.)
    const exited = await within(
      Promise.all(workers.map((w) => (w.exitCode === null && w.signalCode === null ? once(w, 'exit') : undefined))),
      EXIT_WITHIN_MS,
      'the workers did not exit',
    ).then(
      () => true,
      () => false,
    );

    const rel = (t: number | undefined): number | undefined => round(t === undefined ? undefined : t - tKill);
    const all = results.flatMap((r) => r.rows);
    const summaries = results.map((r, i) => {
      const opened = r.states.find((s) => s.at > tKill && s.state === 'open')?.at;
      const closed = r.states.find((s) => s.at > tKill && s.state === 'closed')?.at;
      const ready = r.readies.find((x) => x.at > tKill);
      const firstRedis = r.rows.find((row) => row.at > tKill && row.source === 'redis')?.at;
      const latencies = r.rows.map((row) => row.latencyMs).sort((a, b) => a - b);
      return {
        process: i,
        breakerOpenedMs: rel(opened),
        readyOnNewMasterMs: rel(ready?.at),
        readyPort: ready?.port,
        readiesAfterKill: r.readies.filter((x) => x.at > tKill).length,
        breakerClosedMs: rel(closed),
        firstRedisDecisionMs: rel(firstRedis),
        firstRedisAfterPromotionMs: round(firstRedis === undefined ? undefined : firstRedis - tPromoted),
        localLimit: r.localLimit,
        instances: r.instances,
        decisions: r.rows.length,
        before: counts(r.rows.filter((row) => row.at < tKill)),
        outage: counts(r.rows.filter((row) => row.at >= tKill && row.at < (firstRedis ?? Infinity))),
        after: counts(r.rows.filter((row) => row.at >= (firstRedis ?? Infinity))),
        maxLatencyMs: Number((latencies.at(-1) ?? 0).toFixed(1)),
        maxNetLatencyMs: Number(Math.max(...r.rows.map((row) => netLatency(row, r.stalls))).toFixed(1)),
        longestStallMs: Number(Math.max(0, ...r.stalls.map((s) => s.gapMs)).toFixed(1)),
        failures: r.failures,
      };
    });
    const maxAdmitted = maxInWindow(all, (r) => r.source === 'redis' || r.source === 'local');
    const maxRedisAdmitted = maxInWindow(all, (r) => r.source === 'redis');
    console.log(
      [
        'Sentinel failover under load, ms from the SIGKILL of the master:',
        `  promotion: +promoted-slave at ${d.promotions.map((p) => `${rel(performance.timeOrigin + p.at)} (sentinel ${p.sentinel})`).join(', ')}; ` +
          `+switch-master at ${d.switches.map((s) => `${rel(performance.timeOrigin + s.at)} (sentinel ${s.sentinel})`).join(', ')}`,
        ...summaries.map(
          (s) =>
            `  process ${s.process}: breaker open at ${s.breakerOpenedMs}, client ready on the new master at ${s.readyOnNewMasterMs}, ` +
            `breaker closed at ${s.breakerClosedMs}, first Redis decision at ${s.firstRedisDecisionMs} ` +
            `(${s.firstRedisAfterPromotionMs} after the promotion); longest decision ${s.maxLatencyMs} ` +
            `(${s.maxNetLatencyMs} net of event-loop stalls)`,
        ),
        `  most admitted in one window of one key, both processes: ${maxAdmitted} (bound ${LOCAL_BOUND}); by Redis alone: ${maxRedisAdmitted} (limit ${LIMIT})`,
        ...summaries.map((s) => `  ${JSON.stringify(s)}`),
      ].join('\n'),
    );

    expect(exited).toBe(true);
    // The Sentinels promoted the replica, and all three switched to it.
    expect(d.switches.map((s) => [s.fromPort, s.toPort])).toEqual([0, 1, 2].map(() => [master.port, replica.port]));
    expect(await d.role(1)).toBe('master');

    for (const [i, r] of results.entries()) {
      const s = summaries[i] as (typeof summaries)[number];
      // No exception, no unhandled rejection, and a decision for every call.
      expect({ process: i, failures: r.failures, errors: r.rows.filter((row) => row.error !== undefined).length }).toEqual({
        process: i,
        failures: [],
        errors: 0,
      });
      expect(r.rows.every((row) => row.source !== undefined)).toBe(true);
      // Every decision within the deadline and its slack, once this process's own event-loop stalls
      // during the call are taken out (they delay every answer and every timer alike).
      expect({ process: i, maxNetLatencyMs: s.maxNetLatencyMs, within: s.maxNetLatencyMs <= DEADLINE_MS + SLACK_MS }).toMatchObject({
        within: true,
      });
      // Both processes counted each other, so each one's local share is half the limit.
      expect(r.localLimit).toBe(Math.ceil(LIMIT / 2));
      // Healthy before the kill: Redis decided (or its rejections were repeated by the deny cache);
      // a few calls may be answered locally when Redis was slower than slowCallMs on this machine.
      const before = r.rows.filter((row) => row.at < tKill);
      const inCharge = before.filter((row) => row.source === 'redis' || row.reason === 'deny-cache').length;
      expect(inCharge).toBeGreaterThanOrEqual(0.9 * before.length);
      // Nothing was decided by Redis between the kill and the promotion: there was no master.
      expect(r.rows.some((row) => row.at > tKill && row.at < tPromoted && row.source === 'redis')).toBe(false);
      // The fallback answered meanwhile.
      expect(r.rows.some((row) => row.at > tKill && row.source === 'local')).toBe(true);
      // Redis decided again soon after the promotion, on the new master; the client connected once
      // after the kill (a Sentinel that announced the failover late did not take it off the new master).
      expect(s.readyPort).toBe(replica.port);
      expect(s.readiesAfterKill).toBe(1);
      expect(s.firstRedisAfterPromotionMs).toBeDefined();
      expect(s.firstRedisAfterPromotionMs as number).toBeLessThanOrEqual(BACK_WITHIN_MS);
      // And stays in charge afterwards (from half a second after its first decision: the write-back of the outage's calls).
      const after = r.rows.filter((row) => row.at > (backs[i] as number) + 500);
      expect(after.length).toBeGreaterThan(0);
      expect(after.filter((row) => row.source === 'redis' || row.reason === 'deny-cache').length).toBeGreaterThanOrEqual(
        0.9 * after.length,
      );
    }
    // The bound: across both processes, no window of any key admitted more than 1.1 × the limit, and
    // Redis alone never more than the limit.
    expect(maxAdmitted).toBeLessThanOrEqual(LOCAL_BOUND);
    expect(maxRedisAdmitted).toBeLessThanOrEqual(LIMIT);
  }, 60_000);
});

/** Script calls (`EVALSHA` + `EVAL`) a server has run since it started (`INFO commandstats`). */
async function scriptCalls(server: RedisChild): Promise<number> {
  const stats = await server.info('commandstats');
  const calls = (name: string): number => Number(/calls=(\d+)/.exec(stats[`cmdstat_${name}`] ?? '')?.[1] ?? 0);
  return calls('evalsha') + calls('eval');
}

/** Resolves with the time of the client's first 'ready' on `port` from now on; rejects after `timeoutMs`. */
function readyOn(client: Redis, port: number, timeoutMs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onReady = (): void => {
      if (client.stream.remotePort !== port) return;
      clearTimeout(timer);
      client.off('ready', onReady);
      resolve(performance.now());
    };
    const timer = setTimeout(() => {
      client.off('ready', onReady);
      reject(new Error(`the client was not ready on port ${port} within ${timeoutMs} ms (status ${client.status})`));
    }, timeoutMs);
    client.on('ready', onReady);
  });
}

describe('a Sentinel failover that leaves the old master running (SENTINEL FAILOVER)', () => {
  let d: SentinelDeployment;
  beforeAll(async () => {
    d = await startSentinels();
  });
  afterAll(async () => {
    await d?.close();
  });

  it('moves the client to the new master as soon as a Sentinel announces it, and the old master gets no more calls', async () => {
    const [master, replica] = d.nodes as [RedisChild, RedisChild];
    const redis = createRedisClient({ sentinels: [...d.addresses], name: d.name });
    const limiter = new ResilientLimiter({
      redis,
      prefix: `f:${randomUUID()}:`,
      limit: LIMIT,
      windowMs: WINDOW_MS,
      local: { instances: 1 },
    });
    const decisions: { at: number; decision: LimiterDecision }[] = [];
    let load: NodeJS.Timeout | undefined;
    try {
      await once(redis, 'ready');
      load = setInterval(() => {
        for (const key of KEYS) {
          const at = performance.now();
          void limiter.limit(key).then((decision) => decisions.push({ at, decision }));
        }
      }, TICK_MS);
      await sleep(500); // some load on the old master first
      // 10 s caps the wait: without following the announcement the client moves only then.
      const moved = readyOn(redis, replica.port, 10_000);
      await withProbe({ host: '127.0.0.1', port: (d.sentinels[0] as RedisChild).port }, (c) => c.call('SENTINEL', 'FAILOVER', d.name));
      const tReady = await moved;
      // The client's own subscription heard it first; this process's may be a moment behind (1 s caps the wait).
      const tSwitch = (await eventually(() => d.switches[0], 1000, 'no +switch-master')).at;
      const oldCalls = await scriptCalls(master);
      await sleep(1000); // a second of load after the move: does any call still reach the old master?
      clearInterval(load);
      const oldCallsLater = await scriptCalls(master);
      const firstRedis = decisions.find((x) => x.at > tReady && x.decision.source === 'redis')?.at;
      console.log(
        `SENTINEL FAILOVER: the client was ready on the new master ${Math.round(tReady - tSwitch)} ms after the first +switch-master, ` +
          `Redis decided again ${round(firstRedis === undefined ? undefined : firstRedis - tSwitch)} ms after it; ` +
          `the old master is still a ${await d.role(0)} and ran ${oldCallsLater - oldCalls} script calls after that`,
      );
      expect(d.switches[0]).toMatchObject({ fromPort: master.port, toPort: replica.port });
      // Within FOLLOW_WITHIN_MS of the announcement; without following it, about 10 s (the Sentinels
      // demote the old master and close its clients' connections only once they next look at it).
      expect(tReady - tSwitch).toBeLessThanOrEqual(FOLLOW_WITHIN_MS);
      // The old master, still running (and still a master for seconds), got nothing after that.
      expect(oldCallsLater).toBe(oldCalls);
      expect(firstRedis).toBeDefined();
    } finally {
      clearInterval(load);
      await limiter.close();
      redis.disconnect();
    }
  });
});

describe('a Sentinel that does not answer, first in the list, when the master dies', () => {
  let d: SentinelDeployment;
  beforeAll(async () => {
    // down-after-milliseconds 1.5 s: the promotion then tends to be announced while the client waits
    // on the frozen Sentinel during a reconnect; ioredis's own failoverDetector ended the client for
    // good there (4 runs of 4), and without sentinelCommandTimeout the client waits on it forever.
    d = await startSentinels({ downAfterMs: 1500 });
  });
  afterAll(async () => {
    d?.sentinels[0]?.thaw();
    await d?.close();
  });

  it('still gets the client onto the new master soon after the promotion', async () => {
    const [master, replica] = d.nodes as [RedisChild, RedisChild];
    const redis = createRedisClient({ sentinels: [...d.addresses], name: d.name });
    try {
      await once(redis, 'ready');
      expect(redis.stream.remotePort).toBe(master.port);
      // 15 s caps the wait (the promotion comes about 3 s after the kill here).
      const moved = readyOn(redis, replica.port, 15_000);
      d.sentinels[0]?.freeze();
      await master.kill();
      const tReady = await moved;
      // The client may reach the new master as soon as the failover's leader names it (+promoted-slave),
      // before this process hears of it (1 s caps the wait).
      const tPromoted = await eventually(() => d.promotedAt(replica.port), 1000, 'no promotion');
      console.log(
        `a frozen Sentinel first in the list: the client was ready on the new master ${Math.round(tReady - tPromoted)} ms after the promotion`,
      );
      expect(tReady - tPromoted).toBeLessThanOrEqual(FROZEN_WITHIN_MS);
      expect(redis.status).toBe('ready');
    } finally {
      redis.disconnect();
    }
  });
});
