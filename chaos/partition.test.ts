/**
 * The bound when instances fail apart, on the public harness (`resilimit/chaos`, the built package):
 * each instance is a process of its own reaching Redis through a proxy of its own, so that one
 * instance can lose Redis while the others keep it, and instances can come back in any order. The
 * cuts and heals are scenarios of our own on `proxies[i]`. In every window: admitted ≤ 1.1 × limit in
 * mode `local` (≤ limit in `fail-closed`), and Redis-decided alone ≤ limit (the harness's verdicts
 * `bound` and `redis-bound`, with `deadline` and `lost`).
 *
 * The set-up is the one the issue measured: limit 20 per 2 s, heartbeats every 300 ms, each instance
 * offering 100 calls a second on one key (10 × the limit between two instances), the library's
 * default breaker. Before leases, an instance cut off stopped beating, the others counted one
 * instance fewer and Redis gave them the whole limit while it went on admitting its share locally:
 * 30 admitted in a window of 20.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type * as Chaos from '../src/chaos.ts';
import type { ChaosReport, ChaosScenario, FaultContext, ScenarioOutcome } from '../src/chaos.ts';
import type { Mode } from '../src/index.ts';

const { runChaos } = (await import(new URL('../dist/chaos.js', import.meta.url).href)) as typeof Chaos;
const CONFIG = fileURLToPath(new URL('./configs/repo.mjs', import.meta.url));
const LIMIT = 20;
const WINDOW_MS = 2000;
const HEARTBEAT_MS = 300;
const PER_SECOND = 100;
/** The library's defaults, over the repository config's shorter ones: the limiter as the issue ran it. */
const BREAKER = { timeoutMs: 50, resetTimeoutMs: 1000, maxResetTimeoutMs: 30_000, volumeThreshold: 10 };

/** How an instance loses Redis: its proxy refuses (connections closed, ECONNREFUSED) or swallows everything (a black hole). */
type Cut = 'refuse' | 'blackhole';

async function cut(c: FaultContext, instance: number, how: Cut): Promise<void> {
  const proxy = c.proxies[instance] as string;
  if (how === 'refuse') await c.api.setEnabled(proxy, false);
  else await c.api.addToxic(proxy, { name: 'blackhole', type: 'timeout', stream: 'downstream', toxicity: 1, attributes: { timeout: 0 } });
}

async function heal(c: FaultContext, instance: number, how: Cut): Promise<void> {
  const proxy = c.proxies[instance] as string;
  if (how === 'refuse') await c.api.setEnabled(proxy, true);
  else await c.api.removeToxic(proxy, 'blackhole');
}

/**
 * Runs `scenarios` on `instances` processes, each offering 100 calls/s on one key; `options` are more
 * limiter options (over limit 20 per 2 s, heartbeats every 300 ms, `mode`, the default breaker).
 */
async function run(
  instances: number,
  mode: Mode,
  scenarios: readonly ChaosScenario[],
  options: Record<string, unknown> = {},
): Promise<ChaosReport> {
  const env = {
    CHAOS_OPTIONS: JSON.stringify({ limit: LIMIT, windowMs: WINDOW_MS, heartbeatMs: HEARTBEAT_MS, mode, breaker: BREAKER, ...options }),
    CHAOS_KEYS: '1',
    CHAOS_RATE: String(PER_SECOND * instances),
  };
  const saved = { ...process.env };
  Object.assign(process.env, env);
  try {
    return await runChaos({ config: CONFIG, instances, scenarios, seed: 1 });
  } finally {
    for (const key of Object.keys(env)) {
      if (saved[key] === undefined) delete process.env[key];
      else process.env[key] = saved[key];
    }
  }
}

/** The outcome of `name`: bound, Redis's bound, the deadline and nothing lost held, and no error but the limiter's warnings. */
function check(report: ChaosReport, name: string, mostAllowed: number): ScenarioOutcome {
  const o = report.scenarios.find((s) => s.name === name);
  if (o?.figures === undefined) throw new Error(`no figures for ${name}: ${o?.skipped ?? 'no outcome'}`);
  const f = o.figures;
  console.log(
    `${name}: ${f.decisions} decisions, most admitted in a ${WINDOW_MS} ms window ${f.mostAdmitted.count} (limit ${LIMIT}), ` +
      `Redis alone ${f.mostAdmittedByRedis.count}; slowest net of stalls ${f.latencyNetOfStallsMax.toFixed(1)} ms; ` +
      `${JSON.stringify(f.byReason)}; verdicts ${o.verdicts.map((v) => `${v.name} ${v.pass}`).join(', ')}`,
  );
  const failed = (n: string): boolean => o.verdicts.find((v) => v.name === n)?.pass !== true;
  expect(['bound', 'redis-bound', 'deadline', 'lost'].filter(failed), JSON.stringify(o.verdicts)).toEqual([]);
  expect(o.errors.filter((e) => !/^instance \d+: warning /.test(e))).toEqual([]);
  expect(f.mostAdmittedByRedis.count).toBeLessThanOrEqual(LIMIT);
  expect(f.mostAdmitted.count).toBeLessThanOrEqual(mostAllowed);
  expect(f.mostAdmitted.count).toBeGreaterThanOrEqual(LIMIT); // the load reached the limit
  return o;
}

