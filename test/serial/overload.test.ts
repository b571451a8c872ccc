/**
 * The application's own overload is not a Redis outage. A forked worker (`test/support/
 * overloadWorker.ts`) runs a limiter in mode `'fail-open'` against a healthy redis-server child
 * while its request handlers burn more CPU than one core has (500 requests/s × 2.2 ms each): its
 * event loop never idles, and a turn often lasts longer than the breaker's 50 ms deadline, so Redis's
 * replies lie unread in the socket meanwhile. Redis must still make the decisions, and a frozen Redis
 * must still be found. A process of its own: the load must not share the test runner's event loop.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisChild } from '../support/redis.js';
import type { CallRecord, WorkerConfig, WorkerReport } from '../support/overloadWorker.js';

/** The worker's limiter keeps the default deadline. */
const TIMEOUT_MS = 50;

let server: RedisChild;
const workers = new Set<ChildProcess>();

beforeAll(async () => {
  server = await startRedisServer();
});
afterAll(async () => {
  for (const worker of workers) worker.kill('SIGKILL'); // one that never reported (the test timed out)
  await server?.close();
});

function runWorker(options: Partial<WorkerConfig> = {}): Promise<WorkerReport> {
  const config: WorkerConfig = {
    port: server.port,
    redisPid: server.pid,
    rate: 500,
    burnMs: 2.2,
    durationMs: 5_000,
    // A backlog of at most 200 ms of requests (100): turns of a few hundred ms, several deadlines.
    shedAfterMs: 200,
    // 25 requests/s per key against 10 per second: Redis both admits and refuses, also on a loaded
    // machine where more than half the requests are shed (13 decisions/s per key were seen).
    keys: 20,
    limit: 10,
    windowMs: 1_000,
    ...options,
  };
  const child = fork(new URL('../support/overloadWorker.ts', import.meta.url), [JSON.stringify(config)], {
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  workers.add(child);
  child.once('exit', () => workers.delete(child));
  return new Promise((resolve, reject) => {
    child.once('message', (report) => resolve(report as WorkerReport));
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`the worker exited with ${code} before it reported`)));
  });
}

/** Redis made the decision: it answered, or the deny cache repeats a refusal of its own. */
const byRedis = (c: CallRecord): boolean => c.reason === 'decided' || c.reason === 'deny-cache';

/** The longest of the worker's event-loop turns (its 1 ms interval's gaps) that overlap [fromMs, toMs]. */
function longestTurn(stalls: WorkerReport['stalls'], fromMs: number, toMs: number): number {
  let longest = 0;
  for (const s of stalls) if (s.atMs < toMs && s.atMs + s.gapMs > fromMs) longest = Math.max(longest, s.gapMs);
  return longest;
}

/**
 * How late a missed deadline may be found: its timer fires at the end of the turn running when it
 * comes due, and the verdict waits for the next poll, in the turn after (see
 * `Deadlines.ts`); so by two of the worker's own turns, plus 40 ms of timer slack as the chaos suite allows.
 */
const foundBy = (turnMs: number): number => TIMEOUT_MS + 2 * turnMs + 40;

function counts(calls: readonly CallRecord[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const c of calls) out[`${c.source}/${c.reason}`] = (out[`${c.source}/${c.reason}`] ?? 0) + 1;
  return out;
}

describe("the application's own overload, in a forked process", () => {
  it('leaves the decisions to a healthy Redis, and the breaker closed, while the handlers saturate the event loop', async () => {
    const report = await runWorker();
    const { calls } = report;
    const redisShare = calls.filter(byRedis).length / calls.length;
    const opens = report.states.filter((s) => s.state === 'open').length;
    const longest = Math.max(...report.stalls.map((s) => s.gapMs));
    console.log(
      `overload, Redis healthy: ${calls.length} decisions, ${(100 * redisShare).toFixed(2)} % by Redis, ` +
        `${calls.filter((c) => c.source === 'fail-open').length} fail-open, breaker opened ${opens} times; ` +
        `event loop busy ${(100 * report.utilization).toFixed(1)} %, longest turn ${longest.toFixed(0)} ms, ` +
        `${report.shed} of ${report.offered} requests shed; ${JSON.stringify(counts(calls))}`,
    );
    // The test overloads: the offered work is 1.1 s of CPU per second, so the loop is busy all the
    // time, and turns longer than the deadline happen (the case that opened the breaker).
    expect(report.utilization).toBeGreaterThan(0.9);
    expect(longest).toBeGreaterThan(TIMEOUT_MS);
    // Of the 2,500 offered, the rest shed (1,401 on a machine loaded by two busy processes besides): enough
    // for 1 % to be several decisions.
    expect(calls.length).toBeGreaterThan(300);
    expect(redisShare).toBeGreaterThanOrEqual(0.99);
    expect(report.states).toEqual([]);
    // Redis both admitted and refused: the limit was in play.
    expect(calls.some((c) => c.allowed)).toBe(true);
    expect(calls.some((c) => !c.allowed)).toBe(true);
  }, 60_000);

  it('still finds a frozen Redis while the handlers saturate the event loop', async () => {
    let report: WorkerReport;
    try {
      report = await runWorker({ durationMs: 4_000, freezeAtMs: 2_000 });
    } finally {
      server.thaw(); // the worker froze it (and thaws it before it closes, if it gets there)
    }
    const frozeAt = report.frozeAtMs as number;
    const after = report.calls.filter((c) => c.issuedMs >= frozeAt);
    const fallback = after.filter((c) => !byRedis(c));
    const firstFallbackAt = Math.min(...fallback.map((c) => c.settledMs));
    const opened = report.states.find((s) => s.state === 'open' && s.atMs >= frozeAt);
    const turnUntilFound = longestTurn(report.stalls, frozeAt, firstFallbackAt);
    // Each call against the bound of the turns that overlap it.
    const over = after.filter((c) => c.settledMs - c.issuedMs > foundBy(longestTurn(report.stalls, c.issuedMs, c.settledMs)));
    const slowest = Math.max(...after.map((c) => c.settledMs - c.issuedMs));
    console.log(
      `overload, Redis frozen at ${frozeAt.toFixed(0)} ms: first fallback decision ${(firstFallbackAt - frozeAt).toFixed(1)} ms ` +
        `after the freeze (the longest turn meanwhile ${turnUntilFound.toFixed(0)} ms), breaker open ` +
        `${opened === undefined ? 'never' : `${(opened.atMs - frozeAt).toFixed(1)} ms after it`}; ${fallback.length} of ` +
        `${after.length} decisions after the freeze by the fallback, the slowest ${slowest.toFixed(1)} ms, ` +
        `${over.length} past the deadline + 2 of its turns + 40 ms; before the freeze ` +
        JSON.stringify(counts(report.calls.filter((c) => c.issuedMs < frozeAt))),
    );
    // Of the 1,000 offered meanwhile, the rest shed (300 on a machine loaded by two busy processes besides).
    expect(after.length).toBeGreaterThan(50);
    // Every decision after the freeze is the fallback's, but for the deny cache's repeats of refusals
    // Redis made before it (their share follows the limit and the load: 17 % seen on a loaded machine):
    // none was Redis's.
    expect(after.filter((c) => c.reason === 'decided')).toEqual([]);
    expect(opened).toBeDefined();
    expect(firstFallbackAt - frozeAt).toBeLessThanOrEqual(foundBy(turnUntilFound));
    expect(over).toEqual([]);
  }, 60_000);
});
