/**
 * One master of a three-master Redis Cluster (no replicas) is killed (SIGKILL) under a steady load over
 * keys on every master, then restarted on its port with its nodes.conf (same node id, same slots, no
 * data), while three limiters run side by side, each with its own ioredis Cluster client:
 *
 * - `local`: mode 'local', the client as the README configures it (enableOfflineQueue: false,
 *   redisOptions.maxRetriesPerRequest: 0);
 * - `fail-closed`: the same, in mode 'fail-closed';
 * - `local-no-retry`: mode 'local', with ioredis's own Cluster retries turned off as well
 *   (retryDelayOnFailover: 0, retryDelayOnClusterDown: 0): by default ioredis re-sends a command on a
 *   closed connection or a CLUSTERDOWN reply every 100 ms, up to 16 times, so a call of a dead
 *   master's slot fails only after 0.9 to 1.7 s (measured; a missed deadline to the limiter), not at once.
 *
 * Twice: with cluster-require-full-coverage yes (Redis's default: once the survivors mark the dead
 * master failing, they refuse every key with CLUSTERDOWN) and no (they keep serving their slots).
 *
 * The figures are printed (times to open and to close, decisions by source and reason per phase,
 * latencies, excess over the limit); the assertions are the README's promises.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClusterOptions } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ResilientLimiter, type BreakerState, type LimiterDecision } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { useCluster } from '../support/useCluster.js';

/** cluster-node-timeout: Redis's default is 15 s; 1 s keeps the scenario short (failure detection scales with it). */
const NODE_TIMEOUT_MS = 1000;
const DEADLINE_MS = 50; // breaker.timeoutMs, the default
const SLACK_MS = 40; // timer slack on top of the deadline, as in the chaos suite
const RESET_MS = 250; // breaker.resetTimeoutMs and its cap, short so that it closes soon after recovery
const MAX_RESET_MS = 1000;
const LIMIT = 10;
const WINDOW_MS = 500;
const TICK_MS = 20; // one call per key per tick: 50 calls/s per key, 25 per window, 2.5 times the limit
const VICTIM = 2;

const SAFE: ClusterOptions = { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } };
const VARIANTS = [
  { name: 'local', mode: 'local', client: SAFE },
  { name: 'fail-closed', mode: 'fail-closed', client: SAFE },
  { name: 'local-no-retry', mode: 'local', client: { ...SAFE, retryDelayOnFailover: 0, retryDelayOnClusterDown: 0 } },
] as const;

/** Calls Redis decided, or whose rejection by Redis the deny cache repeats: Redis is in charge. */
const REDIS_IN_CHARGE = new Set(['redis/decided', 'local/deny-cache']);

type Row = { at: number; latency: number; key: string; node: number; decision?: LimiterDecision; error?: unknown };
type Run = {
  name: string;
  limiter: ResilientLimiter;
  keys: string[];
  nodeOf: Map<string, number>;
  rows: Row[];
  states: { at: number; state: BreakerState }[];
};
type Times = {
  tKill: number;
  tFail: number | undefined;
  tRestarted: number;
  tOk: number | undefined;
  tRecovered: number | undefined;
  tEnd: number;
};

