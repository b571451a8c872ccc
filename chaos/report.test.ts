/**
 * The chaos report's renderers (the Markdown table and report, the SVG timeline) and writer. The two
 * scenario results below are FIXTURES for the renderers, made up by hand to exercise every part of
 * the output: they are not measurements and say nothing about how resilimit behaves.
 *
 *   npx vitest run --root chaos report
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { DecisionReason, DecisionSource } from '../src/index.ts';
import { formatMs } from './format.ts';
import { renderMarkdownReport, renderMarkdownTable, svgFileName, writeReport } from './report.ts';
import { renderSvg } from './timeline.ts';
import type { Bucket, ScenarioResult } from './types.ts';

// ---------------------------------------------------------------------------------------------------
// Fixtures (synthetic, for the renderer only)

const NO_SOURCES: Record<DecisionSource, number> = { redis: 0, local: 0, 'fail-open': 0, 'fail-closed': 0, disabled: 0 };
const NO_REASONS: Record<DecisionReason, number> = {
  decided: 0,
  'breaker-open': 0,
  timeout: 0,
  'redis-error': 0,
  'redis-reply-error': 0,
  'not-ready': 0,
  saturated: 0,
  slow: 0,
  'deny-cache': 0,
  reconciling: 0,
  disabled: 0,
  'lease-ended': 0,
  'no-lease': 0,
  'no-share': 0,
};

/** A made-up timeline: `shape(atMs)` says how many decisions each source made in the bucket and how many were admitted. */
function fixtureTimeline(
  durationMs: number,
  bucketMs: number,
  shape: (atMs: number) => { bySource: Partial<Record<DecisionSource, number>>; admitted: number },
): Bucket[] {
  const buckets: Bucket[] = [];
  for (let atMs = 0; atMs < durationMs; atMs += bucketMs) {
    const { bySource, admitted } = shape(atMs);
    const full = { ...NO_SOURCES, ...bySource };
    const decisions = Object.values(full).reduce((a, b) => a + b, 0);
    buckets.push({ atMs, decisions, admitted, bySource: full });
  }
  return buckets;
}

/** FIXTURE: a frozen Redis with local fallback, every check passing. Title holds XML/Markdown specials on purpose. */
const FROZEN_FIXTURE: ScenarioResult = {
  name: 'redis-freeze',
  title: 'Redis frozen <SIGSTOP> & thawed',
  backend: 'container',
  mode: 'local',
  instances: 3,
  limit: 100,
  windowMs: 1000,
  keys: 1,
  rate: 150,
  durationMs: 20_000,
  reconcile: true,
  breakerTimeoutMs: 50,
  phases: [
    { name: 'steady', startMs: 0, endMs: 5000, fault: false },
    { name: 'freeze', startMs: 5000, endMs: 12_000, fault: true },
    { name: 'recovery', startMs: 12_000, endMs: 20_000, fault: false },
  ],
  bucketMs: 250,
  timeline: fixtureTimeline(20_000, 250, (atMs) => {
    if (atMs >= 5000 && atMs < 5250) return { bySource: { redis: 20, local: 18 }, admitted: 25 };
    if (atMs >= 5250 && atMs < 12_500) return { bySource: { local: 37 + (atMs % 1000 === 0 ? 1 : 0) }, admitted: 26 };
    return { bySource: { redis: 37 + (atMs % 1000 === 0 ? 1 : 0) }, admitted: 25 };
  }),
  stateChanges: [
    { atMs: 5212, instance: 0, state: 'open' },
    { atMs: 5230, instance: 1, state: 'open' },
    { atMs: 8212, instance: 0, state: 'half-open' },
    { atMs: 8222, instance: 0, state: 'open' },
    { atMs: 8230, instance: 1, state: 'half-open' },
    { atMs: 8240, instance: 1, state: 'open' },
    { atMs: 11_222, instance: 0, state: 'half-open' },
    { atMs: 11_240, instance: 1, state: 'half-open' },
    { atMs: 11_300, instance: 1, state: 'open' },
    { atMs: 12_300, instance: 1, state: 'half-open' },
    { atMs: 12_640, instance: 1, state: 'closed' },
    { atMs: 11_260, instance: 0, state: 'open' },
    { atMs: 12_262, instance: 0, state: 'half-open' },
    { atMs: 12_400, instance: 0, state: 'closed' },
  ],
  metrics: {
    decisions: 3000,
    admitted: 2000,
    exceptions: 0,
    unhandledRejections: 0,
    faultLatency: { p50: 0.5, p99: 1.34, max: 25.06, count: 1050 },
    faultLoopStallMs: 0,
    faultLatencyNetOfStalls: { p50: 0.5, p99: 1.34, max: 25.06, count: 1050 },
    latencyNetOfStallsMax: 0,
    latency: { p50: 0.31, p99: 0.9, max: 25.06, count: 3000 },
    bySource: { ...NO_SOURCES, redis: 1930, local: 1070 },
    byReason: { ...NO_REASONS, decided: 1930, 'breaker-open': 1040, timeout: 30 },
    timeToOpenMs: 212,
    timeToCloseMs: 640,
    overLimit: { maxExcess: 0, callsOver: 0 },
  },
  checks: [
    { name: 'no exceptions', pass: true, detail: '0 exceptions' },
    { name: 'holds the limit', pass: true, detail: 'max excess 0' },
  ],
};

