/**
 * A concurrency limit end to end (`ConcurrencyLimiter`, the built package): 4 processes × 200 tasks
 * on a max of 10 slots, each task holding a slot 100–150 ms, through Redis frozen (SIGSTOP) 2 s,
 * Redis killed and restarted empty, and one process killed with SIGKILL while it holds slots.
 * Measured from each holder's start and end (printed by the workers as they go):
 * - while Redis is healthy, at most 10 held at any moment;
 * - during a fault, instance i holds at most max(h_i, s_i): h_i what it held when the fault began,
 *   s_i its share (floor(10 × 1/4) = 2); as Redis answers again, it grants at most max: so the fleet
 *   holds at most max(10, Σ max(h_i, s_i));
 * - the killed process's slots leave Redis within their lease (ttlMs);
 * - no unhandled error, no slot reported lost (no process was frozen).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisChild } from '../test/support/redis.ts';
import type { FromWorker, Setup, ToWorker } from './slots/worker.ts';

const WORKER = fileURLToPath(new URL('./slots/worker.ts', import.meta.url));
const MAX = 10;
const INSTANCES = 4;
const SHARE = Math.floor(MAX / INSTANCES);
const TTL_MS = 3_000;

let server: RedisChild;

beforeAll(async () => {
  server = await startRedisServer();
}, 30_000);

afterAll(async () => {
  server?.thaw();
  await server?.stop();
});

/** A slot held by a worker, from its stdout: start, end (the kill, for one the process died holding). */
type Interval = { worker: number; id: string; start: number; end: number; source: string };

type Worker = { child: ChildProcess; open: Map<string, { start: number; source: string }>; intervals: Interval[] };

function spawn(
  index: number,
  setup: Setup,
): { worker: Worker; counted: Promise<void>; done: Promise<Extract<FromWorker, { kind: 'done' }>> } {
  const child = fork(WORKER, [], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  const worker: Worker = { child, open: new Map(), intervals: [] };
  let buffer = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    const lines = buffer.split('\n');
    buffer = lines.pop() ?? '';
    for (const line of lines) {
      const [kind, id = '', at = '0', source = ''] = line.split(' ');
      if (kind === 'HOLD') worker.open.set(id, { start: Number(at), source });
      if (kind === 'FREE') {
        const open = worker.open.get(id);
        worker.open.delete(id);
        if (open !== undefined) worker.intervals.push({ worker: index, id, start: open.start, end: Number(at), source: open.source });
      }
    }
  });
  const message = <K extends FromWorker['kind']>(kind: K) =>
    new Promise<Extract<FromWorker, { kind: K }>>((resolve, reject) => {
      child.on('message', (m: FromWorker) => {
        if (m.kind === kind) resolve(m as Extract<FromWorker, { kind: K }>);
      });
      child.once('exit', (code, signal) => reject(new Error(`worker ${index} exited (${code ?? signal}) before '${kind}'`)));
    });
  const counted = message('counted').then(() => undefined);
  const done = message('done');
  done.catch(() => undefined); // the killed worker never sends it
  child.send({ kind: 'setup', setup } satisfies ToWorker);
  return { worker, counted, done };
}

/** The most slots held at once by `intervals` within [from, to), and when. */
function mostHeld(intervals: readonly Interval[], from: number, to: number): { count: number; at: number } {
  const events: [number, number][] = [];
  for (const i of intervals) {
    const start = Math.max(i.start, from);
    const end = Math.min(i.end, to);
    if (start < end) events.push([start, 1], [end, -1]);
  }
  // Ends before starts at one instant: a slot given back and taken in the same ms is not two.
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let count = 0;
  let most = { count: 0, at: from };
  for (const [at, delta] of events) {
    count += delta;
    if (count > most.count) most = { count, at };
  }
  return most;
}

/** The bound of a fault beginning at `at`: max(MAX, Σ max(h_i, share)), h_i what worker i held then. */
function faultBound(intervals: readonly Interval[], at: number): number {
  let bound = 0;
  for (let w = 0; w < INSTANCES; w++) {
    const held = intervals.filter((i) => i.worker === w && i.start <= at && i.end > at).length;
    bound += Math.max(held, SHARE);
  }
  return Math.max(MAX, bound);
}