describe.each([
  { fullCoverage: true, title: 'cluster-require-full-coverage yes (default): the survivors refuse every key once they mark it failing' },
  { fullCoverage: false, title: 'cluster-require-full-coverage no: the survivors keep serving their slots' },
])('a Redis Cluster master killed under load, then restarted; $title', ({ fullCoverage }) => {
  // Closed in afterAll, which checks that every redis-server it started has exited.
  const cluster = useCluster({ nodeTimeoutMs: NODE_TIMEOUT_MS, requireFullCoverage: fullCoverage });

  it('answers every call within the deadline, opens the one breaker, and closes it once the master is back', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    const runs: Run[] = [];
    let t0 = 0;
    const since = (): number => performance.now() - t0;
    try {
      for (const v of VARIANTS) {
        const client = cluster.client(v.client);
        await once(client, 'ready');
        const prefix = `t:${randomUUID()}:`;
        const limiter = new ResilientLimiter({
          redis: client,
          prefix,
          limit: LIMIT,
          windowMs: WINDOW_MS,
          mode: v.mode,
          local: { instances: 1 },
          breaker: { resetTimeoutMs: RESET_MS, maxResetTimeoutMs: MAX_RESET_MS },
        });
        const keys = cluster.keysOnEveryMaster(3, (k) => redisKey(prefix, k));
        // Warm up, on keys the scenario does not use: a connection to every master, the script loaded.
        for (const k of cluster.keysOnEveryMaster(1, (key) => redisKey(prefix, key), { stem: 'warm' })) await limiter.limit(k);
        const run: Run = {
          name: v.name,
          limiter,
          keys,
          nodeOf: new Map(keys.map((k) => [k, cluster.nodeOf(redisKey(prefix, k))])),
          rows: [],
          states: [],
        };
        limiter.on('stateChange', ({ state }) => run.states.push({ at: since(), state }));
        runs.push(run);
      }

      // The cluster as each master sees it, every 50 ms.
      const clusterStates: { at: number; states: string[] }[] = [];
      let polling = true;
      const poller = (async () => {
        while (polling) {
          const at = since();
          clusterStates.push({ at, states: await Promise.all(cluster.nodes.map((_, i) => cluster.state(i))) });
          await sleep(50);
        }
      })();
      // This process's own timer lateness (a stalled event loop delays every answer alike).
      let maxStallMs = 0;
      let lastBeat = performance.now();
      const beat = setInterval(() => {
        const now = performance.now();
        maxStallMs = Math.max(maxStallMs, now - lastBeat - 5);
        lastBeat = now;
      }, 5);

      const pending = new Set<Promise<void>>();
      t0 = performance.now();
      const load = setInterval(() => {
        for (const run of runs) {
          for (const key of run.keys) {
            const at = since();
            const row: Row = { at, latency: 0, key, node: run.nodeOf.get(key) as number };
            run.rows.push(row);
            const p = run.limiter.limit(key).then(
              (decision) => {
                row.latency = since() - at;
                row.decision = decision;
              },
              (error: unknown) => {
                row.latency = since() - at;
                row.error = error;
              },
            );
            pending.add(p);
            void p.finally(() => pending.delete(p));
          }
        }
      }, TICK_MS);

      await sleep(1000);
      const opensBeforeKill = runs.map((r) => r.limiter.stats().opened);
      const victimPid = cluster.nodes[VICTIM]?.pid;
      await cluster.nodes[VICTIM]?.kill(); // resolves once the process has exited
      const tKill = since();
      await sleep(3000);
      const tRestart = since();
      await cluster.restart(VICTIM); // our new process (process_id checked) on the same port, same node id
      const tRestarted = since();
      expect(cluster.nodes[VICTIM]?.pid).not.toBe(victimPid);

      // Recovered: every master says ok, and every limiter is closed and has had Redis decide calls
      // made since then on keys of every master.
      let tOk: number | undefined;
      let tRecovered: number | undefined;
      const recoveryDeadline = since() + 10_000;
      while (tRecovered === undefined && since() < recoveryDeadline) {
        const last = clusterStates.at(-1);
        if (tOk === undefined && last !== undefined && last.at > tRestarted && last.states.every((s) => s === 'ok')) tOk = last.at;
        const ok = tOk;
        if (
          ok !== undefined &&
          runs.every(
            (r) =>
              r.limiter.state === 'closed' &&
              cluster.nodes.every((_, n) => r.rows.some((row) => row.at > ok && row.node === n && row.decision?.reason === 'decided')),
          )
        ) {
          tRecovered = since();
        }
        await sleep(20);
      }
      await sleep(1000);
      clearInterval(load);
      clearInterval(beat);
      const tEnd = since();
      await Promise.all(pending);
      polling = false;
      await poller;

      const tFail = clusterStates.find((s) => s.at > tKill && s.states.some((x, i) => i !== VICTIM && x === 'fail'))?.at;
      const times: Times = { tKill, tFail, tRestarted, tOk, tRecovered, tEnd };
      const report = runs.map((r) => summarize(r, times));
      console.log(
        [
          `full coverage ${fullCoverage ? 'yes' : 'no'}: kill at ${ms(tKill)} ms, survivors say fail at ${ms(tFail)}, ` +
            `restart took ${ms(tRestarted - tRestart)} ms, restarted at ${ms(tRestarted)}, all ok at ${ms(tOk)}, ` +
            `recovered at ${ms(tRecovered)}, end at ${ms(tEnd)}; max event-loop stall ${ms(maxStallMs)} ms`,
          ...report.map((s) => JSON.stringify(s)),
        ].join('\n'),
      );

      // The cluster did what Redis documents: with full coverage required, the survivors say
      // cluster_state:fail once they mark the dead master failing; without, they stay ok. All ok again
      // after the restart.
      if (fullCoverage) expect(tFail).toBeDefined();
      else expect(tFail).toBeUndefined();
      expect(tOk).toBeDefined();
      expect(tRecovered).toBeDefined();

      for (const [i, r] of runs.entries()) {
        const s = report[i] as Summary;
        const rows = r.rows;
        // Every call got a decision, without an exception, within the deadline and its slack plus the
        // longest stall of this process's event loop (a stall delays every answer alike, and a missed
        // deadline's verdict waits for the poll after it: seen, a call of 162 ms with a 108 ms stall).
        expect({ run: r.name, errors: rows.filter((row) => row.error !== undefined).length }).toEqual({ run: r.name, errors: 0 });
        expect(rows.every((row) => row.decision !== undefined)).toBe(true);
        expect({ run: r.name, latencyOk: s.maxLatencyMs <= DEADLINE_MS + SLACK_MS + maxStallMs }).toEqual({ run: r.name, latencyOk: true });
        // Healthy before the kill: Redis in charge, the breaker never opened.
        expect(opensBeforeKill[i]).toBe(0);
        expect({ run: r.name, healthy: inCharge(s.phases.healthy) }).toEqual({ run: r.name, healthy: true });
        // One breaker for the whole cluster: it opened soon after the kill, and while the survivors
        // still served their slots (before they said fail, or all along), their keys were answered by
        // the fallback too.
        if (r.name !== 'local-no-retry') {
          // (Without retries calls fail at once: once a key's call was answered locally, the key
          // stays local until that call is written back — a dead master's keys, for the whole
          // outage — so the breaker opens only on failing write-backs, late or not at all, and the
          // survivors' keys may be served by Redis all along.)
          expect(s.timeToOpenMs).toBeDefined();
          expect(s.timeToOpenMs as number).toBeLessThan(1000);
          expect(s.survivorFallbacksWhileTheyServed).toBeGreaterThan(0);
        }
        // Nothing of the dead master's keys was decided by Redis while it was down.
        expect(rows.some((row) => row.node === VICTIM && row.at > tKill && row.at < tRestarted && row.decision?.source === 'redis')).toBe(
          false,
        );
        // Back: the breaker is closed (it may have closed before the restart, the dead master's keys
        // being answered locally meanwhile) and Redis decides again, on every master.
        expect(r.limiter.state).toBe('closed');
        expect({ run: r.name, after: inCharge(s.phases.after) }).toEqual({ run: r.name, after: true });
        if (r.name === 'fail-closed') {
          // Every call Redis did not decide was denied, with retryAfterMs the breaker's open period.
          const fallbacks = rows.filter((row) => row.decision?.source === 'fail-closed');
          expect(fallbacks.length).toBeGreaterThan(0);
          expect(
            rows.every(
              (row) => row.decision?.source === 'redis' || row.decision?.source === 'fail-closed' || row.decision?.reason === 'deny-cache',
            ),
          ).toBe(true);
          for (const row of fallbacks) {
            expect(row.decision?.allowed).toBe(false);
            expect(row.decision?.retryAfterMs).toBeGreaterThanOrEqual(RESET_MS);
            expect(row.decision?.retryAfterMs).toBeLessThanOrEqual(MAX_RESET_MS);
          }
          // Only Redis admitted: never over the limit.
          expect({ run: r.name, maxExcess: s.maxExcess }).toEqual({ run: r.name, maxExcess: 0 });
        } else {
          expect(rows.every((row) => row.decision?.source === 'redis' || row.decision?.source === 'local')).toBe(true);
          // The local window answered during the outage (breaker open, or keys held until written back).
          expect((s.phases.outage['local/breaker-open'] ?? 0) + (s.phases.outage['local/reconciling'] ?? 0)).toBeGreaterThan(0);
          // One instance: its share is the whole limit, and the README promises no window over it.
          // (Before keys with journalled calls were held back from Redis, 0 or 1 over was measured
          // here when the catch-up ended with calls still in the journal.)
          expect({ run: r.name, maxExcess: s.maxExcess }).toEqual({ run: r.name, maxExcess: 0 });
        }
      }
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await Promise.all(runs.map((r) => r.limiter.close()));
    }
  });
});