/** FIXTURE: slow Redis in fail-open mode that never closes again, with one check failing. */
const SLOW_FIXTURE: ScenarioResult = {
  name: 'latency spike',
  title: 'Latency 200 ms',
  backend: 'local',
  mode: 'fail-open',
  instances: 2,
  limit: 50,
  windowMs: 1000,
  keys: 4,
  rate: 80,
  durationMs: 10_000,
  reconcile: false,
  breakerTimeoutMs: 50,
  phases: [
    { name: 'steady', startMs: 0, endMs: 3000, fault: false },
    { name: 'latency 200ms', startMs: 3000, endMs: 7000, fault: true },
    { name: 'after', startMs: 7000, endMs: 10_000, fault: false },
  ],
  bucketMs: 500,
  timeline: fixtureTimeline(10_000, 500, (atMs) =>
    atMs >= 3000 && atMs < 7000 ? { bySource: { 'fail-open': 40 }, admitted: 40 } : { bySource: { redis: 40 }, admitted: 25 },
  ),
  stateChanges: [
    { atMs: 3061, instance: 0, state: 'open' },
    { atMs: 3075, instance: 1, state: 'open' },
  ],
  metrics: {
    decisions: 800,
    admitted: 600,
    exceptions: 0,
    unhandledRejections: 1,
    faultLatency: { p50: 0.043, p99: 12.345, max: 250.4, count: 320 },
    faultLoopStallMs: 0,
    faultLatencyNetOfStalls: { p50: 0.043, p99: 12.345, max: 250.4, count: 320 },
    latencyNetOfStallsMax: 0,
    latency: { p50: 0.04, p99: 50.1, max: 250.4, count: 800 },
    bySource: { ...NO_SOURCES, redis: 480, 'fail-open': 320 },
    byReason: { ...NO_REASONS, decided: 480, 'breaker-open': 300, timeout: 20 },
    timeToOpenMs: 61,
    timeToCloseMs: undefined,
    overLimit: { maxExcess: 30, callsOver: 120 },
  },
  checks: [
    { name: 'no unhandled rejections', pass: false, detail: '1 unhandled rejection: Error | connection reset' },
    { name: 'no exceptions', pass: true, detail: '0 exceptions' },
  ],
};

const FIXTURES = [FROZEN_FIXTURE, SLOW_FIXTURE] as const;
const META = {
  backend: 'container',
  why: 'auto: docker answered',
  startedAt: '2025-01-01T00:00:00.000Z',
  node: 'v24.0.0',
  machine: 'linux x64, 8 CPUs',
};

// ---------------------------------------------------------------------------------------------------
// A minimal XML well-formedness check (Node has no DOMParser)

const NAME = '[A-Za-z_][\\w:.-]*';
const ATTRIBUTE = `\\s+${NAME}\\s*=\\s*(?:"[^"<]*"|'[^'<]*')`;
const TOKEN = new RegExp(`<!--[\\s\\S]*?-->|<\\?[\\s\\S]*?\\?>|<(/?)(${NAME})((?:${ATTRIBUTE})*)\\s*(/?)>|[<>]|&`, 'g');
const ENTITY = /^&(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/;
const BAD_AMPERSAND = /&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)/;

