/**
 * The chaos suite's report: `report.json` (meta and every measured figure), `report.md` (one table
 * with a row per scenario, then the checks that failed) and one SVG timeline per scenario.
 *
 * The SVG is written by hand (no dependency, no script, no external font) so that it renders the same
 * in a browser, on GitHub and in `rsvg-convert`. The renderers are pure functions of a
 * `ScenarioResult`, so tests read their output without touching the disk.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { BreakerState, DecisionSource } from '../src/index.ts';
import type { Bucket, ScenarioResult } from './types.ts';

/** Where and on what the suite ran; printed under the report's title. */
export type ReportMeta = {
  /** The backend kind, e.g. `container`. */
  readonly backend: string;
  /** Why that backend was chosen, e.g. "auto: no container runtime answered". */
  readonly why: string;
  /** When the suite started, ISO 8601. */
  readonly startedAt: string;
  /** `process.version`. */
  readonly node: string;
  /** A one-line description of the machine (OS, CPU, cores). */
  readonly machine: string;
};

/** Paths of the files `writeReport` wrote, absolute. */
export type ReportPaths = { json: string; markdown: string; svgs: string[] };

// ---------------------------------------------------------------------------------------------------
// Formatting

const DASH = '—';

/**
 * A duration in ms for a table cell: two significant digits below 1 ms (`0.034`, `0.50`), at most one
 * decimal below 100 ms (`12.3`, `61`), whole ms above; `—` when there is no value.
 */
export function formatMs(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return DASH;
  const abs = Math.abs(ms);
  if (abs === 0) return '0';
  if (abs < 1) return ms.toFixed(Math.min(20, 1 - Math.floor(Math.log10(abs))));
  if (abs < 100) return String(Number(ms.toFixed(1)));
  return Math.round(ms).toString();
}

/** The file name of a scenario's SVG: its name with anything outside `[A-Za-z0-9._-]` made `-`. */
export function svgFileName(scenarioName: string): string {
  const safe = scenarioName.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+/, '');
  return `${safe === '' ? 'scenario' : safe}.svg`;
}

export function escapeXml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

/** Text for a Markdown table cell or list item: one line, pipes escaped, `<` kept from reading as HTML. */
function escapeCell(text: string): string {
  return text.replace(/\r?\n/g, ' ').replace(/([|<])/g, '\\$1');
}

// ---------------------------------------------------------------------------------------------------
// Markdown

const COLUMNS: readonly { readonly head: string; readonly align: 'left' | 'right'; readonly cell: (r: ScenarioResult) => string }[] = [
  { head: 'Scenario', align: 'left', cell: (r) => r.title },
  { head: 'Backend', align: 'left', cell: (r) => r.backend },
  { head: 'Mode', align: 'left', cell: (r) => r.mode },
  { head: 'Instances', align: 'right', cell: (r) => String(r.instances) },
  { head: 'Decisions', align: 'right', cell: (r) => String(r.metrics.decisions) },
  { head: 'Exceptions', align: 'right', cell: (r) => String(r.metrics.exceptions) },
  { head: 'Unhandled rejections', align: 'right', cell: (r) => String(r.metrics.unhandledRejections) },
  // No call was made during a fault (a scenario without one): no percentile to show.
  { head: 'Fault p50 (ms)', align: 'right', cell: (r) => faultLatency(r, 'p50') },
  { head: 'Fault p99 (ms)', align: 'right', cell: (r) => faultLatency(r, 'p99') },
  { head: 'Fault max (ms)', align: 'right', cell: (r) => faultLatency(r, 'max') },
  { head: 'Time to open (ms)', align: 'right', cell: (r) => formatMs(r.metrics.timeToOpenMs) },
  { head: 'Time to close (ms)', align: 'right', cell: (r) => formatMs(r.metrics.timeToCloseMs) },
  { head: 'Max excess', align: 'right', cell: (r) => String(r.metrics.overLimit.maxExcess) },
  { head: 'Calls over limit', align: 'right', cell: (r) => String(r.metrics.overLimit.callsOver) },
  { head: 'Checks', align: 'left', cell: (r) => checksMark(r) },
];

