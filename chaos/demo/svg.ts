/**
 * demo.svg: admitted calls per second against the limit, stacked by the tier that admitted them,
 * with the offered load, the four phases shaded and labelled, and a strip per instance with its
 * breaker's state. Written by hand like the chaos report's timelines (no script, no external font),
 * with its helpers; a pure function of the report.
 */
import type { BreakerState, DecisionSource } from '../../src/index.ts';
import { escapeXml, FONT, GRID, INK, LIMIT, MUTED, niceStep, px, SOURCE_COLOURS, STATE_COLOURS, tickLabel } from '../report.ts';
import type { DemoReport } from './report.ts';
import type { PhaseName } from './script.ts';

const WIDTH = 900;
const LEFT = 64;
const RIGHT = WIDTH - 24;
const TOP = 76;
const BOTTOM = 286;
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
const STATES: readonly BreakerState[] = ['closed', 'half-open', 'open'];

/** The chart of one run. */
export function renderDemoSvg(report: DemoReport): string {
  const { options, seconds, phases, summary } = report;
  const endMs = Math.max(1000, seconds.length * 1000, ...phases.map((p) => p.endMs));
  const x = (ms: number): number => LEFT + (Math.min(Math.max(ms, 0), endMs) / endMs) * (RIGHT - LEFT);
  const peak = Math.max(options.limit, options.offeredPerSecond, ...seconds.map((s) => Math.max(s.admitted, s.offered)));
  // Headroom above the peak for the phase labels.
  const yStep = niceStep(peak * 1.15, 6);
  const yMax = Math.max(yStep, Math.ceil((peak * 1.15) / yStep) * yStep);
  const y = (v: number): number => BOTTOM - (Math.min(Math.max(v, 0), yMax) / yMax) * (BOTTOM - TOP);
  const rowHeight = options.instances <= 4 ? 12 : Math.max(4, Math.min(12, 64 / options.instances));
  const stripHead = BOTTOM + 24;
  const stripTop = stripHead + 8;
  const stripBottom = stripTop + options.instances * (rowHeight + 2) - 2;
  const ticksY = stripBottom + 16;
  const height = Math.ceil(ticksY + 24);

  const title = `resilimit demo — ${options.instances} instance${options.instances === 1 ? '' : 's'} share one limit of ${options.limit}/s, mode ${options.mode}`;
  const subtitle =
    `${report.backend.kind} backend · offered ${options.offeredPerSecond}/s · most admitted in any 1 s: ${summary.maxAdmittedIn1s} ` +
    `(limit ${options.limit}) · calls over the limit: ${summary.callsOverLimit}${report.interrupted ? ' · interrupted' : ''}`;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ` +
      `role="img" aria-label="${escapeXml(title)}" font-family="${escapeXml(FONT)}" font-size="11" fill="${INK}">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect x="0" y="0" width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="${LEFT}" y="24" font-size="15" font-weight="600">${escapeXml(title)}</text>`,
    `<text x="${LEFT}" y="41" fill="${MUTED}">${escapeXml(subtitle)}</text>`,
  ];

  // Legend.
  {
    let lx = LEFT;
    const ly = 60;
    out.push(`<g class="legend">`, `<text x="${lx}" y="${ly}" fill="${MUTED}">admitted/s by:</text>`);
    lx += 84;
    // Only the tiers that admitted something (Redis always): the mode decides which fallback can.
    for (const source of ADMITTING.filter((a) => a === 'redis' || seconds.some((s) => s.admittedBy[a] > 0))) {
      const name = ADMITTED_BY[source] ?? source;
      out.push(
        `<rect x="${px(lx)}" y="${ly - 9}" width="10" height="10" fill="${SOURCE_COLOURS[source]}"/>`,
        `<text x="${px(lx + 14)}" y="${ly}">${escapeXml(name)}</text>`,
      );
      lx += 14 + name.length * 6.2 + 14;
    }
    for (const [label, stroke, dash] of [['offered/s', OFFERED, '2 3'], ['limit', LIMIT, '6 4']] as const) {
      out.push(
        `<line x1="${px(lx)}" y1="${ly - 4}" x2="${px(lx + 18)}" y2="${ly - 4}" stroke="${stroke}" stroke-width="1.6" stroke-dasharray="${dash}"/>`,
        `<text x="${px(lx + 22)}" y="${ly}">${label}</text>`,
      );
      lx += 22 + label.length * 6.2 + 14;
    }
    out.push(`</g>`);
  }

  // Phases: shaded bands, then the grid.
  out.push(`<g class="phases">`);
  for (const phase of phases) {
    const style = PHASE_FILL[phase.name];
    out.push(
      `<rect class="phase-band phase-${phase.name}" x="${px(x(phase.startMs))}" y="${TOP}" width="${px(x(phase.endMs) - x(phase.startMs))}" ` +
        `height="${BOTTOM - TOP}" fill="${style.fill}" fill-opacity="${style.opacity}"><title>${escapeXml(phase.description)}</title></rect>`,
    );
  }
  out.push(`</g>`, `<g class="grid" stroke="${GRID}">`);
  for (let v = yStep; v <= yMax + 1e-9; v += yStep) out.push(`<line x1="${LEFT}" y1="${px(y(v))}" x2="${RIGHT}" y2="${px(y(v))}"/>`);
  out.push(`</g>`);

  // Admitted per second, stacked by the tier that admitted; offered and total admitted as step lines.
  out.push(`<g class="admitted-by" fill-opacity="0.85" shape-rendering="crispEdges">`);
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
  // A step per second: up or down to the second's value, then across it.
  const step = (values: readonly number[]): string =>
    values.map((v, i) => `${i === 0 ? `M${px(x(0))} ${px(y(v))}` : `V${px(y(v))}`}H${px(x((i + 1) * 1000))}`).join('');
  if (seconds.length > 0) {
    out.push(
      `<path class="offered" fill="none" stroke="${OFFERED}" stroke-width="1.4" stroke-dasharray="2 3" d="${step(seconds.map((s) => s.offered))}"/>`,
      `<path class="admitted" fill="none" stroke="${INK}" stroke-width="1.8" stroke-linejoin="round" d="${step(seconds.map((s) => s.admitted))}"/>`,
    );
  }
  const ly = y(options.limit);
  out.push(
    `<line class="limit" x1="${LEFT}" y1="${px(ly)}" x2="${RIGHT}" y2="${px(ly)}" stroke="${LIMIT}" stroke-width="1.6" stroke-dasharray="6 4"/>`,
    `<text class="limit-label" x="${RIGHT - 4}" y="${px(ly - 5)}" text-anchor="end" fill="${LIMIT}" stroke="#ffffff" stroke-width="3" ` +
      `paint-order="stroke">limit ${options.limit}/s</text>`,
  );

  // Phase labels, over everything in the plot.
  for (const phase of phases) {
    const style = PHASE_FILL[phase.name];
    const x0 = x(phase.startMs);
    const width = x(phase.endMs) - x0;
    const anchor = phase.label.length * 5.8 + 6 <= width ? `x="${px(x0 + width / 2)}" text-anchor="middle"` : `x="${px(x0 + 3)}"`;
    out.push(
      `<text class="phase-label" ${anchor} y="${TOP + 14}" font-size="11" font-weight="600" fill="${style.text}" ` +
        `stroke="#ffffff" stroke-width="3" stroke-opacity="0.8" paint-order="stroke">${escapeXml(phase.label)}</text>`,
    );
  }

  // Axes.
  out.push(
    `<g class="axes">`,
    `<line x1="${LEFT}" y1="${BOTTOM}" x2="${RIGHT}" y2="${BOTTOM}" stroke="${MUTED}"/>`,
    `<line x1="${LEFT}" y1="${TOP}" x2="${LEFT}" y2="${BOTTOM}" stroke="${MUTED}"/>`,
  );
  for (let v = 0; v <= yMax + 1e-9; v += yStep) {
    out.push(`<text x="${LEFT - 7}" y="${px(y(v) + 4)}" text-anchor="end" fill="${MUTED}">${tickLabel(v, yStep)}</text>`);
  }
  const mid = (TOP + BOTTOM) / 2;
  out.push(`<text x="16" y="${px(mid)}" transform="rotate(-90 16 ${px(mid)})" text-anchor="middle" fill="${MUTED}">calls per second</text>`);
  const xStep = niceStep(endMs / 1000, 12);
  for (let s = 0; s * 1000 <= endMs + 1e-6; s += xStep) {
    out.push(
      `<line x1="${px(x(s * 1000))}" y1="${px(stripBottom)}" x2="${px(x(s * 1000))}" y2="${px(stripBottom + 4)}" stroke="${MUTED}"/>`,
      `<text x="${px(x(s * 1000))}" y="${px(ticksY)}" text-anchor="middle" fill="${MUTED}">${tickLabel(s, xStep)}</text>`,
    );
  }
  out.push(`<text x="${RIGHT}" y="${px(ticksY + 16)}" text-anchor="end" fill="${MUTED}">seconds since the load started</text>`, `</g>`);

  // Breakers: one row per instance.
  out.push(`<g class="breakers">`, `<text x="${LEFT}" y="${stripHead}" fill="${MUTED}">breaker of each instance:</text>`);
  let lx = LEFT + 150;
  for (const state of STATES) {
    out.push(
      `<rect x="${px(lx)}" y="${stripHead - 9}" width="10" height="10" fill="${STATE_COLOURS[state]}"/>`,
      `<text x="${px(lx + 14)}" y="${stripHead}">${state}</text>`,
    );
    lx += 14 + state.length * 6.2 + 14;
  }
  for (let instance = 0; instance < options.instances; instance++) {
    const ry = stripTop + instance * (rowHeight + 2);
    if (rowHeight >= 8) {
      out.push(`<text x="${LEFT - 7}" y="${px(ry + rowHeight / 2 + 3.5)}" text-anchor="end" font-size="10" fill="${MUTED}">#${instance}</text>`);
    }
    for (const segment of segments(report.stateChanges.filter((c) => c.instance === instance), Math.min(endMs, report.ranMs))) {
      out.push(
        `<rect class="state-${segment.state}" x="${px(x(segment.fromMs))}" y="${px(ry)}" width="${px(Math.max(1, x(segment.toMs) - x(segment.fromMs)))}" ` +
          `height="${px(rowHeight)}" fill="${STATE_COLOURS[segment.state]}"/>`,
      );
    }
  }
  out.push(`</g>`, `</svg>`, '');
  return out.join('\n');
}

type Segment = { readonly state: BreakerState; readonly fromMs: number; readonly toMs: number };

/** Spans of one breaker's states over `[0, endMs]`, closed before its first transition. */
function segments(changes: readonly { readonly atMs: number; readonly state: BreakerState }[], endMs: number): Segment[] {
  const spans: Segment[] = [];
  let state: BreakerState = 'closed';
  let fromMs = 0;
  for (const change of [...changes, { atMs: endMs, state: 'closed' as BreakerState }]) {
    const toMs = Math.min(Math.max(change.atMs, fromMs), endMs);
    if (toMs > fromMs) spans.push({ state, fromMs, toMs });
    state = change.state;
    fromMs = toMs;
  }
  return spans;
}