/** Throws unless `xml` is one element with balanced tags, quoted attributes and only known entities; returns the root's name. */
function checkWellFormed(xml: string): string {
  const stack: string[] = [];
  let root: string | undefined;
  let closedRoot = false;
  for (const match of xml.matchAll(TOKEN)) {
    const [token, slash, name, attributes, selfClosing] = match;
    const at = match.index;
    if (token.startsWith('<!--') || token.startsWith('<?')) continue;
    if (token === '&') {
      if (!ENTITY.test(xml.slice(at))) throw new Error(`bare & at ${at}: ${xml.slice(at, at + 20)}`);
      continue;
    }
    if (name === undefined) throw new Error(`stray ${token} at ${at}: ${xml.slice(Math.max(0, at - 20), at + 20)}`);
    if (attributes !== undefined && BAD_AMPERSAND.test(attributes)) throw new Error(`bare & in the attributes of <${name}> at ${at}`);
    if (closedRoot) throw new Error(`<${slash}${name}> after the root element closed, at ${at}`);
    if (slash === '/') {
      const open = stack.pop();
      if (open !== name) throw new Error(`</${name}> at ${at} closes <${open ?? 'nothing'}>`);
      if (stack.length === 0) closedRoot = true;
    } else {
      root ??= name;
      if (selfClosing === '/') {
        if (stack.length === 0) closedRoot = true;
      } else stack.push(name);
    }
  }
  if (stack.length > 0) throw new Error(`unclosed <${stack.join('>, <')}>`);
  if (root === undefined) throw new Error('no element');
  return root;
}

describe('checkWellFormed (the test helper)', () => {
  it('accepts balanced tags and rejects unbalanced ones, stray < and bare &', () => {
    expect(checkWellFormed('<svg a="1"><g><rect/></g><text>a &amp; b</text></svg>')).toBe('svg');
    expect(() => checkWellFormed('<svg><g></svg>')).toThrow(/closes <g>/);
    expect(() => checkWellFormed('<svg><text>a < b</text></svg>')).toThrow(/stray </);
    expect(() => checkWellFormed('<svg><text>a & b</text></svg>')).toThrow(/bare &/);
    expect(() => checkWellFormed('<svg title="a & b"></svg>')).toThrow(/bare &/);
    expect(() => checkWellFormed('<svg></svg><svg></svg>')).toThrow(/after the root/);
  });
});

// ---------------------------------------------------------------------------------------------------
// Markdown

/** The table's lines split into trimmed cells (escaped pipes kept inside their cell). */
function tableCells(table: string): string[][] {
  return table.split('\n').map((line) =>
    line
      .slice(1, -1)
      .split(/(?<!\\)\|/)
      .map((cell) => cell.trim()),
  );
}

describe('renderMarkdownTable', () => {
  it('writes a header, an alignment rule and one row per scenario with its figures', () => {
    const rows = tableCells(renderMarkdownTable(FIXTURES));
    expect(rows).toHaveLength(4);
    expect(rows[0]).toEqual([
      'Scenario',
      'Backend',
      'Mode',
      'Instances',
      'Decisions',
      'Exceptions',
      'Unhandled rejections',
      'Fault p50 (ms)',
      'Fault p99 (ms)',
      'Fault max (ms)',
      'Time to open (ms)',
      'Time to close (ms)',
      'Max excess',
      'Calls over limit',
      'Checks',
    ]);
    expect(rows[1]).toEqual([
      ':---',
      ':---',
      ':---',
      '---:',
      '---:',
      '---:',
      '---:',
      '---:',
      '---:',
      '---:',
      '---:',
      '---:',
      '---:',
      '---:',
      ':---',
    ]);
    expect(rows[2]).toEqual([
      'Redis frozen \\<SIGSTOP> & thawed',
      'container',
      'local',
      '3',
      '3000',
      '0',
      '0',
      '0.50',
      '1.3',
      '25.1',
      '212',
      '640',
      '0',
      '0',
      '✅ pass',
    ]);
    expect(rows[3]).toEqual([
      'Latency 200 ms',
      'local',
      'fail-open',
      '2',
      '800',
      '0',
      '1',
      '0.043',
      '12.3',
      '250',
      '61',
      '—',
      '30',
      '120',
      '❌ fail (1 of 2)',
    ]);
  });

  it('shows no fault latency for a scenario that made no call during a fault, and no verdict without checks', () => {
    const quiet: ScenarioResult = {
      ...SLOW_FIXTURE,
      metrics: { ...SLOW_FIXTURE.metrics, faultLatency: { p50: 0, p99: 0, max: 0, count: 0 } },
      checks: [],
    };
    const [, , row] = tableCells(renderMarkdownTable([quiet]));
    expect(row?.slice(7, 10)).toEqual(['—', '—', '—']);
    expect(row?.at(-1)).toBe('—');
  });

  it('formats milliseconds with two significant digits below 1 ms', () => {
    expect([0, 0.0042, 0.043, 0.5, 0.999, 1.25, 99.94, 100.4, 1234.5].map(formatMs)).toEqual([
      '0',
      '0.0042',
      '0.043',
      '0.50',
      '1.00',
      '1.3',
      '99.9',
      '100',
      '1235',
    ]);
    expect(formatMs(undefined)).toBe('—');
  });
});