describe('ConcurrencyLimiter: 4 processes through a freeze, a restart empty and a SIGKILL', () => {
  it('holds at most max while Redis is healthy, the stated bound during faults, and frees a dead holder within its lease', async () => {
    const prefix = `slots:${randomUUID()}:`;
    const setup: Setup = {
      port: server.port,
      prefix,
      max: MAX,
      ttlMs: TTL_MS,
      mode: 'local',
      instances: INSTANCES,
      heartbeatMs: 200,
      tasks: 200,
      parallel: 5,
      holdMs: [100, 150],
      maxWaitMs: 1_000,
    };
    const spawned = Array.from({ length: INSTANCES }, (_, i) => spawn(i, setup));
    const workers = spawned.map((s) => s.worker);
    const probe = new Redis({
      host: '127.0.0.1',
      port: server.port,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
    });
    probe.on('error', () => undefined);
    try {
      // Reason: a few heartbeats of 200 ms, on a loaded machine.
      await Promise.race([
        Promise.all(spawned.map((s) => s.counted)),
        sleep(20_000).then(() => Promise.reject(new Error('not counted within 20 s'))),
      ]);
      for (const w of workers) w.child.send({ kind: 'go' } satisfies ToWorker);
      const t0 = Date.now();
      const at = async (ms: number): Promise<number> => {
        await sleep(Math.max(0, t0 + ms - Date.now()));
        return Date.now();
      };
      const freezeAt = await at(1_500);
      server.freeze();
      const thawAt = await at(3_500);
      server.thaw();
      const killAt = await at(5_000);
      await server.kill();
      await sleep(500);
      await server.restart();
      const restartAt = Date.now();
      // One process dies holding slots: those it printed as held and not freed.
      const victim = workers[3] as Worker;
      await at(7_000);
      const deadline = Date.now() + 2_000; // reason: it holds slots most of the time; wait for one
      while (victim.open.size === 0 && Date.now() < deadline) await sleep(5);
      const orphans = [...victim.open.keys()];
      victim.child.kill('SIGKILL');
      const deadAt = Date.now();
      for (const [id, { start, source }] of victim.open) victim.intervals.push({ worker: 3, id, start, end: deadAt, source });
      victim.open.clear();
      await probe.connect();
      const slotsKey = `${prefix}{jobs}:c`;
      let freedAt: number | undefined;
      while (freedAt === undefined && Date.now() < deadAt + TTL_MS + 5_000) {
        const members = await probe.zrange(slotsKey, '0', '-1');
        if (!orphans.some((id) => members.includes(id))) freedAt = Date.now();
        else await sleep(20);
      }
      await at(11_000);
      const done = spawned.slice(0, 3).map((s) => s.done);
      for (const w of workers.slice(0, 3)) w.child.send({ kind: 'stop' } satisfies ToWorker);
      const results = await Promise.all(done);
      const end = Date.now();
      const intervals = workers.flatMap((w) => w.intervals);

      // Reason for the settling time after each fault: the write-back and the heartbeats that tell
      // the instances back (a few beats of 200 ms) on a loaded machine.
      const settleMs = 1_000;
      const phases = {
        healthy: mostHeld(intervals, t0, freezeAt),
        frozen: mostHeld(intervals, freezeAt, thawAt + settleMs),
        afterFreeze: mostHeld(intervals, thawAt + settleMs, killAt),
        restart: mostHeld(intervals, killAt, restartAt + settleMs),
        afterRestart: mostHeld(intervals, restartAt + settleMs, deadAt),
        afterKill: mostHeld(intervals, deadAt, end),
      };
      const bounds = { frozen: faultBound(intervals, freezeAt), restart: faultBound(intervals, killAt) };
      const tasks = results.reduce((n, r) => n + r.done, 0);
      const bySource = Object.groupBy(intervals, (i) => i.source);
      console.log(
        `most held at once (max ${MAX}): ${JSON.stringify(Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, v.count])))}; ` +
          `fault bounds max(${MAX}, Σ max(h_i, ${SHARE})): ${JSON.stringify(bounds)}; killed process's ${orphans.length} slots freed ` +
          `${freedAt === undefined ? 'never' : `${freedAt - deadAt} ms`} after its death (lease ${TTL_MS} ms); ` +
          `tasks run ${tasks} by the 3 survivors; slots by source ${JSON.stringify(Object.fromEntries(Object.entries(bySource).map(([k, v]) => [k, v?.length])))}; ` +
          `refused ${results.reduce((n, r) => n + r.refused, 0)}`,
      );
      if (process.env['SLOTS_DEBUG']) {
        for (const [name, p] of Object.entries(phases)) {
          const at = p.at;
          const live = intervals.filter((i) => i.start <= at && i.end > at);
          console.log(name, at - t0, JSON.stringify(live.map((i) => [i.worker, i.source, i.start - t0, i.end - t0])));
        }
        console.log('times', {
          freezeAt: freezeAt - t0,
          thawAt: thawAt - t0,
          killAt: killAt - t0,
          restartAt: restartAt - t0,
          deadAt: deadAt - t0,
        });
      }
      expect(results.flatMap((r) => r.errors)).toEqual([]);
      expect(results.map((r) => r.lost)).toEqual([0, 0, 0]);
      expect(phases.healthy.count).toBe(MAX); // the load reached the limit
      for (const phase of ['healthy', 'afterFreeze', 'afterRestart', 'afterKill'] as const)
        expect(phases[phase].count, phase).toBeLessThanOrEqual(MAX);
      expect(phases.frozen.count).toBeLessThanOrEqual(bounds.frozen);
      expect(phases.restart.count).toBeLessThanOrEqual(bounds.restart);
      expect(bySource.local?.length ?? 0).toBeGreaterThan(0); // the faults were felt: shares answered
      expect(orphans.length).toBeGreaterThan(0);
      // Reason for the second: the lease ends TTL_MS after the last renewal at most, and Redis drops
      // it at the next op on the key (the survivors' acquires and renewals: many a second).
      expect(freedAt).toBeDefined();
      expect((freedAt as number) - deadAt).toBeLessThanOrEqual(TTL_MS + 1_000);
    } finally {
      server.thaw();
      probe.disconnect();
      for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    }
  }, 90_000);
});