function faultLatency(result: ScenarioResult, which: 'p50' | 'p99' | 'max'): string {
  const latency = result.metrics.faultLatency;
  return latency.count === 0 ? DASH : formatMs(latency[which]);
}

/** `✅ pass`, `❌ fail (1 of 4)`, or `—` for a scenario that made no check (nothing was proven). */
function checksMark(result: ScenarioResult): string {
  const failed = result.checks.filter((c) => !c.pass).length;
  if (result.checks.length === 0) return DASH;
  return failed === 0 ? '✅ pass' : `❌ fail (${failed} of ${result.checks.length})`;
}

/** One Markdown table, a header and a row per scenario, in the order given. No trailing newline. */
export function renderMarkdownTable(results: readonly ScenarioResult[]): string {
  const row = (cells: readonly string[]): string => `| ${cells.map(escapeCell).join(' | ')} |`;
  const rule = `|${COLUMNS.map((c) => (c.align === 'right' ? ' ---: ' : ' :--- ')).join('|')}|`;
  return [row(COLUMNS.map((c) => c.head)), rule, ...results.map((r) => row(COLUMNS.map((c) => c.cell(r))))].join('\n');
}

/** The whole `report.md`: title, meta line, the table, the failed checks, links to the timelines. */
export function renderMarkdownReport(results: readonly ScenarioResult[], meta: ReportMeta): string {
  const failed = results.flatMap((r) => r.checks.filter((c) => !c.pass).map((c) => ({ scenario: r, check: c })));
  const checks = results.reduce((n, r) => n + r.checks.length, 0);
  const lines = [
    '# resilimit chaos report',
    '',
    `Backend **${escapeCell(meta.backend)}** (${escapeCell(meta.why)}) · started ${escapeCell(meta.startedAt)} · ` +
      `Node ${escapeCell(meta.node)} · ${escapeCell(meta.machine)}`,
    '',
    renderMarkdownTable(results),
    '',
  ];
  if (failed.length === 0) lines.push(`All ${checks} checks passed.`, '');
  else {
    lines.push(`## Failed checks (${failed.length} of ${checks})`, '');
    for (const { scenario, check } of failed) {
      lines.push(`- **${escapeCell(scenario.title)}** (\`${scenario.name}\`): ${escapeCell(check.name)} — ${escapeCell(check.detail)}`);
    }
    lines.push('');
  }
  if (results.length > 0) {
    lines.push('## Timelines', '');
    for (const r of results) lines.push(`![${escapeCell(r.title).replace(/[[\]]/g, '\\$&')}](${svgFileName(r.name)})`, '');
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------------
// SVG timeline

/** Stacking order (bottom first) and colour of each decision source; a `Record` so none is missed. */
export const SOURCE_COLOURS: Readonly<Record<DecisionSource, string>> = {
  redis: '#4e79a7',
  local: '#76b7b2',
  'fail-open': '#b07aa1',
  'fail-closed': '#9c755f',
  disabled: '#bab0ac',
};
const SOURCES = Object.keys(SOURCE_COLOURS) as DecisionSource[];

export const STATE_COLOURS: Readonly<Record<BreakerState, string>> = {
  closed: '#59a14f',
  'half-open': '#f1a93b',
  open: '#e15759',
};
const STATES = Object.keys(STATE_COLOURS) as BreakerState[];

export const FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";
const WIDTH = 900;
const PLOT_LEFT = 64;
const PLOT_RIGHT = WIDTH - 24;
const PLOT_TOP = 76;
const PLOT_BOTTOM = 246;
const FAULT_FILL = '#e15759';
const FAULT_TEXT = '#a8323a';
/** The palette both SVG charts (the suite's timelines, the demo) draw with. */
export const INK = '#222222';
export const MUTED = '#666666';
export const GRID = '#e6e6e6';
export const LIMIT = '#c0282d';

/** A coordinate for the SVG: at most one decimal. */
export function px(n: number): string {
  return String(Math.round(n * 10) / 10);
}

/** A step of 1, 2 or 5 × 10^k that cuts `range` into at most `maxTicks` pieces. */
export function niceStep(range: number, maxTicks: number): number {
  if (!(range > 0)) return 1;
  const raw = range / maxTicks;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * magnitude >= raw) return m * magnitude;
  return 10 * magnitude;
}

/** A tick label: no float noise (`0.30000000000000004`), thousands as `k`. */
export function tickLabel(value: number, step: number): string {
  const decimals = Math.max(0, -Math.floor(Math.log10(step)));
  if (Math.abs(value) >= 10_000 && step >= 1000) return `${Number((value / 1000).toFixed(decimals))}k`;
  return String(Number(value.toFixed(decimals)));
}

/** Rough text width at `size` px in a sans-serif, for laying out the legend. */
function textWidth(text: string, size: number): number {
  return text.length * size * 0.56;
}

type Segment = { readonly instance: number; readonly state: BreakerState; readonly fromMs: number; readonly toMs: number };

/**
 * Each instance's breaker state over `[0, endMs]` from its transitions: `closed` before the first,
 * zero-length spans dropped, neighbours in the same state merged.
 */
function stateSegments(result: ScenarioResult, instance: number, endMs: number): Segment[] {
  const changes = result.stateChanges.filter((c) => c.instance === instance).sort((a, b) => a.atMs - b.atMs);
  const segments: Segment[] = [];
  let state: BreakerState = 'closed';
  let fromMs = 0;
  const close = (toMs: number): void => {
    const to = Math.min(Math.max(toMs, fromMs), endMs);
    if (to <= fromMs) return;
    const last = segments.at(-1);
    if (last !== undefined && last.state === state && last.toMs === fromMs) segments[segments.length - 1] = { ...last, toMs: to };
    else segments.push({ instance, state, fromMs, toMs: to });
  };
  for (const change of changes) {
    close(change.atMs);
    state = change.state;
    fromMs = Math.min(Math.max(change.atMs, fromMs), endMs);
  }
  close(endMs);
  return segments;
}

/** Rows of the breaker strip: instances `0 … instances-1`, plus any other index a transition names. */
function instanceRows(result: ScenarioResult): number[] {
  const rows = new Set<number>();
  for (let i = 0; i < result.instances; i++) rows.add(i);
  for (const c of result.stateChanges) rows.add(c.instance);
  return [...rows].sort((a, b) => a - b);
}

/** Buckets in time order, split into runs without gaps, so each run draws as one outline. */
function bucketRuns(result: ScenarioResult): Bucket[][] {
  const sorted = [...result.timeline].sort((a, b) => a.atMs - b.atMs);
  const runs: Bucket[][] = [];
  let run: Bucket[] = [];
  for (const bucket of sorted) {
    const previous = run.at(-1);
    if (previous !== undefined && Math.abs(bucket.atMs - (previous.atMs + result.bucketMs)) > result.bucketMs * 1e-6) {
      runs.push(run);
      run = [];
    }
    run.push(bucket);
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

function timelineEndMs(result: ScenarioResult): number {
  let end = result.durationMs;
  for (const p of result.phases) end = Math.max(end, p.endMs);
  for (const b of result.timeline) end = Math.max(end, b.atMs + result.bucketMs);
  for (const c of result.stateChanges) end = Math.max(end, c.atMs);
  return end > 0 ? end : 1;
}

/**
 * One scenario's timeline as a standalone SVG (900 px wide, about 360 high; taller with many
 * instances): admitted calls per second over the decisions per second stacked by source, the limit
 * per second, fault phases shaded, and a strip with each instance's breaker state.
 */
export function renderSvg(result: ScenarioResult): string {
  const endMs = timelineEndMs(result);
  const x = (ms: number): number => PLOT_LEFT + (Math.min(Math.max(ms, 0), endMs) / endMs) * (PLOT_RIGHT - PLOT_LEFT);
  const perSecond = 1000 / result.bucketMs;
  // The limit applies per key: across the scenario's keys, `keys` times as many calls may pass.
  const limitPerSecond = (result.limit * result.keys * 1000) / result.windowMs;
  const runs = bucketRuns(result);

  let peak = limitPerSecond;
  for (const b of result.timeline) {
    const stacked = SOURCES.reduce((sum, s) => sum + b.bySource[s], 0);
    peak = Math.max(peak, stacked * perSecond, b.decisions * perSecond, b.admitted * perSecond);
  }
  // Headroom above the peak for the phase labels.
  const yStep = niceStep(peak * 1.15, 5);
  const yMax = Math.max(yStep, Math.ceil((peak * 1.15) / yStep) * yStep);
  const y = (perSec: number): number => PLOT_BOTTOM - (Math.min(Math.max(perSec, 0), yMax) / yMax) * (PLOT_BOTTOM - PLOT_TOP);

  const rows = instanceRows(result);
  const rowHeight = rows.length <= 4 ? 12 : Math.max(5, Math.min(12, 60 / rows.length));
  const rowGap = rowHeight >= 8 ? 3 : 1;
  const stripHeadY = PLOT_BOTTOM + 22;
  const stripTop = stripHeadY + 8;
  const stripBottom = stripTop + Math.max(1, rows.length) * (rowHeight + rowGap) - rowGap;
  const tickLabelY = stripBottom + 16;
  const height = Math.ceil(tickLabelY + 24);

  const title = `${result.title} — ${result.backend}`;
  const failed = result.checks.filter((c) => !c.pass).length;
  const verdict = result.checks.length === 0 ? 'no checks' : failed === 0 ? 'all checks passed' : `${failed} of ${result.checks.length} checks failed`;
  const subtitle =
    `${result.mode} mode · ${result.instances} instance${result.instances === 1 ? '' : 's'} · ` +
    `limit ${result.limit} per ${result.windowMs} ms · offered ${result.rate}/s · ` +
    `${result.keys} key${result.keys === 1 ? '' : 's'} · ${verdict}`;

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ` +
      `role="img" aria-label="${escapeXml(title)}" font-family="${escapeXml(FONT)}" font-size="11" fill="${INK}">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect class="background" x="0" y="0" width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="${PLOT_LEFT}" y="24" font-size="15" font-weight="600">${escapeXml(title)}</text>`,
    `<text x="${PLOT_LEFT}" y="41" fill="${MUTED}">${escapeXml(subtitle)}</text>`,
  );

  // Legend: decision sources, then the two lines and the fault band.
  {
    const legendY = 60;
    let lx = PLOT_LEFT;
    out.push(`<g class="legend">`);
    out.push(`<text x="${lx}" y="${legendY}" fill="${MUTED}">decisions/s by source:</text>`);
    lx += textWidth('decisions/s by source:', 11) + 10;
    for (const source of SOURCES) {
      out.push(
        `<rect x="${px(lx)}" y="${legendY - 9}" width="10" height="10" fill="${SOURCE_COLOURS[source]}"/>`,
        `<text x="${px(lx + 14)}" y="${legendY}">${escapeXml(source)}</text>`,
      );
      lx += 14 + textWidth(source, 11) + 14;
    }
    lx += 6;
    out.push(
      `<line x1="${px(lx)}" y1="${legendY - 4}" x2="${px(lx + 18)}" y2="${legendY - 4}" stroke="${INK}" stroke-width="2"/>`,
      `<text x="${px(lx + 22)}" y="${legendY}">admitted/s</text>`,
    );
    lx += 22 + textWidth('admitted/s', 11) + 14;
    out.push(
      `<line x1="${px(lx)}" y1="${legendY - 4}" x2="${px(lx + 18)}" y2="${legendY - 4}" stroke="${LIMIT}" stroke-width="1.6" stroke-dasharray="5 3"/>`,
      `<text x="${px(lx + 22)}" y="${legendY}">limit</text>`,
    );
    lx += 22 + textWidth('limit', 11) + 14;
    out.push(
      `<rect x="${px(lx)}" y="${legendY - 9}" width="10" height="10" fill="${FAULT_FILL}" fill-opacity="0.16" stroke="${FAULT_TEXT}" stroke-opacity="0.7" stroke-dasharray="3 2"/>`,
      `<text x="${px(lx + 14)}" y="${legendY}">fault</text>`,
    );
    out.push(`</g>`);
  }

  // Grid and axes.
  const xStepS = niceStep(endMs / 1000, 8);
  out.push(`<g class="grid" stroke="${GRID}" stroke-width="1">`);
  for (let v = yStep; v <= yMax + yStep * 1e-9; v += yStep) {
    out.push(`<line x1="${PLOT_LEFT}" y1="${px(y(v))}" x2="${PLOT_RIGHT}" y2="${px(y(v))}"/>`);
  }
  for (let s = 0; s * 1000 <= endMs + 1e-6; s += xStepS) {
    out.push(`<line x1="${px(x(s * 1000))}" y1="${PLOT_TOP}" x2="${px(x(s * 1000))}" y2="${px(stripBottom)}"/>`);
  }
  out.push(`</g>`);

  // Fault phases: bands behind the areas, so that the areas keep the legend's colours.
  const faults = result.phases.filter((p) => p.fault);
  out.push(`<g class="faults">`);
  for (const phase of faults) {
    const x0 = x(phase.startMs);
    out.push(
      `<rect class="fault-band" x="${px(x0)}" y="${PLOT_TOP}" width="${px(Math.max(1, x(phase.endMs) - x0))}" height="${PLOT_BOTTOM - PLOT_TOP}" ` +
        `fill="${FAULT_FILL}" fill-opacity="0.16"><title>${escapeXml(phase.name)}: ${formatSeconds(phase.startMs)}–${formatSeconds(phase.endMs)} s</title></rect>`,
    );
  }
  out.push(`</g>`);

  // Decisions per second by source, stacked as step areas (one outline per gap-free run of buckets).
  out.push(`<g class="sources" fill-opacity="0.9">`);
  for (const [index, source] of SOURCES.entries()) {
    const below = SOURCES.slice(0, index);
    const d: string[] = [];
    for (const run of runs) {
      if (run.every((b) => b.bySource[source] === 0)) continue;
      const base = run.map((b) => below.reduce((sum, s) => sum + b.bySource[s], 0) * perSecond);
      const top = run.map((b, i) => (base[i] ?? 0) + b.bySource[source] * perSecond);
      d.push(stepOutline(run, top, base, result.bucketMs, x, y));
    }
    if (d.length > 0) out.push(`<path class="source source-${source}" fill="${SOURCE_COLOURS[source]}" d="${d.join(' ')}"/>`);
  }
  out.push(`</g>`);

  // Fault phases, over the areas: their edges and names (the bands themselves are behind the areas).
  out.push(`<g class="fault-edges" stroke="${FAULT_TEXT}" stroke-opacity="0.7" stroke-dasharray="3 2">`);
  for (const phase of faults) {
    for (const edge of [phase.startMs, phase.endMs]) out.push(`<line x1="${px(x(edge))}" y1="${PLOT_TOP}" x2="${px(x(edge))}" y2="${PLOT_BOTTOM}"/>`);
  }
  out.push(`</g>`);
  for (const phase of faults) {
    const x0 = x(phase.startMs);
    const width = x(phase.endMs) - x0;
    const label = escapeXml(phase.name);
    // Centred when it fits in the band, else from the band's start.
    const anchor = textWidth(phase.name, 10) + 6 <= width ? `x="${px(x0 + width / 2)}" text-anchor="middle"` : `x="${px(x0 + 3)}"`;
    out.push(
      `<text class="phase-label" ${anchor} y="${PLOT_TOP + 13}" font-size="10" fill="${FAULT_TEXT}" ` +
        `stroke="#ffffff" stroke-width="3" stroke-opacity="0.8" paint-order="stroke" stroke-linejoin="round">${label}</text>`,
    );
  }

  // Admitted per second, and the limit per second.
  {
    const d = runs.map((run) => stepLine(run, run.map((b) => b.admitted * perSecond), result.bucketMs, x, y));
    if (d.length > 0) out.push(`<path class="admitted" fill="none" stroke="${INK}" stroke-width="1.8" stroke-linejoin="round" d="${d.join(' ')}"/>`);
    const ly = px(y(limitPerSecond));
    const limitText = `limit ${tickLabel(limitPerSecond, limitPerSecond % 1 === 0 ? 1 : 0.1)}/s (${result.keys} keys)`;
    out.push(
      `<line class="limit" x1="${PLOT_LEFT}" y1="${ly}" x2="${PLOT_RIGHT}" y2="${ly}" stroke="${LIMIT}" stroke-width="1.6" stroke-dasharray="6 4"/>`,
      `<text class="limit-label" x="${PLOT_RIGHT - 4}" y="${px(y(limitPerSecond) - 5)}" text-anchor="end" fill="${LIMIT}" ` +
        `stroke="#ffffff" stroke-width="3" paint-order="stroke" stroke-linejoin="round">${escapeXml(limitText)}</text>`,
    );
  }

  // Axes: y ticks and title, the plot's frame line, x ticks under the strip.
  out.push(`<g class="axes">`);
  out.push(`<line x1="${PLOT_LEFT}" y1="${PLOT_BOTTOM}" x2="${PLOT_RIGHT}" y2="${PLOT_BOTTOM}" stroke="${MUTED}"/>`);
  out.push(`<line x1="${PLOT_LEFT}" y1="${PLOT_TOP}" x2="${PLOT_LEFT}" y2="${PLOT_BOTTOM}" stroke="${MUTED}"/>`);
  for (let v = 0; v <= yMax + yStep * 1e-9; v += yStep) {
    out.push(
      `<line x1="${PLOT_LEFT - 4}" y1="${px(y(v))}" x2="${PLOT_LEFT}" y2="${px(y(v))}" stroke="${MUTED}"/>`,
      `<text x="${PLOT_LEFT - 7}" y="${px(y(v) + 4)}" text-anchor="end" fill="${MUTED}">${tickLabel(v, yStep)}</text>`,
    );
  }
  const yTitleY = (PLOT_TOP + PLOT_BOTTOM) / 2;
  out.push(`<text x="16" y="${px(yTitleY)}" transform="rotate(-90 16 ${px(yTitleY)})" text-anchor="middle" fill="${MUTED}">calls per second</text>`);
  for (let s = 0; s * 1000 <= endMs + 1e-6; s += xStepS) {
    const tx = px(x(s * 1000));
    out.push(
      `<line x1="${tx}" y1="${px(stripBottom)}" x2="${tx}" y2="${px(stripBottom + 4)}" stroke="${MUTED}"/>`,
      `<text x="${tx}" y="${px(tickLabelY)}" text-anchor="middle" fill="${MUTED}">${tickLabel(s, xStepS)}</text>`,
    );
  }
  out.push(
    `<text x="${PLOT_RIGHT}" y="${px(tickLabelY + 16)}" text-anchor="end" fill="${MUTED}">seconds since the scenario started</text>`,
  );
  out.push(`</g>`);

  // Breaker state strip: heading with its own legend, then a row per instance.
  out.push(`<g class="breaker">`);
  {
    let lx = PLOT_LEFT;
    out.push(`<text x="${lx}" y="${stripHeadY}" fill="${MUTED}">breaker state per instance:</text>`);
    lx += textWidth('breaker state per instance:', 11) + 10;
    for (const state of STATES) {
      out.push(
        `<rect class="legend-state" x="${px(lx)}" y="${stripHeadY - 9}" width="10" height="10" fill="${STATE_COLOURS[state]}"/>`,
        `<text x="${px(lx + 14)}" y="${stripHeadY}">${state}</text>`,
      );
      lx += 14 + textWidth(state, 11) + 14;
    }
  }
  for (const [rowIndex, instance] of rows.entries()) {
    const ry = stripTop + rowIndex * (rowHeight + rowGap);
    if (rowHeight >= 8 || rowIndex % Math.ceil(8 / rowHeight) === 0) {
      out.push(
        `<text x="${PLOT_LEFT - 7}" y="${px(ry + rowHeight / 2 + 3.5)}" text-anchor="end" font-size="${rowHeight >= 8 ? 10 : 8}" fill="${MUTED}">#${instance}</text>`,
      );
    }
    for (const seg of stateSegments(result, instance, endMs)) {
      const sx = x(seg.fromMs);
      // At least a pixel wide, so that a breaker open for a moment still shows.
      const width = Math.max(1, x(seg.toMs) - sx);
      out.push(
        `<rect class="state state-${seg.state}" x="${px(sx)}" y="${px(ry)}" width="${px(width)}" height="${px(rowHeight)}" fill="${STATE_COLOURS[seg.state]}">` +
          `<title>instance ${instance}: ${seg.state} ${formatSeconds(seg.fromMs)}–${formatSeconds(seg.toMs)} s</title></rect>`,
      );
    }
  }
  out.push(`</g>`);

  out.push(`</svg>`, '');
  return out.join('\n');
}

