/**
 * A concurrency limit (`ConcurrencyLimiter`) through the public harness (`resilimit/chaos`, the built
 * package): `chaos/configs/slots.mjs`, max 10 slots per key, 4 processes of 8 tasks each holding a
 * slot 100–150 ms, through Redis frozen and Redis killed and restarted empty. The harness's verdicts
 * (docs/chaos.md, "A concurrency limit"): most held at once ≤ max while healthy and once settled,
 * ≤ max(max, Σ max(h_i, s_i)) from the fault's start until settled in 'local'; no error; no slot
 * lost; Redis grants again. Then two runs where the verdict must fail: 'fail-open' required to hold
 * the bound, and a config broken on purpose (each instance its own prefix: the limit is not shared).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type * as Chaos from '../src/chaos.ts';
import type { ChaosReport, ScenarioOutcome } from '../src/chaos.ts';

const { runChaos, verdictTable, writeReport } = (await import(new URL('../dist/chaos.js', import.meta.url).href)) as typeof Chaos;
const CONFIG = fileURLToPath(new URL('./configs/slots.mjs', import.meta.url));
const MAX = 10;

/** Runs with these environment variables (inherited by the instances' processes), restored after. */
async function withEnv<T>(env: Record<string, string>, run: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    return await run();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function print(label: string, report: ChaosReport): void {
  for (const s of report.scenarios) {
    const f = s.slots;
    console.log(
      `${label} ${s.name}: most held at once healthy ${f?.mostHeld.healthy.count}, fault ${f?.mostHeld.fault.count}, ` +
        `recovery ${f?.mostHeld.recovery.count}, settled ${f?.mostHeld.settled?.count} (max ${MAX}); fault bound ${JSON.stringify(f?.faultBound)} ` +
        `from h_i ${JSON.stringify(f?.atFaultStart.held)}, s_i ${JSON.stringify(f?.atFaultStart.share)}; by source ${JSON.stringify(f?.bySource)}; ` +
        `refused ${f?.refused}; lost ${f?.lost}; errors ${JSON.stringify(f?.errors)}; Redis back ${f?.redisBackMs} ms`,
    );
  }
  console.log(verdictTable(report));
}

const verdict = (s: ScenarioOutcome | undefined, name: string) => s?.verdicts.find((v) => v.name === name);

describe('a ConcurrencyLimiter through the chaos harness', () => {
  it("'local', 4 processes through a freeze and a restart empty: every verdict holds", async () => {
    const report = await withEnv({ CHAOS_SLOTS: JSON.stringify({ mode: 'local' }), CHAOS_KEYS: '2', CHAOS_PARALLEL: '8' }, () =>
      runChaos({ config: CONFIG, instances: 4, scenarios: ['frozen', 'killed'], seed: 1 }),
    );
    print('local', report);
    const dir = mkdtempSync(join(tmpdir(), 'resilimit-slots-report-'));
    try {
      const files = await writeReport(report, dir);
      const markdown = readFileSync(files.markdown, 'utf8');
      expect(markdown).toContain('most held at once, fault');
      expect(markdown).toContain('`slot-bound`');
      expect(markdown).toContain('Not applicable to a concurrency limit');
      expect(readFileSync(files.html, 'utf8')).toContain('fault bound max(max, Σ max(h_i, s_i))');
      expect((JSON.parse(readFileSync(files.json, 'utf8')) as ChaosReport).limiter.slots?.max).toBe(MAX);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(report.limiter.slots).toMatchObject({ max: MAX, parallel: 8, holdMs: [100, 150] });
    for (const s of report.scenarios) {
      expect(
        s.verdicts.filter((v) => v.pass === false),
        s.name,
      ).toEqual([]);
      expect(s.passed, s.errors.join('\n')).toBe(true);
      for (const name of ['slot-bound', 'errors', 'slot-lost', 'recovery']) expect(verdict(s, name)?.pass, `${s.name} ${name}`).toBe(true);
      // The rate limit's verdicts are marked not applicable, never passed.
      for (const name of ['bound', 'redis-bound', 'deadline', 'latency', 'lost', 'write-back']) {
        expect(verdict(s, name), `${s.name} ${name}`).toMatchObject({ pass: undefined, applicable: false, figure: 'not applicable' });
      }
      const f = s.slots;
      expect(f?.mostHeld.healthy.count, s.name).toBe(MAX); // the load reached the limit
      expect(f?.bySource.local ?? 0, s.name).toBeGreaterThan(0); // the fault was felt: shares answered
      expect(f?.localWhileHealthy, s.name).toBe(0); // Redis kept its deadline while healthy
    }
  }, 120_000);

  it("'fail-open' required to hold the slot bound: the verdict fails, naming the excess", async () => {
    const report = await withEnv({ CHAOS_SLOTS: JSON.stringify({ mode: 'fail-open' }), CHAOS_KEYS: '1', CHAOS_PARALLEL: '8' }, () =>
      runChaos({ config: CONFIG, instances: 3, scenarios: ['frozen'], seed: 2, require: ['slot-bound'] }),
    );
    print('fail-open', report);
    const [s] = report.scenarios;
    const bound = verdict(s, 'slot-bound');
    expect(bound?.pass).toBe(false);
    expect(bound?.detail).toMatch(/over the fault bound/);
    expect(s?.slots?.mostHeld.fault.count).toBeGreaterThan(s?.slots?.faultBound['chaos-frozen-k0'] ?? 0);
    expect(s?.slots?.mostHeld.healthy.count).toBeLessThanOrEqual(MAX); // Redis holds it while healthy
    expect(report.passed).toBe(false);
    expect(verdictTable(report)).toContain('✗ frozen slot-bound');
  }, 120_000);

  it('a config broken on purpose (each instance its own prefix): the verdict fails while Redis is healthy', async () => {
    const report = await withEnv(
      {
        CHAOS_SLOTS: JSON.stringify({ mode: 'local', instances: 3 }),
        CHAOS_KEYS: '1',
        CHAOS_PARALLEL: '8',
        CHAOS_PREFIX_PER_INSTANCE: '1',
      },
      () => runChaos({ config: CONFIG, instances: 3, scenarios: ['frozen'], seed: 3 }),
    );
    print('broken', report);
    const [s] = report.scenarios;
    expect(verdict(s, 'slot-bound')?.pass).toBe(false);
    expect(verdict(s, 'slot-bound')?.detail).toMatch(/over 10 while healthy/);
    expect(s?.slots?.mostHeld.healthy.count).toBeGreaterThan(MAX);
  }, 120_000);
});
