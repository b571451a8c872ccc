/**
 * A fleet of service instances for the tests the public harness cannot run yet (`chaos/fleetChange.test.ts`:
 * instances that join mid-run; `chaos/clusterApart.test.ts`: a Cluster):
 * one process per instance (`./worker.ts`, the built package), each with its own Redis address (a
 * proxy of its own when the test cuts instances apart), and what they decided gathered afterwards.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { netOfStallsMax, overLimit, type Call } from '../metrics.ts';
import type { CallRecord, FromWorker, Setup, ToWorker } from './worker.ts';

const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

/** Every call a fleet made, with each process's event-loop stalls and errors. */
export type FleetRun = { calls: Call[]; stalls: { atMs: number; gapMs: number }[][]; errors: string[]; t0: number };

/** A started fleet: every instance counted the others; `go()` starts the load, `stop()` gathers the calls. */
export type Fleet = {
  /** Starts the load on every instance; resolves with `at(ms)`, which sleeps until `ms` after the start. */
  go(): (ms: number) => Promise<void>;
  stop(): Promise<FleetRun>;
  /** Kills every process still running (idempotent; for `finally`). */
  kill(): void;
};

/**
 * Forks one worker per setup and waits until each counted `setup.instances` instances.
 * @param countedWithinMs how long counting may take (reason: a few beats, on a loaded machine).
 * @throws Error when a worker exits early or the count is not reached in time (every worker is killed).
 */
export async function startFleet(setups: readonly Setup[], countedWithinMs = 10_000): Promise<Fleet> {
  const workers: ChildProcess[] = [];
  const done: Promise<Extract<FromWorker, { kind: 'done' }>>[] = [];
  const counted: Promise<void>[] = [];
  const kill = (): void => {
    for (const w of workers) if (w.exitCode === null) w.kill('SIGKILL');
  };
  try {
    setups.forEach((setup, i) => {
      const worker = fork(WORKER, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      workers.push(worker);
      const message = (kind: FromWorker['kind']) =>
        new Promise<FromWorker>((resolve, reject) => {
          const onMessage = (m: FromWorker) => {
            if (m.kind !== kind) return;
            worker.off('message', onMessage);
            resolve(m);
          };
          worker.on('message', onMessage);
          worker.once('exit', (code) => reject(new Error(`worker ${i} exited (${code}) before '${kind}'`)));
        });
      counted.push(message('counted').then(() => undefined));
      const finished = message('done') as Promise<Extract<FromWorker, { kind: 'done' }>>;
      finished.catch(() => undefined); // awaited in stop(); a worker killed early must not be unhandled
      done.push(finished);
      worker.send({ kind: 'setup', setup } satisfies ToWorker);
    });
    await Promise.race([
      Promise.all(counted),
      sleep(countedWithinMs).then(() => Promise.reject(new Error(`the workers did not count each other in ${countedWithinMs} ms`))),
    ]);
  } catch (error) {
    kill();
    throw error;
  }
  let t0 = 0;
  let epoch0 = 0;
  return {
    go() {
      for (const w of workers) w.send({ kind: 'go' } satisfies ToWorker);
      t0 = performance.now();
      epoch0 = Date.now();
      return (ms) => sleep(Math.max(0, ms - (performance.now() - t0)));
    },
    async stop() {
      for (const w of workers) w.send({ kind: 'stop' } satisfies ToWorker);
      const results = await Promise.all(done);
      return {
        calls: results.flatMap((r, instance) => r.calls.map((c) => toCall(c, instance))),
        stalls: results.map((r) => r.stalls.map(([atMs, gapMs]) => ({ atMs, gapMs }))),
        errors: results.flatMap((r) => r.errors),
        t0: epoch0,
      };
    },
    kill,
  };
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

/**
 * The most admitted in any window (all, and decided by Redis alone), the slowest decision net of each
 * process's stalls; printed with the calls by source, and the last calls of the first window over.
 */
export function summary(
  name: string,
  r: FleetRun,
  windowMs: number,
  limit: number,
): { all: ReturnType<typeof overLimit>; redis: ReturnType<typeof overLimit>; latencyNet: number } {
  const all = overLimit(r.calls, windowMs, limit);
  const redis = overLimit(
    r.calls.filter((c) => c.source === 'redis'),
    windowMs,
    limit,
  );
  const latencyNet = Math.max(
    ...r.stalls.map((stalls, i) =>
      netOfStallsMax(
        r.calls.filter((c) => c.instance === i),
        stalls,
      ),
    ),
  );
  const bySource: Record<string, number> = {};
  for (const c of r.calls) {
    const name = `${c.instance}:${c.source ?? 'none'}/${c.allowed ? 'admitted' : 'refused'}`;
    bySource[name] = (bySource[name] ?? 0) + 1;
  }
  console.log(
    `${name}: ${r.calls.length} calls ${JSON.stringify(bySource)}; most admitted in a ${windowMs} ms window: ${limit + all.maxExcess} ` +
      `(limit ${limit}), Redis alone ${limit + redis.maxExcess}; slowest decision net of stalls ${latencyNet.toFixed(1)} ms` +
      (all.firstOver === undefined
        ? ''
        : `; first window over, its last calls (ms from the start): ${all.firstOver.calls
            .slice(-12)
            .map((c) => `${Math.round(c.atMs - r.t0)} #${c.instance} ${c.source}/${c.reason}`)
            .join(', ')}`),
  );
  return { all, redis, latencyNet };
}