function formatSeconds(ms: number): string {
  return String(Math.round(ms) / 1000);
}

type Scale = (value: number) => number;

/** The closed outline between two step functions over a gap-free run of buckets: `top` left to right, `base` back. */
function stepOutline(run: readonly Bucket[], top: readonly number[], base: readonly number[], bucketMs: number, x: Scale, y: Scale): string {
  const start = (i: number): number => x(run[i]?.atMs ?? 0);
  const end = (i: number): number => x((run[i]?.atMs ?? 0) + bucketMs);
  const parts = [`M${px(start(0))} ${px(y(top[0] ?? 0))}`];
  for (let i = 0; i < run.length; i++) {
    parts.push(`H${px(end(i))}`);
    if (i + 1 < run.length) parts.push(`V${px(y(top[i + 1] ?? 0))}`);
  }
  parts.push(`V${px(y(base[run.length - 1] ?? 0))}`);
  for (let i = run.length - 1; i >= 0; i--) {
    parts.push(`H${px(start(i))}`);
    if (i > 0) parts.push(`V${px(y(base[i - 1] ?? 0))}`);
  }
  parts.push('Z');
  return parts.join('');
}

/** A step line over a gap-free run of buckets. */
function stepLine(run: readonly Bucket[], values: readonly number[], bucketMs: number, x: Scale, y: Scale): string {
  const parts = [`M${px(x(run[0]?.atMs ?? 0))} ${px(y(values[0] ?? 0))}`];
  for (let i = 0; i < run.length; i++) {
    parts.push(`H${px(x((run[i]?.atMs ?? 0) + bucketMs))}`);
    if (i + 1 < run.length) parts.push(`V${px(y(values[i + 1] ?? 0))}`);
  }
  return parts.join('');
}

