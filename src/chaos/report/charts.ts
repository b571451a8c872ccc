/**
 * A scenario's three charts for the HTML report, stacked on one time axis: admitted calls in the
 * window against the limit, decision latency against the breaker's deadline and the latency budget,
 * and each instance's breaker state. Pure functions of the report; colours from the page's classes.
 */
import type { BreakerState } from '../../redis/Breaker.js';
import type { ChaosPhase, ChaosReport, ScenarioOutcome, ScenarioSeries } from '../types.js';
import { duration } from './format.js';
import {
  escapeHtml,
  type Frame,
  legend,
  levelLine,
  niceStep,
  PLOT_LEFT,
  px,
  type Scale,
  stepPath,
  svgOpen,
  tickLabel,
  timeAxis,
  timeScale,
  valueAxis,
} from './svg.js';

const PLOT_TOP = 34;
const PLOT_HEIGHT = 150;
/** Under a plot: the time ticks, their labels and the axis's title. */
const AXIS_ROOM = 40;
const ROW_HEIGHT = 14;
const ROW_GAP = 4;
const STATES: readonly BreakerState[] = ['closed', 'half-open', 'open'];

/** How long the charts' time axis runs: the scenario, its phases, its series and transitions, whichever ends last. */
function endOf(outcome: ScenarioOutcome, series: ScenarioSeries): number {
  let end = outcome.durationMs;
  for (const p of outcome.phases) end = Math.max(end, p.endMs);
  const steps = Math.max(series.admittedInWindow.length, series.latencyP99.length, series.latencyMax.length);
  end = Math.max(end, steps * series.stepMs);
  for (const t of series.breaker) end = Math.max(end, t.atMs);
  return end > 0 ? end : 1;
}

function faults(outcome: ScenarioOutcome): ChaosPhase[] {
  return outcome.phases.filter((p) => p.fault);
}

/** The fault phases shaded over a plot, each with its name and span as a tooltip. */
function faultBands(phases: readonly ChaosPhase[], { top, bottom, x }: Frame): string {
  return phases
    .map((p) => {
      const x0 = x(p.startMs);
      return (
        `<rect class="fault" x="${px(x0)}" y="${top}" width="${px(Math.max(1, x(p.endMs) - x0))}" height="${bottom - top}">` +
        `<title>${escapeHtml(`${p.name}: ${duration(p.startMs)} to ${duration(p.endMs)}`)}</title></rect>`
      );
    })
    .join('');
}

/** The fault phases' edges as dashed lines over a plot (where a band would hide what it covers). */
function faultEdges(phases: readonly ChaosPhase[], { top, bottom, x }: Frame): string {
  return phases
    .flatMap((p) => [p.startMs, p.endMs])
    .map((ms) => `<line class="fault-edge" x1="${px(x(ms))}" y1="${top}" x2="${px(x(ms))}" y2="${bottom}"/>`)
    .join('');
}

function finite(values: readonly number[]): number[] {
  return values.filter((v) => typeof v === 'number' && Number.isFinite(v));
}

