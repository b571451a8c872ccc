/**
 * One scenario's timeline as a standalone SVG, a pure function of its `ScenarioResult`: decisions
 * per second stacked by source, admitted calls per second against the limit, fault phases shaded,
 * and a strip with each instance's breaker state.
 */
import type { DecisionSource } from '../src/index.ts';
import {
  axes,
  breakerStrip,
  documentHead,
  escapeXml,
  formatSeconds,
  grid,
  INK,
  Legend,
  LIMIT,
  limitLine,
  niceStep,
  phaseLabel,
  PLOT_LEFT,
  PLOT_TOP,
  px,
  rateScale,
  SOURCE_COLOURS,
  stepLine,
  stripLayout,
  tickLabel,
  timeScale,
  type Scale,
} from './svg.ts';
import type { Bucket, ScenarioResult } from './types.ts';

const SOURCES = Object.keys(SOURCE_COLOURS) as DecisionSource[];
const PLOT_BOTTOM = 246;
const FAULT_FILL = '#e15759';
const FAULT_TEXT = '#a8323a';

/**
 * The timeline, 900 px wide and about 360 high (taller with many instances). The limit drawn is per
 * second across the scenario's keys: the limit applies per key, so `keys` times as many calls may pass.
 */
export function renderSvg(result: ScenarioResult): string {
  const endMs = timelineEndMs(result);
  const x = timeScale(endMs);
  const perSecond = 1000 / result.bucketMs;
  const limitPerSecond = (result.limit * result.keys * 1000) / result.windowMs;
  const runs = bucketRuns(result);
  let peak = limitPerSecond;
  for (const b of result.timeline) {
    const stacked = SOURCES.reduce((sum, s) => sum + b.bySource[s], 0);
    peak = Math.max(peak, stacked * perSecond, b.decisions * perSecond, b.admitted * perSecond);
  }
  const rate = rateScale(peak, 5, PLOT_BOTTOM);
  const y = rate.y;
  const rows = instanceRows(result);
  const strip = stripLayout(PLOT_BOTTOM, rows.length);
  const frame = {
    bottom: PLOT_BOTTOM,
    stripBottom: strip.bottom,
    x,
    endMs,
    xStepS: niceStep(endMs / 1000, 8),
    rate,
    timeTitle: 'seconds since the scenario started',
  };

  const legend = new Legend(PLOT_LEFT, 60, 'decisions/s by source:');
  for (const source of SOURCES) legend.swatch(source, SOURCE_COLOURS[source]);
  legend
    .gap(6)
    .line('admitted/s', INK, 2)
    .line('limit', LIMIT, 1.6, ' stroke-dasharray="5 3"')
    .swatch('fault', FAULT_FILL, ` fill-opacity="0.16" stroke="${FAULT_TEXT}" stroke-opacity="0.7" stroke-dasharray="3 2"`);

  const faults = result.phases.filter((p) => p.fault);
  const out = [
    ...documentHead(strip.chartHeight, `${result.title} — ${result.backend}`, subtitle(result)),
    `<g class="legend">`,
    ...legend.lines,
    `</g>`,
    ...grid(frame, true),
    // Fault bands behind the areas, so that the areas keep the legend's colours; their edges and names over them.
    `<g class="faults">`,
    ...faults.map((phase) => {
      const x0 = x(phase.startMs);
      return (
        `<rect class="fault-band" x="${px(x0)}" y="${PLOT_TOP}" width="${px(Math.max(1, x(phase.endMs) - x0))}" height="${PLOT_BOTTOM - PLOT_TOP}" ` +
        `fill="${FAULT_FILL}" fill-opacity="0.16"><title>${escapeXml(phase.name)}: ${formatSeconds(phase.startMs)}–${formatSeconds(phase.endMs)} s</title></rect>`
      );
    }),
    `</g>`,
    ...sourceAreas(result, runs, x, y),
    `<g class="fault-edges" stroke="${FAULT_TEXT}" stroke-opacity="0.7" stroke-dasharray="3 2">`,
    ...faults.flatMap((phase) =>
      [phase.startMs, phase.endMs].map((edge) => `<line x1="${px(x(edge))}" y1="${PLOT_TOP}" x2="${px(x(edge))}" y2="${PLOT_BOTTOM}"/>`),
    ),
    `</g>`,
    ...faults.map((phase) => phaseLabel(phase.name, x(phase.startMs), x(phase.endMs), PLOT_TOP + 13, FAULT_TEXT, 10)),
  ];
  const admitted = runs.map((run) =>
    stepLine(
      run.map((b) => b.atMs),
      run.map((b) => b.admitted * perSecond),
      result.bucketMs,
      x,
      y,
    ),
  );
  if (admitted.length > 0)
    out.push(`<path class="admitted" fill="none" stroke="${INK}" stroke-width="1.8" stroke-linejoin="round" d="${admitted.join(' ')}"/>`);
  out.push(
    ...limitLine(y(limitPerSecond), `limit ${tickLabel(limitPerSecond, limitPerSecond % 1 === 0 ? 1 : 0.1)}/s (${result.keys} keys)`),
    ...axes(frame),
    ...breakerStrip(strip, rows, result.stateChanges, endMs, x),
    `</svg>`,
    '',
  );
  return out.join('\n');
}

function subtitle(result: ScenarioResult): string {
  const failed = result.checks.filter((c) => !c.pass).length;
  const verdict =
    result.checks.length === 0 ? 'no checks' : failed === 0 ? 'all checks passed' : `${failed} of ${result.checks.length} checks failed`;
  return (
    `${result.mode} mode · ${result.instances} instance${result.instances === 1 ? '' : 's'} · ` +
    `limit ${result.limit} per ${result.windowMs} ms · offered ${result.rate}/s · ` +
    `${result.keys} key${result.keys === 1 ? '' : 's'} · ${verdict}`
  );
}

/** Decisions per second by source, stacked as step areas (one outline per gap-free run of buckets). */
function sourceAreas(result: ScenarioResult, runs: readonly Bucket[][], x: Scale, y: Scale): string[] {
  const perSecond = 1000 / result.bucketMs;
  const out = [`<g class="sources" fill-opacity="0.9">`];
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
  return out;
}

/** The closed outline between two step functions over a gap-free run of buckets: `top` left to right, `base` back. */
function stepOutline(
  run: readonly Bucket[],
  top: readonly number[],
  base: readonly number[],
  bucketMs: number,
  x: Scale,
  y: Scale,
): string {
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
