/**
 * The parts the demo's chart (`examples/demo/chart.ts`) is drawn from (the chaos report's charts are
 * `src/chaos/report/charts.ts`). Written by hand (no dependency, no script, no
 * external font), so that a chart renders the same in a browser, on GitHub and in `rsvg-convert`;
 * every function is pure and returns lines of SVG.
 */
import type { BreakerState, DecisionSource } from '../src/index.ts';
import type { StateChange } from './types.ts';

const FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";
export const INK = '#222222';
const MUTED = '#666666';
const GRID = '#e6e6e6';
export const LIMIT = '#c0282d';

/** Colour of each decision source; a `Record` so that none is missed. Its key order is the stacking order, bottom first. */
export const SOURCE_COLOURS: Readonly<Record<DecisionSource, string>> = {
  redis: '#4e79a7',
  local: '#76b7b2',
  'fail-open': '#b07aa1',
  'fail-closed': '#9c755f',
  disabled: '#bab0ac',
};

const STATE_COLOURS: Readonly<Record<BreakerState, string>> = {
  closed: '#59a14f',
  'half-open': '#f1a93b',
  open: '#e15759',
};
const STATES = Object.keys(STATE_COLOURS) as BreakerState[];

/** Where the plot sits in a chart 900 px wide; the bottom depends on the chart. */
const WIDTH = 900;
export const PLOT_LEFT = 64;
const PLOT_RIGHT = WIDTH - 24;
export const PLOT_TOP = 76;

/** A value mapped to a coordinate. */
export type Scale = (value: number) => number;

// The same text escaping, coordinates and tick steps as the chaos report's charts.
import { escapeHtml as escapeXml, niceStep, px } from '../src/chaos/report/svg.ts';

export { escapeXml, niceStep, px };

/** A tick label: no float noise (`0.30000000000000004`), thousands as `k`. */
export function tickLabel(value: number, step: number): string {
  const decimals = Math.max(0, -Math.floor(Math.log10(step)));
  if (Math.abs(value) >= 10_000 && step >= 1000) return `${Number((value / 1000).toFixed(decimals))}k`;
  return String(Number(value.toFixed(decimals)));
}

/** Rough text width at `size` px in a sans-serif, for laying out legends and labels. */
function textWidth(text: string, size: number): number {
  return text.length * size * 0.56;
}

/** Seconds for a tooltip: `5.212`. */
export function formatSeconds(ms: number): string {
  return String(Math.round(ms) / 1000);
}

/** Time in ms across the plot, clamped to `[0, endMs]`. */
export function timeScale(endMs: number): Scale {
  return (ms) => PLOT_LEFT + (Math.min(Math.max(ms, 0), endMs) / endMs) * (PLOT_RIGHT - PLOT_LEFT);
}

/** Calls per second up the plot, from 0 to a round maximum 15 % above `peak` (room for the phase labels). */
export function rateScale(
  peak: number,
  maxTicks: number,
  bottom: number,
): { readonly y: Scale; readonly step: number; readonly max: number } {
  const step = niceStep(peak * 1.15, maxTicks);
  const max = Math.max(step, Math.ceil((peak * 1.15) / step) * step);
  return { step, max, y: (v) => bottom - (Math.min(Math.max(v, 0), max) / max) * (bottom - PLOT_TOP) };
}

