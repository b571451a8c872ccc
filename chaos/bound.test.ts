/**
 * The bound the library holds itself to, end to end, on the public harness (`resilimit/chaos`, the
 * built package): 4 service processes sharing one limit of 40 per 1 s on 2 keys, offered 2× (and 4×)
 * the limit, through a healthy phase, Redis frozen (SIGSTOP), resumed, frozen again one second later,
 * killed and restarted empty, and healthy again. The harness's verdicts: in every sliding window of
 * every key, admitted ≤ 1.1 × limit in mode `local`, ≤ limit in `fail-closed`; Redis-decided
 * admissions alone ≤ limit; nothing lost; every decision within the deadline plus the process's own
 * event-loop stalls. Instances recover one after another as their clients reconnect: the staggered
 * recovery that heartbeats must cover (`InstanceCounter`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type * as Chaos from '../src/chaos.ts';
import type { ChaosScenario, FaultContext } from '../src/chaos.ts';

const { runChaos } = (await import(new URL('../dist/chaos.js', import.meta.url).href)) as typeof Chaos;
const CONFIG = fileURLToPath(new URL('./configs/repo.mjs', import.meta.url));
const LIMIT = 40;
const KEYS = 2;

function server(c: FaultContext): NonNullable<FaultContext['server']> {
  if (c.server === undefined) throw new Error('needs the harness own redis-server');
  return c.server;
}

/** From the end of 2 s healthy: frozen 2 s, resumed 1 s, frozen 1.5 s, resumed 1.5 s, killed, restarted empty 0.5 s later; 3.5 s to recover. */
const freezesAndRestart: ChaosScenario = {
  name: 'freezes-and-restart',
  title: 'Redis frozen, resumed, frozen again, killed and restarted empty',
  needsServer: true,
  destructive: true,
  phases: { healthyMs: 2000, faultMs: 6500, recoveryMs: 3500 },
  async start(c) {
    const s = server(c);
    s.freeze();
    await sleep(2000);
    s.thaw();
    await sleep(1000);
    s.freeze();
    await sleep(1500);
    s.thaw();
    await sleep(1500);
    await s.kill();
    await sleep(500);
    await s.restart();
  },
  async stop(c) {
    server(c).thaw(); // in case the run was stopped during a freeze
  },
};

describe('4 processes through a freeze, a second freeze and a restart', () => {
  it.each([
    ['local', 2],
    ['local', 4],
    ['fail-closed', 4],
  ] as const)(
    'mode %s offered %i× the limit: every verdict holds',
    async (mode, offered) => {
      const saved = { ...process.env };
      Object.assign(process.env, {
        CHAOS_OPTIONS: JSON.stringify({ limit: LIMIT, mode }),
        CHAOS_KEYS: String(KEYS),
        CHAOS_RATE: String(offered * LIMIT * KEYS),
      });
      try {
        const report = await runChaos({ config: CONFIG, instances: 4, scenarios: [freezesAndRestart], seed: 1 });
        const [outcome] = report.scenarios;
        const f = outcome?.figures;
        console.log(
          `${mode} ${offered}×: most admitted in a window ${f?.mostAdmitted.count} of ${LIMIT}, Redis alone ${f?.mostAdmittedByRedis.count}; ` +
            `slowest net of stalls ${f?.latencyNetOfStallsMax.toFixed(1)} ms; ${JSON.stringify(f?.bySource)}`,
        );
        expect(outcome?.verdicts.filter((v) => v.pass === false)).toEqual([]);
        expect(outcome?.verdicts.find((v) => v.name === 'bound')?.pass).toBe(true);
        expect(outcome?.passed, outcome?.errors.join('\n')).toBe(true);
        expect(f?.mostAdmitted.count).toBeGreaterThanOrEqual(LIMIT); // the load reached the limit
      } finally {
        for (const key of ['CHAOS_OPTIONS', 'CHAOS_KEYS', 'CHAOS_RATE']) {
          if (saved[key] === undefined) delete process.env[key];
          else process.env[key] = saved[key];
        }
      }
    },
    90_000,
  );
});
