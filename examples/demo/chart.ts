/**
 * demo.svg: admitted calls per second against the limit, stacked by the tier that admitted them,
 * with the offered load, the four phases shaded and labelled, and a strip per instance with its
 * breaker's state. Drawn from the same parts as the chaos suite's timelines (`../svg.ts`); a pure
 * function of the report.
 */
import type { DecisionSource } from '../../src/index.ts';
import {
  axes,
  breakerStrip,
  documentHead,
  escapeXml,
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
  timeScale,
  type Scale,
} from '../../chaos/svg.ts';
import type { PhaseName } from './script.ts';
import type { DemoReport } from './types.ts';

const PLOT_BOTTOM = 286;
const OFFERED = '#8a8a8a';
const PHASE_FILL: Readonly<Record<PhaseName, { fill: string; opacity: number; text: string }>> = {
  healthy: { fill: '#59a14f', opacity: 0.05, text: '#3b6e34' },
  slow: { fill: '#f1a93b', opacity: 0.2, text: '#8a5a0b' },
  down: { fill: '#e15759', opacity: 0.18, text: '#a8323a' },
  back: { fill: '#59a14f', opacity: 0.1, text: '#3b6e34' },
};
/** The tiers that can admit a call, bottom first; `disabled` never occurs in the demo. */
const ADMITTING: readonly DecisionSource[] = ['redis', 'local', 'fail-open'];
const ADMITTED_BY: Readonly<Record<string, string>> = { redis: 'Redis', local: 'local window', 'fail-open': 'fail-open' };

/** The chart of one run. */
export function renderDemoSvg(report: DemoReport): string {
  const { options, seconds, phases, summary } = report;
  const endMs = Math.max(1000, seconds.length * 1000, ...phases.map((p) => p.endMs));
  const x = timeScale(endMs);
  const rate = rateScale(
    Math.max(options.limit, options.offeredPerSecond, ...seconds.map((s) => Math.max(s.admitted, s.offered))),
    6,
    PLOT_BOTTOM,
  );
  const y = rate.y;
  const rows = Array.from({ length: options.instances }, (_, i) => i);
  const strip = stripLayout(PLOT_BOTTOM, rows.length);
  const frame = {
    bottom: PLOT_BOTTOM,
    stripBottom: strip.bottom,
    x,
    endMs,
    xStepS: niceStep(endMs / 1000, 12),
    rate,
    timeTitle: 'seconds since the load started',
  };

  const title = `resilimit demo — ${options.instances} instance${options.instances === 1 ? '' : 's'} share one limit of ${options.limit}/s, mode ${options.mode}`;
  const subtitle =
    `${report.backend.kind} backend · offered ${options.offeredPerSecond}/s · most admitted in any 1 s: ${summary.maxAdmittedIn1s} ` +
    `(limit ${options.limit}) · calls over the limit: ${summary.callsOverLimit}${report.interrupted ? ' · interrupted' : ''}`;
  const legend = new Legend(PLOT_LEFT, 60, 'admitted/s by:');
  // Only the tiers that admitted something (Redis always): the mode decides which fallback can.
  for (const source of ADMITTING.filter((a) => a === 'redis' || seconds.some((s) => s.admittedBy[a] > 0))) {
    legend.swatch(ADMITTED_BY[source] ?? source, SOURCE_COLOURS[source]);
  }
  legend.line('offered/s', OFFERED, 1.6, ' stroke-dasharray="2 3"').line('limit', LIMIT, 1.6, ' stroke-dasharray="6 4"');

  const out = [
    ...documentHead(strip.chartHeight, title, subtitle),
    `<g class="legend">`,
    ...legend.lines,
    `</g>`,
    `<g class="phases">`,
    ...phases.map((phase) => {
      const style = PHASE_FILL[phase.name];
      return (
        `<rect class="phase-band phase-${phase.name}" x="${px(x(phase.startMs))}" y="${PLOT_TOP}" width="${px(x(phase.endMs) - x(phase.startMs))}" ` +
        `height="${PLOT_BOTTOM - PLOT_TOP}" fill="${style.fill}" fill-opacity="${style.opacity}"><title>${escapeXml(phase.description)}</title></rect>`
      );
    }),
    `</g>`,
    ...grid(frame, false),
    ...admittedBars(report, x, y),
  ];
  if (seconds.length > 0) {
    const starts = seconds.map((s) => s.second * 1000);
    out.push(
      `<path class="offered" fill="none" stroke="${OFFERED}" stroke-width="1.4" stroke-dasharray="2 3" d="${stepLine(
        starts,
        seconds.map((s) => s.offered),
        1000,
        x,
        y,
      )}"/>`,
      `<path class="admitted" fill="none" stroke="${INK}" stroke-width="1.8" stroke-linejoin="round" d="${stepLine(
        starts,
        seconds.map((s) => s.admitted),
        1000,
        x,
        y,
      )}"/>`,
    );
  }
  out.push(
    ...limitLine(y(options.limit), `limit ${options.limit}/s`),
    // Over everything in the plot.
    ...phases.map((phase) =>
      phaseLabel(phase.label, x(phase.startMs), x(phase.endMs), PLOT_TOP + 14, PHASE_FILL[phase.name].text, 11, true),
    ),
    ...axes(frame),
    ...breakerStrip(strip, rows, report.stateChanges, Math.min(endMs, report.ranMs), x),
    `</svg>`,
    '',
  );
  return out.join('\n');
}

/** Admitted calls of each second, stacked by the tier that admitted them. */
function admittedBars({ seconds }: DemoReport, x: Scale, y: Scale): string[] {
  const out = [`<g class="admitted-by" fill-opacity="0.85" shape-rendering="crispEdges">`];
  for (const s of seconds) {
    let base = 0;
    for (const source of ADMITTING) {
      const n = s.admittedBy[source];
      if (n <= 0) continue;
      out.push(
        `<rect class="admitted-${source}" x="${px(x(s.second * 1000))}" y="${px(y(base + n))}" width="${px(x(1000) - x(0))}" ` +
          `height="${px(y(base) - y(base + n))}" fill="${SOURCE_COLOURS[source]}"/>`,
      );
      base += n;
    }
  }
  out.push(`</g>`);
  return out;
}