// ---------------------------------------------------------------------------------------------------
// Files

/** `report.json` keeps absent figures (a breaker that never opened) as `null` rather than dropping them. */
function nullForUndefined(_key: string, value: unknown): unknown {
  return value === undefined ? null : value;
}

/**
 * Writes the report into `dir` (created if missing): `report.json`, `report.md` and
 * `<scenario name>.svg` per scenario. Returns the absolute paths written.
 *
 * @throws Error when two scenarios would write the same SVG file (names must be unique).
 */
export async function writeReport(dir: string, results: readonly ScenarioResult[], meta: ReportMeta): Promise<ReportPaths> {
  const svgNames = results.map((r) => svgFileName(r.name));
  const duplicate = svgNames.find((name, i) => svgNames.indexOf(name) !== i);
  if (duplicate !== undefined) throw new Error(`Expected unique scenario names, got two that write \`${duplicate}\``);

  const root = resolve(dir);
  await mkdir(root, { recursive: true });
  const json = resolve(root, 'report.json');
  const markdown = resolve(root, 'report.md');
  const timelines = results.map((r) => ({ path: resolve(root, svgFileName(r.name)), result: r }));
  await Promise.all([
    writeFile(json, `${JSON.stringify({ meta, results }, nullForUndefined, 2)}\n`),
    writeFile(markdown, renderMarkdownReport(results, meta)),
    ...timelines.map((t) => writeFile(t.path, renderSvg(t.result))),
  ]);
  return { json, markdown, svgs: timelines.map((t) => t.path) };
}