/** The opening of the document, its background, title and subtitle; close it with `</svg>`. */
export function documentHead(height: number, title: string, subtitle: string): string[] {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ` +
      `role="img" aria-label="${escapeXml(title)}" font-family="${escapeXml(FONT)}" font-size="11" fill="${INK}">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect class="background" x="0" y="0" width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="${PLOT_LEFT}" y="24" font-size="15" font-weight="600">${escapeXml(title)}</text>`,
    `<text x="${PLOT_LEFT}" y="41" fill="${MUTED}">${escapeXml(subtitle)}</text>`,
  ];
}

/** A legend laid out left to right on one baseline: a heading, then entries. */
export class Legend {
  readonly lines: string[] = [];
  #x: number;
  readonly #y: number;

  constructor(x: number, y: number, heading: string) {
    this.#x = x;
    this.#y = y;
    this.lines.push(`<text x="${px(x)}" y="${y}" fill="${MUTED}">${escapeXml(heading)}</text>`);
    this.#x += textWidth(heading, 11) + 10;
  }

  /** A 10 px square and its label; `attributes` add to the square's (a stroke), `className` names it. */
  swatch(label: string, fill: string, attributes = '', className?: string): this {
    const named = className === undefined ? '' : ` class="${className}"`;
    this.lines.push(
      `<rect${named} x="${px(this.#x)}" y="${this.#y - 9}" width="10" height="10" fill="${fill}"${attributes}/>`,
      `<text x="${px(this.#x + 14)}" y="${this.#y}">${escapeXml(label)}</text>`,
    );
    this.#x += 14 + textWidth(label, 11) + 14;
    return this;
  }

  /** A short line and its label; `attributes` add to the line's (a dash pattern). */
  line(label: string, stroke: string, width: number, attributes = ''): this {
    const y = this.#y - 4;
    this.lines.push(
      `<line x1="${px(this.#x)}" y1="${y}" x2="${px(this.#x + 18)}" y2="${y}" stroke="${stroke}" stroke-width="${width}"${attributes}/>`,
      `<text x="${px(this.#x + 22)}" y="${this.#y}">${escapeXml(label)}</text>`,
    );
    this.#x += 22 + textWidth(label, 11) + 14;
    return this;
  }

  /** Extra room before the next entry. */
  gap(width: number): this {
    this.#x += width;
    return this;
  }
}

/** The dashed limit line across the plot at `atY`, labelled at its right end. */
export function limitLine(atY: number, label: string): string[] {
  return [
    `<line class="limit" x1="${PLOT_LEFT}" y1="${px(atY)}" x2="${PLOT_RIGHT}" y2="${px(atY)}" stroke="${LIMIT}" stroke-width="1.6" stroke-dasharray="6 4"/>`,
    `<text class="limit-label" x="${PLOT_RIGHT - 4}" y="${px(atY - 5)}" text-anchor="end" fill="${LIMIT}" ` +
      `stroke="#ffffff" stroke-width="3" paint-order="stroke" stroke-linejoin="round">${escapeXml(label)}</text>`,
  ];
}

/** A phase's name over its band `[x0, x1]`: centred when it fits, else from the band's start; haloed so it reads over the data. */
export function phaseLabel(label: string, x0: number, x1: number, y: number, fill: string, fontSize: number, bold = false): string {
  const width = x1 - x0;
  const anchor = textWidth(label, fontSize) + 6 <= width ? `x="${px(x0 + width / 2)}" text-anchor="middle"` : `x="${px(x0 + 3)}"`;
  return (
    `<text class="phase-label" ${anchor} y="${y}" font-size="${fontSize}"${bold ? ' font-weight="600"' : ''} fill="${fill}" ` +
    `stroke="#ffffff" stroke-width="3" stroke-opacity="0.8" paint-order="stroke" stroke-linejoin="round">${escapeXml(label)}</text>`
  );
}

/** A step line through `values`, the i-th held over `[startsMs[i], startsMs[i] + widthMs)`; the starts follow each other without gaps. */
export function stepLine(startsMs: readonly number[], values: readonly number[], widthMs: number, x: Scale, y: Scale): string {
  const parts = [`M${px(x(startsMs[0] ?? 0))} ${px(y(values[0] ?? 0))}`];
  for (let i = 0; i < startsMs.length; i++) {
    parts.push(`H${px(x((startsMs[i] ?? 0) + widthMs))}`);
    if (i + 1 < startsMs.length) parts.push(`V${px(y(values[i + 1] ?? 0))}`);
  }
  return parts.join('');
}

/** The chart's frame under a plot whose bottom is `bottom`, with its breaker strip down to `stripBottom`. */
type Axes = {
  readonly bottom: number;
  readonly stripBottom: number;
  readonly x: Scale;
  readonly endMs: number;
  /** Seconds between time ticks. */
  readonly xStepS: number;
  readonly rate: ReturnType<typeof rateScale>;
  /** Under the time ticks, e.g. "seconds since the scenario started". */
  readonly timeTitle: string;
};

/** The horizontal grid lines of the rate scale (and vertical ones at the time ticks with `verticals`). */
export function grid({ stripBottom, x, endMs, xStepS, rate }: Axes, verticals: boolean): string[] {
  const out = [`<g class="grid" stroke="${GRID}" stroke-width="1">`];
  for (let v = rate.step; v <= rate.max + rate.step * 1e-9; v += rate.step) {
    out.push(`<line x1="${PLOT_LEFT}" y1="${px(rate.y(v))}" x2="${PLOT_RIGHT}" y2="${px(rate.y(v))}"/>`);
  }
  if (verticals) {
    for (let s = 0; s * 1000 <= endMs + 1e-6; s += xStepS) {
      out.push(`<line x1="${px(x(s * 1000))}" y1="${PLOT_TOP}" x2="${px(x(s * 1000))}" y2="${px(stripBottom)}"/>`);
    }
  }
  out.push(`</g>`);
  return out;
}

/** The axes: the plot's frame lines, rate ticks and title, time ticks under the breaker strip and their title. */
export function axes({ bottom, stripBottom, x, endMs, xStepS, rate, timeTitle }: Axes): string[] {
  const out = [
    `<g class="axes">`,
    `<line x1="${PLOT_LEFT}" y1="${bottom}" x2="${PLOT_RIGHT}" y2="${bottom}" stroke="${MUTED}"/>`,
    `<line x1="${PLOT_LEFT}" y1="${PLOT_TOP}" x2="${PLOT_LEFT}" y2="${bottom}" stroke="${MUTED}"/>`,
  ];
  for (let v = 0; v <= rate.max + rate.step * 1e-9; v += rate.step) {
    out.push(
      `<line x1="${PLOT_LEFT - 4}" y1="${px(rate.y(v))}" x2="${PLOT_LEFT}" y2="${px(rate.y(v))}" stroke="${MUTED}"/>`,
      `<text x="${PLOT_LEFT - 7}" y="${px(rate.y(v) + 4)}" text-anchor="end" fill="${MUTED}">${tickLabel(v, rate.step)}</text>`,
    );
  }
  const middle = (PLOT_TOP + bottom) / 2;
  out.push(
    `<text x="16" y="${px(middle)}" transform="rotate(-90 16 ${px(middle)})" text-anchor="middle" fill="${MUTED}">calls per second</text>`,
  );
  const labelY = stripBottom + 16;
  for (let s = 0; s * 1000 <= endMs + 1e-6; s += xStepS) {
    const tx = px(x(s * 1000));
    out.push(
      `<line x1="${tx}" y1="${px(stripBottom)}" x2="${tx}" y2="${px(stripBottom + 4)}" stroke="${MUTED}"/>`,
      `<text x="${tx}" y="${px(labelY)}" text-anchor="middle" fill="${MUTED}">${tickLabel(s, xStepS)}</text>`,
    );
  }
  out.push(`<text x="${PLOT_RIGHT}" y="${px(labelY + 16)}" text-anchor="end" fill="${MUTED}">${escapeXml(timeTitle)}</text>`, `</g>`);
  return out;
}

type Segment = { readonly state: BreakerState; readonly fromMs: number; readonly toMs: number };

/**
 * One breaker's states over `[0, endMs]` from its transitions (in any order): `closed` before the
 * first, zero-length spans dropped, neighbours in the same state merged.
 */
function breakerSegments(changes: readonly StateChange[], endMs: number): Segment[] {
  const segments: Segment[] = [];
  let state: BreakerState = 'closed';
  let fromMs = 0;
  const close = (toMs: number): void => {
    const to = Math.min(Math.max(toMs, fromMs), endMs);
    if (to <= fromMs) return;
    const last = segments.at(-1);
    if (last !== undefined && last.state === state && last.toMs === fromMs) segments[segments.length - 1] = { ...last, toMs: to };
    else segments.push({ state, fromMs, toMs: to });
  };
  for (const change of [...changes].sort((a, b) => a.atMs - b.atMs)) {
    close(change.atMs);
    state = change.state;
    fromMs = Math.min(Math.max(change.atMs, fromMs), endMs);
  }
  close(endMs);
  return segments;
}

/** Where the breaker strip goes under a plot ending at `plotBottom`, with a row per instance; and the chart's height, with the time axis under it. */
export function stripLayout(
  plotBottom: number,
  rows: number,
): {
  readonly headY: number;
  readonly top: number;
  readonly bottom: number;
  readonly rowHeight: number;
  readonly gap: number;
  readonly chartHeight: number;
} {
  const rowHeight = rows <= 4 ? 12 : Math.max(5, Math.min(12, 60 / rows));
  const gap = rowHeight >= 8 ? 3 : 1;
  const headY = plotBottom + 22;
  const top = headY + 8;
  const bottom = top + Math.max(1, rows) * (rowHeight + gap) - gap;
  // The time ticks' labels 16 px under the strip, their title 16 px lower, and a margin.
  return { headY, top, bottom, rowHeight, gap, chartHeight: Math.ceil(bottom + 16 + 24) };
}

/**
 * The breaker strip: a heading with the states' legend, then a row per instance of `rows` with its
 * state over time (a span at least a pixel wide, so that a breaker open for a moment still shows).
 */
export function breakerStrip(
  layout: ReturnType<typeof stripLayout>,
  rows: readonly number[],
  changes: readonly StateChange[],
  endMs: number,
  x: Scale,
): string[] {
  const legend = new Legend(PLOT_LEFT, layout.headY, 'breaker state per instance:');
  for (const state of STATES) legend.swatch(state, STATE_COLOURS[state], '', 'legend-state');
  const out = [`<g class="breaker">`, ...legend.lines];
  const { rowHeight, gap } = layout;
  for (const [rowIndex, instance] of rows.entries()) {
    const ry = layout.top + rowIndex * (rowHeight + gap);
    if (rowHeight >= 8 || rowIndex % Math.ceil(8 / rowHeight) === 0) {
      out.push(
        `<text x="${PLOT_LEFT - 7}" y="${px(ry + rowHeight / 2 + 3.5)}" text-anchor="end" font-size="${rowHeight >= 8 ? 10 : 8}" fill="${MUTED}">#${instance}</text>`,
      );
    }
    for (const seg of breakerSegments(
      changes.filter((c) => c.instance === instance),
      endMs,
    )) {
      const sx = x(seg.fromMs);
      out.push(
        `<rect class="state state-${seg.state}" x="${px(sx)}" y="${px(ry)}" width="${px(Math.max(1, x(seg.toMs) - sx))}" height="${px(rowHeight)}" ` +
          `fill="${STATE_COLOURS[seg.state]}"><title>instance ${instance}: ${seg.state} ${formatSeconds(seg.fromMs)}–${formatSeconds(seg.toMs)} s</title></rect>`,
      );
    }
  }
  out.push(`</g>`);
  return out;
}