describe('renderMarkdownReport', () => {
  it('lists each failed check, with its detail, below the table and leaves passing checks out', () => {
    const md = renderMarkdownReport(FIXTURES, META);
    const lines = md.split('\n');
    expect(lines[0]).toBe('# resilimit chaos report');
    expect(md).toContain(
      'Backend **container** (auto: docker answered) · started 2025-01-01T00:00:00.000Z · Node v24.0.0 · linux x64, 8 CPUs',
    );
    const lastRow = lines.findIndex((l) => l.startsWith('| Latency 200 ms |'));
    const heading = lines.indexOf('## Failed checks (1 of 4)');
    expect(lastRow).toBeGreaterThan(0);
    expect(heading).toBeGreaterThan(lastRow);
    expect(lines.filter((l) => l.startsWith('|'))).toHaveLength(4);
    const items = lines.filter((l) => l.startsWith('- '));
    expect(items).toEqual([
      '- **Latency 200 ms** (`latency spike`): no unhandled rejections — 1 unhandled rejection: Error \\| connection reset',
    ]);
    expect(md).toContain('![Redis frozen \\<SIGSTOP> & thawed](redis-freeze.svg)');
    expect(md).toContain('![Latency 200 ms](latency-spike.svg)');
  });

  it('says all checks passed when none failed', () => {
    const md = renderMarkdownReport([FROZEN_FIXTURE], META);
    expect(md).toContain('All 2 checks passed.');
    expect(md).not.toContain('Failed checks');
  });
});

// ---------------------------------------------------------------------------------------------------
// SVG

function count(text: string, needle: string): number {
  return text.split(needle).length - 1;
}

