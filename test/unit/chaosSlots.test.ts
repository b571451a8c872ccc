/**
 * The chaos harness on a concurrency limit, without a run: a config's `parallel`, `holdMs` and
 * `maxWaitMs` checked; a `ConcurrencyLimiter` told apart from a `ResilientLimiter`; the slot figures
 * and verdicts from literal slots held (the bound per mode, the rate limit's verdicts not applicable);
 * and the report's three renderings of them.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildInstance, ChaosUsageError, loadChaosConfig } from '../../src/chaos/config.js';
import type { SlotRecord, SlotsDone } from '../../src/chaos/protocol.js';
import { toHtml, toMarkdown, verdictTable } from '../../src/chaos/report.js';
import { slotFigures, slotVerdicts, type SlotInput } from '../../src/chaos/slotFigures.js';
import type { ChaosPhase, ChaosReport, VerdictName } from '../../src/chaos/types.js';
import type { Mode } from '../../src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'resilimit-chaos-slots-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function module(name: string, fields: string): string {
  const file = join(dir, name);
  writeFileSync(file, `export default { ${fields} createLimiter() { return {}; } };\n`);
  return file;
}

describe('a concurrency limit config', () => {
  it.each([
    ['parallel: 0,', 'parallel must be tasks at once per instance, an integer 1 … 1000; got 0'],
    ['holdMs: [200, 100],', 'holdMs must be [low, high], integers of ms with 1 ≤ low ≤ high ≤ 60,000; got [200,100]'],
    ['holdMs: 100,', 'holdMs must be [low, high], integers of ms with 1 ≤ low ≤ high ≤ 60,000; got 100'],
    ["maxWaitMs: '5',", 'maxWaitMs must be an integer of ms, 0 … 60,000; got "5"'],
  ])('refuses %s naming the field, what is expected and what was given', async (fields, message) => {
    const file = module(`bad-${Math.random()}.mjs`, fields);
    await expect(loadChaosConfig(file)).rejects.toThrow(ChaosUsageError);
    await expect(loadChaosConfig(file)).rejects.toThrow(message);
  });

  it('tells a ConcurrencyLimiter from a ResilientLimiter by their methods', async () => {
    const file = join(dir, 'kinds.mjs');
    writeFileSync(
      file,
      `import { ConcurrencyLimiter, ResilientLimiter, createRedisClient } from ${JSON.stringify(new URL('../../src/index.ts', import.meta.url).href)};
export function createLimiter({ port, instance }) {
  const redis = createRedisClient({ host: '127.0.0.1', port, lazyConnect: true });
  const limiter = instance === 0 ? new ConcurrencyLimiter({ redis, max: 3 }) : new ResilientLimiter({ redis, limit: 3, windowMs: 1000 });
  return { limiter, close: () => redis.disconnect() };
}
`,
    );
    const loaded = await loadChaosConfig(file);
    const slots = await buildInstance(file, loaded, { host: '127.0.0.1', port: 1, instance: 0 });
    const rate = await buildInstance(file, loaded, { host: '127.0.0.1', port: 1, instance: 1 });
    await Promise.all([slots.close(), rate.close()]);
    expect([slots.kind, rate.kind]).toEqual(['slots', 'rate']);
  });
});

const phases: ChaosPhase[] = [
  { name: 'healthy', startMs: 0, endMs: 1000, fault: false },
  { name: 'frozen', startMs: 1000, endMs: 2000, fault: true },
  { name: 'recovery', startMs: 2000, endMs: 3000, fault: false },
];

function done(held: SlotRecord[], share: number): SlotsDone {
  return {
    kind: 'slots-done',
    held,
    shares: [[900, share]],
    stalls: [],
    states: [],
    refused: 1,
    thrown: 0,
    lost: 0,
    unfinished: 0,
    unhandledRejections: 0,
    errors: [],
  };
}

/** Two instances, max 4, shares 2: each holds 2 from Redis while healthy (one across the fault's start), then `local` slots during the fault. */
function input(mode: Mode, localEach: number, require: VerdictName[] = []): SlotInput {
  const instance = (offset: number): SlotRecord[] => [
    [100 + offset, 600, 'redis', 0, 0],
    [500 + offset, 1200, 'redis', 0, 0],
    ...Array.from({ length: localEach }, (): SlotRecord => [1300, 1500, mode === 'fail-open' ? 'fail-open' : 'local', 0, 0]),
    [2100, 2500, 'redis', 0, 0],
    [2600 + offset, 2900, 'redis', 0, 0],
  ];
  return { results: [done(instance(0), 2), done(instance(1), 2)], t0: 0, keys: ['k'], phases, max: 4, mode, ttlMs: 3000, require };
}