/** 1.1 × the limit: the bound of mode `local`. */
const LOCAL_MOST = Math.floor(LIMIT * 1.1);

/** Only B (instance 1) loses Redis: cut 2 s after the start, healed 5 s later, 3 s to the end. */
const alone = (how: Cut): ChaosScenario => ({
  name: `alone-${how}`,
  title: `B alone loses Redis for 5 s (${how})`,
  phases: { healthyMs: 2000, faultMs: 5000, recoveryMs: 3000 },
  start: (c) => cut(c, 1, how),
  stop: (c) => heal(c, 1, how),
});

/** Both lose Redis 2 s after the start; `first` is back 2 s later, the other 4 s after it; 3 s to the end. */
const stagger = (first: number): ChaosScenario => ({
  name: `stagger-${first}`,
  title: `both lose Redis, instance ${first} back 4 s before the other`,
  phases: { healthyMs: 2000, faultMs: 6000, recoveryMs: 3000 },
  async start(c) {
    await Promise.all([cut(c, 0, 'refuse'), cut(c, 1, 'refuse')]);
    await sleep(2000);
    await heal(c, first, 'refuse');
  },
  stop: (c) => heal(c, 1 - first, 'refuse'),
});

describe('two instances, one key: one loses Redis, or both and they come back apart', () => {
  let aloneRun: Promise<ChaosReport> | undefined;
  it.each(['refuse', 'blackhole'] as const)(
    'only B loses Redis for 5 s (%s): within 1.1 × the limit in every window',
    async (how) => {
      aloneRun ??= run(2, 'local', [alone('refuse'), alone('blackhole')]);
      check(await aloneRun, `alone-${how}`, LOCAL_MOST);
    },
    90_000,
  );

  let staggerRun: Promise<ChaosReport> | undefined;
  it.each([
    ['A', 0],
    ['B', 1],
  ] as const)(
    'both lose Redis, %s comes back 4 s before the other: within 1.1 × the limit in every window',
    async (_first, first) => {
      staggerRun ??= run(2, 'local', [stagger(0), stagger(1)]);
      check(await staggerRun, `stagger-${first}`, LOCAL_MOST);
    },
    90_000,
  );

  it('fail-closed, only B loses Redis: never over the limit', async () => {
    check(await run(2, 'fail-closed', [{ ...alone('refuse'), name: 'alone-closed' }]), 'alone-closed', LIMIT);
  }, 60_000);
});

describe('k of N cut off for longer than a lease', () => {
  it('2 of 4 lose Redis for 7 s with a lease of 1.5 s: within 1.1 × the limit in every window, and they answer on a shrunk share after it', async () => {
    const lease: ChaosScenario = {
      name: 'lease',
      title: '2 of 4 lose Redis for 7 s, past their lease of 1.5 s',
      phases: { healthyMs: 2000, faultMs: 7000, recoveryMs: 3000 },
      start: (c) => Promise.all([cut(c, 2, 'refuse'), cut(c, 3, 'refuse')]).then(() => undefined),
      stop: (c) => Promise.all([heal(c, 2, 'refuse'), heal(c, 3, 'refuse')]).then(() => undefined),
    };
    const o = check(await run(4, 'local', [lease], { local: { leaseMs: 1500 } }), 'lease', LOCAL_MOST);
    // The lease ends about 1.5 s after the last beat before the cut; by 5 s from the start the cut
    // instances answer on a tenth of their share (5 × 0.1, rounded down: none), refused by fail-closed's answer.
    const { stepMs, byInstance } = o.series as NonNullable<ScenarioOutcome['series']>;
    const late = (counts: readonly number[]): number => counts.slice(5000 / stepMs, 8500 / stepMs).reduce((a, b) => a + b, 0);
    const cutOff = byInstance.slice(2);
    console.log(
      `lease: instances 2 and 3 from 5 s to 8.5 s: ${cutOff.map((i) => `${late(i.decisions)} answered, ${late(i.admitted)} admitted`).join('; ')}`,
    );
    expect(cutOff.map((i) => late(i.decisions))).not.toContain(0);
    expect(cutOff.map((i) => late(i.admitted))).toEqual([0, 0]);
  }, 60_000);
});