describe('renderSvg', () => {
  it('writes one well-formed svg element for every fixture', () => {
    for (const fixture of FIXTURES) expect(checkWellFormed(renderSvg(fixture))).toBe('svg');
  });

  it('escapes the title and names the backend', () => {
    const svg = renderSvg(FROZEN_FIXTURE);
    expect(svg).toContain('<title>Redis frozen &lt;SIGSTOP&gt; &amp; thawed — container</title>');
    expect(svg).not.toContain('<SIGSTOP>');
  });

  it('shades each fault phase, labelled with its name, and only fault phases', () => {
    const svg = renderSvg(SLOW_FIXTURE);
    expect(count(svg, 'class="fault-band"')).toBe(1);
    expect(svg).toMatch(/class="phase-label"[^>]*>latency 200ms<\/text>/);
    expect(svg).not.toContain('>steady<');
    expect(renderSvg(FROZEN_FIXTURE)).toMatch(/class="phase-label"[^>]*>freeze<\/text>/);
  });

  it('has a legend entry for every decision source, the admitted line, the limit and each breaker state', () => {
    const svg = renderSvg(FROZEN_FIXTURE);
    for (const entry of [
      'redis',
      'local',
      'fail-open',
      'fail-closed',
      'disabled',
      'admitted/s',
      'limit',
      'fault',
      'closed',
      'half-open',
      'open',
    ]) {
      expect(svg, entry).toContain(`>${entry}</text>`);
    }
  });

  it('draws an area for each source that decided, the admitted line and the limit per second', () => {
    const svg = renderSvg(SLOW_FIXTURE);
    expect(count(svg, 'class="source source-redis"')).toBe(1);
    expect(count(svg, 'class="source source-fail-open"')).toBe(1);
    expect(svg).not.toContain('source-local');
    expect(count(svg, 'class="admitted"')).toBe(1);
    expect(svg).toContain('>limit 200/s (4 keys)</text>');
  });

  it('draws a rect per breaker state segment, closed before the first change', () => {
    const svg = renderSvg(FROZEN_FIXTURE);
    // #0: closed, open, half-open, open, half-open, open, half-open, closed = 8;
    // #1: closed, open, half-open, open, half-open, open, half-open, closed = 8; #2 never changed: closed = 1.
    expect(count(svg, 'class="state state-')).toBe(17);
    expect(count(svg, 'class="state state-closed"')).toBe(5);
    expect(count(svg, 'class="state state-open"')).toBe(6);
    expect(count(svg, 'class="state state-half-open"')).toBe(6);
    expect(svg).toContain('<title>instance 2: closed 0–20 s</title>');
    expect(svg).toContain('<title>instance 0: open 5.212–8.212 s</title>');
    // SLOW: each instance closed, then open until the end.
    const slow = renderSvg(SLOW_FIXTURE);
    expect(count(slow, 'class="state state-')).toBe(4);
    expect(slow).toContain('<title>instance 1: open 3.075–10 s</title>');
  });

  it('labels the time axis in seconds from the scenario start', () => {
    const svg = renderSvg(FROZEN_FIXTURE);
    for (const s of ['0', '5', '10', '15', '20']) expect(svg).toMatch(new RegExp(`text-anchor="middle" fill="#666666">${s}</text>`));
    expect(svg).toContain('>seconds since the scenario started</text>');
  });
});

// ---------------------------------------------------------------------------------------------------
// Files

describe('writeReport', () => {
  let temp: string | undefined;
  afterEach(async () => {
    if (temp !== undefined) await rm(temp, { recursive: true, force: true });
    temp = undefined;
  });

  it('creates the directory and writes report.json, report.md and an svg per scenario, returning their paths', async () => {
    temp = await mkdtemp(join(tmpdir(), 'resilimit-report-'));
    const dir = join(temp, 'nested', 'run');
    const paths = await writeReport(dir, FIXTURES, META);

    expect(paths).toEqual({
      json: join(dir, 'report.json'),
      markdown: join(dir, 'report.md'),
      svgs: [join(dir, 'redis-freeze.svg'), join(dir, 'latency-spike.svg')],
    });
    const json = JSON.parse(await readFile(paths.json, 'utf8')) as {
      meta: unknown;
      results: { name: string; metrics: { timeToCloseMs: unknown } }[];
    };
    expect(json.meta).toEqual(META);
    expect(json.results.map((r) => r.name)).toEqual(['redis-freeze', 'latency spike']);
    expect(json.results[1]?.metrics.timeToCloseMs).toBeNull();
    expect(await readFile(paths.markdown, 'utf8')).toBe(renderMarkdownReport(FIXTURES, META));
    for (const [i, path] of paths.svgs.entries()) expect(await readFile(path, 'utf8')).toBe(renderSvg(FIXTURES[i] ?? FROZEN_FIXTURE));
  });

  it('refuses two scenarios that would write the same svg, before writing anything', async () => {
    temp = await mkdtemp(join(tmpdir(), 'resilimit-report-'));
    const dir = join(temp, 'run');
    await expect(writeReport(dir, [SLOW_FIXTURE, { ...SLOW_FIXTURE, name: 'latency/spike' }], META)).rejects.toThrow(/latency-spike\.svg/);
    await expect(readFile(join(dir, 'report.json'))).rejects.toThrow(/ENOENT/);
  });

  it('names svg files after the scenario, safe for any file system', () => {
    expect(svgFileName('redis-freeze')).toBe('redis-freeze.svg');
    expect(svgFileName('../a b/c')).toBe('a-b-c.svg');
    expect(svgFileName('')).toBe('scenario.svg');
  });
});