function check(i: SlotInput) {
  const { figures, unsettled } = slotFigures(i);
  return { figures, verdicts: slotVerdicts(figures, unsettled, i) };
}

describe('slot figures and verdicts', () => {
  it("measures the most held per phase and the fault bound max(max, Σ max(h_i, s_i)); 'local' holds it", () => {
    const { figures, verdicts } = check(input('local', 2));
    expect(figures.mostHeld.healthy.count).toBe(4);
    expect(figures.mostHeld.fault.count).toBe(4);
    expect(figures.atFaultStart).toEqual({ held: { k: [1, 1] }, share: [2, 2] });
    expect(figures.faultBound).toEqual({ k: 4 });
    expect(figures.settledAtMs).toBe(2000); // the fault's slots were given back by its end
    expect(figures.mostHeld.settled?.count).toBe(2);
    expect(figures.mostHeldByKey).toEqual({ k: [4, 4, 2] });
    expect(figures.redisBackMs).toBe(100);
    expect(verdicts.filter((v) => v.pass !== undefined).map((v) => [v.name, v.pass])).toEqual([
      ['slot-bound', true],
      ['errors', true],
      ['slot-lost', true],
      ['recovery', true],
    ]);
    expect(verdicts.filter((v) => v.applicable === false).map((v) => v.name)).toEqual([
      'bound',
      'redis-bound',
      'deadline',
      'latency',
      'lost',
      'write-back',
    ]);
  });

  it("fails 'local' past its shares and 'fail-closed' past max; reports 'fail-open' unless required", () => {
    expect(check(input('local', 3)).verdicts[0]).toMatchObject({ pass: false, detail: '2 over the fault bound (k)' });
    const broken = input('local', 0);
    broken.results[0]?.held.push(...Array.from({ length: 4 }, (): SlotRecord => [200, 300, 'redis', 0, 0])); // 6 at once
    expect(check(broken).verdicts[0]).toMatchObject({ pass: false, detail: '2 over 4 while healthy (k)' });
    broken.results[1]?.held.push([250, 260, 'local', 0, 0]); // a missed deadline while healthy: max + Σ s_i
    expect(check(broken).verdicts[0]).toMatchObject({ pass: true });
    expect(check(input('fail-closed', 1)).verdicts[0]).toMatchObject({ pass: true });
    expect(check(input('fail-open', 5)).verdicts[0]).toMatchObject({ pass: undefined });
    expect(check(input('fail-open', 5)).verdicts[0]?.bound).toContain("not promised in 'fail-open'");
    expect(check(input('fail-open', 5, ['slot-bound'])).verdicts[0]).toMatchObject({ pass: false });
  });

  it('renders the slot figures in the three reports, with the slot verdicts as columns', () => {
    const { figures, verdicts } = check(input('local', 3));
    const report: ChaosReport = {
      tool: 'resilimit chaos',
      version: '0.1.0',
      startedAt: '2026-01-01T00:00:00.000Z',
      durationMs: 3000,
      config: 'slots.mjs',
      seed: 1,
      instances: 2,
      limiter: {
        limit: 4,
        windowMs: 3000,
        mode: 'local',
        timeoutMs: 50,
        instances: 2,
        localLimit: 2,
        slots: { max: 4, ttlMs: 3000, instances: 'auto', share: 2, parallel: 4, holdMs: [100, 150], maxWaitMs: 100 },
      },
      keys: ['k'],
      backend: { kind: 'local', detail: 'test' },
      machine: { node: 'v24', cpus: 2, loadavg: [0, 0, 0] },
      latencyBudgetMs: 100,
      require: [],
      scenarios: [
        {
          name: 'frozen',
          title: 'Redis frozen',
          instances: 2,
          durationMs: 3000,
          rate: 0,
          phases,
          slots: figures,
          verdicts,
          passed: false,
          errors: [],
        },
      ],
      passed: false,
      interrupted: false,
    };
    const table = verdictTable(report);
    expect(table).toContain('slot-bound');
    expect(table).not.toContain('redis-bound  ');
    expect(table).toContain('✗ frozen slot-bound');
    expect(table).toContain('not applicable to a concurrency limit: bound, redis-bound, deadline, latency, lost, write-back');
    const markdown = toMarkdown(report);
    expect(markdown).toContain('| most held at once, fault | 6 of max 4 on k at 1.3 s |');
    expect(markdown).toContain('ConcurrencyLimiter: max 4 slots per key');
    expect(markdown).toContain('- `write-back`: not measured');
    const html = toHtml(report);
    expect(html).toContain('<dt>fault bound max(max, Σ max(h_i, s_i))</dt><dd>k 4</dd>');
    expect(html).toContain('4 tasks at once per instance');
  });
});