/** (a) The most admitted in the window, per step, against the limit and 1.1 × the limit; faults shaded. */
export function admittedChart(outcome: ScenarioOutcome, series: ScenarioSeries, windowMs: number, endMs: number): string {
  const frame: Frame = { top: PLOT_TOP, bottom: PLOT_TOP + PLOT_HEIGHT, x: timeScale(endMs), endMs };
  const peak = Math.max(series.limit * 1.1, ...finite(series.admittedInWindow), 1) * 1.12;
  const step = niceStep(peak, 5);
  const max = Math.ceil(peak / step) * step;
  const y: Scale = (v) => frame.bottom - (Math.min(Math.max(v, 0), max) / max) * PLOT_HEIGHT;
  const ticks: [number, string][] = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) ticks.push([v, tickLabel(v)]);
  const title = `${outcome.title}: admitted in the window against the limit`;
  const description =
    `The most calls admitted in any window of ${duration(windowMs)} for the busiest key, all instances, per step of ` +
    `${duration(series.stepMs)}, against the key's limit of ${series.limit} and 1.1 times it; fault phases shaded.`;
  return [
    svgOpen('admitted-chart', frame.bottom + AXIS_ROOM, title, description),
    legend('admitted in the window, busiest key:', [
      { label: 'admitted', className: 'admitted', kind: 'line' },
      { label: 'limit', className: 'limit', kind: 'line' },
      { label: '1.1× limit', className: 'limit-110', kind: 'line' },
      { label: 'fault', className: 'fault', kind: 'swatch' },
    ]),
    faultBands(faults(outcome), frame),
    valueAxis(frame, ticks, y, 'calls in the window'),
    timeAxis(frame),
    `<path class="admitted" d="${stepPath(series.admittedInWindow, series.stepMs, frame.x, y)}"/>`,
    levelLine('limit', y(series.limit), `limit ${series.limit}`),
    levelLine('limit-110', y(series.limit * 1.1), `1.1× ${tickLabel(series.limit * 1.1)}`, 'left'),
    '</svg>',
  ].join('\n');
}

/** A log scale over whole decades around `values`, from at least 0.01 ms. */
function logScale(values: readonly number[], frame: Frame): { readonly y: Scale; readonly ticks: [number, string][] } {
  const positive = values.filter((v) => v > 0 && Number.isFinite(v));
  const lo = Math.max(-2, Math.floor(Math.log10(Math.min(...positive, 1))));
  const hi = Math.max(lo + 1, Math.ceil(Math.log10(Math.max(...positive, 1))));
  const y: Scale = (v) => {
    const exponent = Math.min(Math.max(Math.log10(Math.max(v, 10 ** lo)), lo), hi);
    return frame.bottom - ((exponent - lo) / (hi - lo)) * (frame.bottom - frame.top);
  };
  const ticks: [number, string][] = [];
  for (let e = lo; e <= hi; e++) ticks.push([10 ** e, tickLabel(10 ** e)]);
  return { y, ticks };
}

/** (b) Decision latency per step, p99 and max, on a log scale, against the breaker's deadline and the latency budget. */
export function latencyChart(outcome: ScenarioOutcome, series: ScenarioSeries, report: ChaosReport, endMs: number): string {
  const frame: Frame = { top: PLOT_TOP, bottom: PLOT_TOP + PLOT_HEIGHT, x: timeScale(endMs), endMs };
  const deadline = report.limiter.timeoutMs;
  const budget = report.latencyBudgetMs;
  const { y, ticks } = logScale([...finite(series.latencyP99), ...finite(series.latencyMax), deadline, budget], frame);
  const title = `${outcome.title}: decision latency against the deadline and the budget`;
  const description =
    `The 99th percentile and the slowest decision per step of ${duration(series.stepMs)}, in ms on a log scale, against ` +
    `the breaker's deadline of ${duration(deadline)} and the latency budget of ${duration(budget)}; fault phases shaded.`;
  return [
    svgOpen('latency-chart', frame.bottom + AXIS_ROOM, title, description),
    legend('decision latency:', [
      { label: 'p99', className: 'p99', kind: 'line' },
      { label: 'max', className: 'latency-max', kind: 'line' },
      { label: 'deadline', className: 'deadline', kind: 'line' },
      { label: 'budget', className: 'budget', kind: 'line' },
      { label: 'fault', className: 'fault', kind: 'swatch' },
    ]),
    faultBands(faults(outcome), frame),
    valueAxis(frame, ticks, y, 'ms (log scale)'),
    timeAxis(frame),
    `<path class="latency-max" d="${stepPath(series.latencyMax, series.stepMs, frame.x, y)}"/>`,
    `<path class="p99" d="${stepPath(series.latencyP99, series.stepMs, frame.x, y)}"/>`,
    levelLine('deadline', y(deadline), `deadline ${duration(deadline)}`),
    levelLine('budget', y(budget), `budget ${duration(budget)}`, 'left'),
    '</svg>',
  ].join('\n');
}