/**
 * Redis is in charge in a phase: it decided, or the deny cache repeated its rejections, for 90 % of
 * the calls at least; the others were answered locally because Redis was momentarily late: slower
 * than `slowCallMs`, past the deadline, or run after it (a stale reply, `redis-error`). This machine
 * runs three redis-server processes and the test on two cores, and a silence counts only once this
 * process can vouch for it (PollWatch): a late Redis shows as a few timeouts more than as `slow`.
 * Nothing else is allowed: not the breaker open, not a key held for its journal.
 */
const LATE = ['/slow', '/timeout', '/redis-error'];
function inCharge(counts: Record<string, number>): boolean {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const charged = Object.entries(counts)
    .filter(([k]) => REDIS_IN_CHARGE.has(k))
    .reduce((a, [, n]) => a + n, 0);
  const others = Object.keys(counts).filter((k) => !REDIS_IN_CHARGE.has(k));
  return total > 0 && charged >= 0.9 * total && others.every((k) => LATE.some((late) => k.endsWith(late)));
}

function ms(value: number | undefined): number | undefined {
  return value === undefined ? undefined : Math.round(value);
}

type Summary = ReturnType<typeof summarize>;

/** The figures of one limiter's run: times to open and close, decisions by phase, latency, excess. */
function summarize(r: Run, t: Times) {
  const phase = (from: number, to: number, which?: 'victim' | 'survivors') => {
    const counts: Record<string, number> = {};
    for (const row of r.rows) {
      if (row.at < from || row.at >= to || row.decision === undefined) continue;
      if (which === 'victim' && row.node !== VICTIM) continue;
      if (which === 'survivors' && row.node === VICTIM) continue;
      const name = `${row.decision.source}/${row.decision.reason}`;
      counts[name] = (counts[name] ?? 0) + 1;
    }
    return counts;
  };
  const firstOpen = r.states.find((s) => s.at > t.tKill && s.state === 'open')?.at;
  const lastClose = r.states.findLast((s) => s.state === 'closed')?.at;
  const servedUntil = t.tFail ?? t.tRestarted;
  const latencies = r.rows.map((row) => row.latency).sort((a, b) => a - b);
  const closedAfterRestart = lastClose !== undefined && lastClose > t.tRestarted ? lastClose : undefined;
  return {
    run: r.name,
    timeToOpenMs: firstOpen === undefined ? undefined : ms(firstOpen - t.tKill),
    opened: r.limiter.stats().opened,
    closedAfterRestartMs: closedAfterRestart === undefined ? undefined : ms(closedAfterRestart - t.tRestarted),
    closedAfterAllOkMs: closedAfterRestart === undefined || t.tOk === undefined ? undefined : ms(closedAfterRestart - t.tOk),
    survivorFallbacksWhileTheyServed: r.rows.filter(
      (row) =>
        row.node !== VICTIM &&
        row.at > (firstOpen ?? Infinity) &&
        row.at < servedUntil &&
        row.decision?.source !== 'redis' &&
        row.decision?.reason !== 'deny-cache',
    ).length,
    phases: {
      healthy: phase(0, t.tKill),
      beforeSurvivorsFail: { victim: phase(t.tKill, servedUntil, 'victim'), survivors: phase(t.tKill, servedUntil, 'survivors') },
      outage: phase(t.tKill, t.tRestarted),
      restartToRecovered: phase(t.tRestarted, t.tRecovered ?? t.tEnd),
      after: phase((t.tRecovered ?? t.tEnd) + DEADLINE_MS, t.tEnd),
    },
    decisions: r.rows.length,
    allowed: r.rows.filter((row) => row.decision?.allowed === true).length,
    p50LatencyMs: Number((latencies[Math.floor(latencies.length * 0.5)] ?? 0).toFixed(3)),
    p99LatencyMs: Number((latencies[Math.floor(latencies.length * 0.99)] ?? 0).toFixed(3)),
    maxLatencyMs: Number((latencies.at(-1) ?? 0).toFixed(3)),
    maxExcess: maxExcess(r),
  };
}

/**
 * The most permits admitted over the limit in any window (t - windowMs, t] of any key, from each
 * admitted call's time on the tier that admitted it (resetAtMs - windowMs: an admitted call is the
 * newest of its window, on Redis's clock or the local one; both are this host's clock here).
 */
function maxExcess(r: Run): number {
  let worst = 0;
  for (const key of r.keys) {
    const times = r.rows
      .filter(
        (row) => row.key === key && row.decision?.allowed === true && (row.decision.source === 'redis' || row.decision.source === 'local'),
      )
      .map((row) => (row.decision as LimiterDecision).resetAtMs - WINDOW_MS)
      .sort((a, b) => a - b);
    let start = 0;
    for (let end = 0; end < times.length; end++) {
      while ((times[start] as number) <= (times[end] as number) - WINDOW_MS) start++;
      worst = Math.max(worst, end - start + 1 - LIMIT);
    }
  }
  return worst;
}
