/**
 * The chaos harness's report without a run: small literal reports (one that held, one with a broken
 * bound, one with a skipped scenario, one whose strings are hostile HTML) rendered as the terminal
 * table, Markdown and HTML, written to disk, and asserted with `assertChaos`.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { assertChaos, ChaosAssertionError } from '../../src/chaos/assert.js';
import { toHtml, toMarkdown, verdictTable, writeReport } from '../../src/chaos/report.js';
import type { ChaosReport, ScenarioFigures, ScenarioOutcome, ScenarioSeries, Verdict } from '../../src/chaos/types.js';

const figures: ScenarioFigures = {
  decisions: 12_345,
  admitted: 4_000,
  mostAdmitted: { key: 'chaos-k0', count: 42, limit: 40, ratio: 1.05 },
  mostAdmittedByRedis: { key: 'chaos-k1', count: 40, limit: 40, ratio: 1 },
  faultLatency: { p50: 0.42, p95: 2.1, p99: 51.3, max: 87 },
  faultLatencyNetOfStalls: { p50: 0.4, p95: 2, p99: 49.9, max: 61 },
  latencyNetOfStallsMax: 61,
  lost: { exceptions: 0, unhandledRejections: 0, unanswered: 0 },
  timeToOpenMs: 230,
  timeToCloseMs: undefined,
  redisBackMs: 1_250,
  refusedWithRoom: 7,
  writeBack: { answeredLocally: 120, written: 110, present: 108, expired: 2, dropped: 0, pending: 10 },
  bySource: { redis: 11_000, local: 1_345 },
  byReason: { decided: 11_000, 'breaker-open': 1_345 },
};

const series: ScenarioSeries = {
  stepMs: 1_000,
  admittedInWindow: [10, 25, 40, 41, 42, 39, 40, 38],
  limit: 40,
  latencyP99: [1.2, 1.5, 50, 52, 3, 0, Number.NaN, 1.1],
  latencyMax: [4, 5, 60, 90, 8, 1, Number.NaN, 2],
  bySource: { redis: [100, 100, 0, 0, 100, 100, 100, 100], local: [0, 0, 100, 100, 0, 0, 0, 0] },
  byInstance: [{ decisions: [100, 100, 100, 100, 100, 100, 100, 100], admitted: [10, 15, 15, 1, 14, 10, 10, 10] }],
  breaker: [
    { atMs: 2_300, instance: 0, state: 'open' },
    { atMs: 4_300, instance: 0, state: 'half-open' },
    { atMs: 4_400, instance: 0, state: 'closed' },
    { atMs: 2_500, instance: 1, state: 'open' },
  ],
};

function verdict(name: Verdict['name'], pass: boolean | undefined, figure: string, bound: string, detail?: string): Verdict {
  return detail === undefined ? { name, pass, figure, bound } : { name, pass, figure, bound, detail };
}

const VERDICTS: readonly Verdict['name'][] = ['bound', 'redis-bound', 'deadline', 'latency', 'lost', 'recovery', 'write-back'];

const held: readonly Verdict[] = [
  verdict('bound', true, '1.05× (42 of 40)', "≤ 1.1× in 'local'"),
  verdict('redis-bound', true, '1.00× (40 of 40)', '≤ 1×'),
  verdict('deadline', true, '87 ms max', '≤ 50 ms + 40 ms'),
  verdict('latency', undefined, 'p99 51.3 ms', 'none'),
  verdict('lost', true, '0 lost', '0'),
];

function scenario(name: string, overrides: Partial<ScenarioOutcome> = {}): ScenarioOutcome {
  return {
    name,
    title: `Redis ${name}`,
    instances: 2,
    durationMs: 8_000,
    rate: 80,
    phases: [
      { name: 'before', startMs: 0, endMs: 2_000, fault: false },
      { name: name, startMs: 2_000, endMs: 4_000, fault: true },
      { name: 'after', startMs: 4_000, endMs: 8_000, fault: false },
    ],
    figures,
    series,
    verdicts: held,
    passed: true,
    errors: [],
    ...overrides,
  };
}

function report(scenarios: readonly ScenarioOutcome[], overrides: Partial<ChaosReport> = {}): ChaosReport {
  return {
    tool: 'resilimit chaos',
    version: '0.1.0',
    startedAt: '2025-01-01T00:00:00.000Z',
    durationMs: 65_000,
    config: './limiter.config.mjs',
    seed: 42,
    instances: 2,
    limiter: { limit: 40, windowMs: 10_000, mode: 'local', timeoutMs: 50, instances: 2, localLimit: 20, leaseMs: 10_000 },
    keys: ['chaos-k0', 'chaos-k1'],
    backend: { kind: 'local', detail: 'redis-server 7.4.1, bundled proxy' },
    machine: { node: 'v24.1.0', cpus: 8, loadavg: [1.5, 1.2, 0.9] },
    latencyBudgetMs: 100,
    require: [],
    scenarios,
    passed: scenarios.every((s) => s.passed),
    interrupted: false,
    ...overrides,
  };
}

const passing = report([scenario('frozen'), scenario('killed')]);
const brokenBound = verdict('bound', false, '1.32× (53 of 40)', "≤ 1.1× in 'local'", '9 calls over 1.1×');
const failing = report([scenario('frozen'), scenario('outage', { verdicts: [brokenBound, ...held.slice(1)], passed: false })]);
const skipped: ScenarioOutcome = {
  name: 'flushall',
  title: 'Redis loses its data',
  skipped: 'destructive against an external Redis',
  instances: 2,
  durationMs: 0,
  rate: 80,
  phases: [],
  verdicts: [],
  passed: true,
  errors: [],
};
const skipping = report([scenario('frozen'), skipped]);
const hostile = report(
  [scenario('frozen', { title: '<script>alert(1)</script> & "quotes" | pipe', errors: ['<img src=x onerror=alert(1)>'] })],
  {
    config: './<script>evil</script>.mjs',
  },
);

function count(text: string, part: string): number {
  return text.split(part).length - 1;
}

describe('verdictTable', () => {
  it('names the failed scenario, its verdict and the full figure against the bound', () => {
    const table = verdictTable(failing);
    expect(table.split('\n')[0]).toBe('broken: 1 verdict failed in 1 of 2 scenarios');
    expect(table).toContain("✗ outage bound: 1.32× (53 of 40) against ≤ 1.1× in 'local'; 9 calls over 1.1×");
    expect(table).toMatch(/^outage +✗ 1\.32×/m);
  });

  it('aligns its columns and stays under 140 columns', () => {
    const lines = verdictTable(passing).split('\n');
    const header = lines[2] ?? '';
    const row = lines.find((l) => l.startsWith('killed')) ?? '';
    expect([...row].indexOf('✓', 10)).toBe(header.indexOf('bound'));
    expect([...row].indexOf('—')).toBe(header.indexOf('recovery'));
    expect(row).toContain('· p99 51.3 ms');
    for (const line of lines) expect([...line].length).toBeLessThanOrEqual(140);
  });

  it('shortens long names and figures in the table, never in the failure lines', () => {
    const figure = '1.32× (53 of 40 on a key with a very long name indeed)';
    const long = report([
      scenario('a-scenario-with-a-name-far-too-long-for-its-column', {
        verdicts: VERDICTS.map((name) => verdict(name, false, figure, 'a promise')),
        passed: false,
      }),
    ]);
    const lines = verdictTable(long).split('\n');
    for (const line of lines.slice(0, 5)) expect([...line].length).toBeLessThanOrEqual(140);
    expect(lines[4]).toMatch(/^a-scenario-with-a-name-… {2}✗ 1\.32× /);
    expect(lines).toContain(`✗ a-scenario-with-a-name-far-too-long-for-its-column write-back: ${figure} against a promise`);
  });

  it('gives a skipped scenario its reason', () => {
    expect(verdictTable(skipping)).toMatch(/^flushall +skipped: destructive against an external Redis$/m);
  });

  it('says when the run was interrupted', () => {
    expect(verdictTable({ ...passing, interrupted: true }).split('\n')[0]).toMatch(/; interrupted/);
  });
});

describe('toMarkdown', () => {
  it('has the verdict, the facts, the table of verdicts and the figures', () => {
    const md = toMarkdown(failing);
    expect(md.split('\n')[0]).toBe('# ❌ resilimit chaos: broken');
    expect(md).toContain('| Scenario | `bound` | `redis-bound` | `deadline` | `latency` | `lost` | `recovery` | `write-back` |');
    expect(md).toMatch(/\| \*\*outage\*\*<br>Redis outage \| ❌ 1\.32× \(53 of 40\) \|/);
    expect(md).toContain('- ❌ **outage** `bound`:');
    expect(md).toContain('| most admitted in a window | 42 of 40 (1.05×) on chaos-k0 |');
    expect(md).toContain('| fault latency | p50 0.42 ms, p99 51.3 ms, max 87 ms |');
    expect(md).toContain('| time to close | never |');
    expect(md).toContain('- **seed**: 42');
    expect(toMarkdown(passing).split('\n')[0]).toBe('# ✅ resilimit chaos: held');
  });

  it('lists a skipped scenario with its reason and escapes HTML', () => {
    expect(toMarkdown(skipping)).toContain('skipped: destructive against an external Redis');
    const md = toMarkdown(hostile);
    expect(md).not.toMatch(/<script|<img/i);
    expect(md).toContain('### ✅ &lt;script&gt;alert(1)&lt;/script&gt; &amp; "quotes" \\| pipe (`frozen`)');
  });
});

describe('toHtml', () => {
  it('draws three charts per scenario that ran, each a closed <svg> with a title', () => {
    for (const r of [passing, failing, skipping]) {
      const html = toHtml(r);
      const ran = r.scenarios.filter((s) => s.skipped === undefined).length;
      expect(count(html, '<div class="charts">')).toBe(ran);
      expect(count(html, '<svg ')).toBe(3 * ran);
      expect(count(html, '</svg>')).toBe(3 * ran);
      // Never one chart inside another: every opening is closed before the next opens.
      expect(html.match(/<svg |<\/svg>/g)?.join('')).toBe('<svg </svg>'.repeat(3 * ran));
      expect(count(html, '<title>')).toBeGreaterThanOrEqual(1 + 3 * ran);
    }
  });

  it('draws the limit, 1.1 × the limit, the deadline, the budget, the fault and the breaker states', () => {
    const html = toHtml(passing);
    expect(html).toMatch(/<line class="limit" x1="\d+" y1="[\d.]+"/);
    expect(html).toContain('limit 40</text>');
    expect(html).toContain('<line class="limit-110"');
    expect(html).toContain('deadline 50 ms</text>');
    expect(html).toContain('budget 100 ms</text>');
    expect(html).toContain('<rect class="fault"');
    expect(html).toMatch(/<rect class="state-open"[^>]*><title>instance 1: open from 2\.5 s to 8 s<\/title>/);
    expect(html).toContain('<title>instance 0: closed from 0 ms to 2.3 s</title>');
    expect(html).toContain('prefers-color-scheme: dark');
  });

  it('escapes every string from the report and loads nothing', () => {
    const html = toHtml(hostile);
    expect(html).not.toMatch(/<script|<img|<link|@import|url\(/i);
    expect(html).toContain('&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot; | pipe');
    expect(html).toContain('&lt;img src=x onerror=alert(1)&gt;');
    expect(html).toContain('./&lt;script&gt;evil&lt;/script&gt;.mjs');
  });

  it('lists a skipped scenario with its reason and no charts', () => {
    const html = toHtml(skipping);
    expect(html).toContain('<h2>Skipped</h2>');
    expect(html).toContain('destructive against an external Redis');
    expect(html).not.toContain('id="scenario-flushall"');
  });
});

describe('writeReport', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('writes report.json, report.md and report.html into a directory it creates', async () => {
    dir = mkdtempSync(join(tmpdir(), 'resilimit-report-'));
    const files = await writeReport(failing, join(dir, 'nested', 'report'));
    expect(files).toEqual({
      json: join(dir, 'nested', 'report', 'report.json'),
      markdown: join(dir, 'nested', 'report', 'report.md'),
      html: join(dir, 'nested', 'report', 'report.html'),
    });
    for (const path of Object.values(files)) expect(existsSync(path)).toBe(true);
    expect(JSON.parse(readFileSync(files.json, 'utf8'))).toMatchObject({ tool: 'resilimit chaos', passed: false });
    expect(readFileSync(files.json, 'utf8')).toMatch(/^\{\n {2}"tool"/);
    expect(readFileSync(files.markdown, 'utf8')).toBe(toMarkdown(failing));
    expect(readFileSync(files.html, 'utf8')).toBe(toHtml(failing));
  });
});

describe('assertChaos', () => {
  it('returns when every promise held', () => {
    expect(() => assertChaos(passing)).not.toThrow();
    expect(() => assertChaos(skipping)).not.toThrow();
  });

  it('throws a ChaosAssertionError with the table as its message when a promise broke', () => {
    let caught: unknown;
    try {
      assertChaos(failing);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ChaosAssertionError);
    const error = caught as ChaosAssertionError;
    expect(error.name).toBe('ChaosAssertionError');
    expect(error.message).toBe(verdictTable(failing));
    expect(error.report).toBe(failing);
  });

  it('throws when the run was interrupted, though what ran held', () => {
    const interrupted = { ...passing, interrupted: true };
    expect(() => assertChaos(interrupted)).toThrow(ChaosAssertionError);
    expect(() => assertChaos(interrupted)).toThrow(/interrupted/);
  });
});