type Segment = { readonly state: BreakerState; readonly fromMs: number; readonly toMs: number };

/** One breaker's states over `[0, endMs]` from its transitions in any order: `closed` before the first; empty spans dropped. */
export function breakerSegments(transitions: ScenarioSeries['breaker'], endMs: number): Segment[] {
  const segments: Segment[] = [];
  let state: BreakerState = 'closed';
  let fromMs = 0;
  for (const t of [...transitions].sort((a, b) => a.atMs - b.atMs)) {
    const toMs = Math.min(Math.max(t.atMs, fromMs), endMs);
    if (toMs > fromMs) segments.push({ state, fromMs, toMs });
    state = t.state;
    fromMs = toMs;
  }
  if (endMs > fromMs) segments.push({ state, fromMs, toMs: endMs });
  return segments;
}

/** Rows of the strip chart: instances `0 … instances-1`, and any other a transition names. */
function instanceRows(outcome: ScenarioOutcome, series: ScenarioSeries): number[] {
  const rows = new Set<number>();
  for (let i = 0; i < outcome.instances; i++) rows.add(i);
  for (const t of series.breaker) rows.add(t.instance);
  return [...rows].sort((a, b) => a - b);
}

/** (c) Each instance's breaker state over time, a strip per instance; fault edges dashed over them. */
export function breakerChart(outcome: ScenarioOutcome, series: ScenarioSeries, endMs: number): string {
  const rows = instanceRows(outcome, series);
  const bottom = PLOT_TOP + Math.max(1, rows.length) * (ROW_HEIGHT + ROW_GAP) + ROW_GAP;
  const frame: Frame = { top: PLOT_TOP, bottom, x: timeScale(endMs), endMs };
  const strips = rows.flatMap((instance, row) => {
    const top = PLOT_TOP + ROW_GAP + row * (ROW_HEIGHT + ROW_GAP);
    const label = `<text class="muted" x="${PLOT_LEFT - 7}" y="${px(top + ROW_HEIGHT - 3)}" text-anchor="end">#${instance}</text>`;
    const segments = breakerSegments(
      series.breaker.filter((t) => t.instance === instance),
      endMs,
    ).map((s) => {
      const x0 = frame.x(s.fromMs);
      const span = `instance ${instance}: ${s.state} from ${duration(s.fromMs)} to ${duration(s.toMs)}`;
      return `<rect class="state-${s.state}" x="${px(x0)}" y="${top}" width="${px(Math.max(1, frame.x(s.toMs) - x0))}" height="${ROW_HEIGHT}"><title>${escapeHtml(span)}</title></rect>`;
    });
    return [label, ...segments];
  });
  const title = `${outcome.title}: breaker state per instance`;
  const description = `Each instance's circuit breaker over time, a strip per instance: closed, half-open or open; fault phases' edges dashed.`;
  const middle = px((PLOT_TOP + bottom) / 2);
  return [
    svgOpen('breaker-chart', bottom + AXIS_ROOM, title, description),
    legend(
      'breaker state per instance:',
      STATES.map((state) => ({ label: state, className: `state-${state}`, kind: 'swatch' }) as const),
    ),
    timeAxis(frame),
    `<text class="muted" x="16" y="${middle}" transform="rotate(-90 16 ${middle})" text-anchor="middle">instance</text>`,
    `<line class="frame" x1="${PLOT_LEFT}" y1="${PLOT_TOP}" x2="${PLOT_LEFT}" y2="${bottom}"/>`,
    ...strips,
    faultEdges(faults(outcome), frame),
    '</svg>',
  ].join('\n');
}

/** The three charts of a scenario that ran, on one time axis; an empty string without series. */
export function scenarioCharts(outcome: ScenarioOutcome, report: ChaosReport): string {
  const series = outcome.series;
  if (series === undefined) return '';
  const endMs = endOf(outcome, series);
  return [
    admittedChart(outcome, series, report.limiter.windowMs, endMs),
    latencyChart(outcome, series, report, endMs),
    breakerChart(outcome, series, endMs),
  ].join('\n');
}
