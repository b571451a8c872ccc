/**
 * The parts the HTML report's charts are drawn from, by hand (no dependency, no script, no font):
 * scales, ticks, a legend and the time axis the three charts of a scenario share. Colours come from
 * the page's style sheet through class names, so that the charts follow its light and dark themes.
 */

/** Every chart is this wide (its viewBox; the page scales it down). */
export const WIDTH = 900;
/** Where every plot starts and ends across a chart (room on the left for the value axis). */
export const PLOT_LEFT = 78;
export const PLOT_RIGHT = WIDTH - 24;
/** The first row of a chart: its legend. */
const LEGEND_Y = 18;

/** A value mapped to a coordinate. */
export type Scale = (value: number) => number;

/** Text for HTML and SVG, in an element or an attribute: `& < > " '` as entities. */
export function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

/** A coordinate: at most one decimal. */
export function px(n: number): string {
  return String(Math.round(n * 10) / 10);
}

/** A step of 1, 2 or 5 × 10^k that cuts `range` into at most `maxTicks` pieces. */
export function niceStep(range: number, maxTicks: number): number {
  if (!(range > 0)) return 1;
  const raw = range / maxTicks;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5]) if (m * magnitude >= raw) return m * magnitude;
  return 10 * magnitude;
}

/** A tick's label without float noise; thousands as `k` from 10,000. */
export function tickLabel(value: number): string {
  if (Math.abs(value) >= 10_000) return `${Number((value / 1000).toPrecision(6))}k`;
  return String(Number(value.toPrecision(6)));
}

/** Rough width of text at 11 px in a sans-serif, for laying out a legend. */
function textWidth(text: string): number {
  return text.length * 6.2;
}

/** A chart's opening tag, its title and description (read by screen readers); close it with `</svg>`. */
export function svgOpen(className: string, height: number, title: string, description: string): string {
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart ${className}" viewBox="0 0 ${WIDTH} ${height}" role="img" ` +
    `aria-label="${escapeHtml(title)}"><title>${escapeHtml(title)}</title><desc>${escapeHtml(description)}</desc>`
  );
}

/** One entry of a legend: a line (its class gives the colour and dash) or a filled square. */
export type LegendEntry = { readonly label: string; readonly className: string; readonly kind: 'line' | 'swatch' };

/** A legend on one row at the chart's top: a heading, then entries left to right. */
export function legend(heading: string, entries: readonly LegendEntry[]): string {
  let x = PLOT_LEFT;
  const out = [`<g class="legend"><text class="muted" x="${x}" y="${LEGEND_Y}">${escapeHtml(heading)}</text>`];
  x += textWidth(heading) + 12;
  for (const entry of entries) {
    out.push(
      entry.kind === 'line'
        ? `<line class="${entry.className}" x1="${px(x)}" y1="${LEGEND_Y - 4}" x2="${px(x + 18)}" y2="${LEGEND_Y - 4}"/>`
        : `<rect class="${entry.className}" x="${px(x + 4)}" y="${LEGEND_Y - 9}" width="10" height="10"/>`,
      `<text x="${px(x + 22)}" y="${LEGEND_Y}">${escapeHtml(entry.label)}</text>`,
    );
    x += 22 + textWidth(entry.label) + 14;
  }
  out.push('</g>');
  return out.join('');
}

/** Where a chart's plot sits vertically, and the time scale all three charts share. */
export type Frame = { readonly top: number; readonly bottom: number; readonly x: Scale; readonly endMs: number };

/** Time in ms across the plot, clamped to `[0, endMs]`. */
export function timeScale(endMs: number): Scale {
  return (ms) => PLOT_LEFT + (Math.min(Math.max(ms, 0), endMs) / endMs) * (PLOT_RIGHT - PLOT_LEFT);
}

/** The time axis under a plot: ticks in seconds, vertical grid lines, and the axis's title. */
export function timeAxis({ top, bottom, x, endMs }: Frame): string {
  const stepS = niceStep(endMs / 1000, 10);
  const out = [`<g class="axis time-axis"><line class="frame" x1="${PLOT_LEFT}" y1="${bottom}" x2="${PLOT_RIGHT}" y2="${bottom}"/>`];
  for (let i = 0; i * stepS * 1000 <= endMs + 1e-6; i++) {
    const tx = px(x(i * stepS * 1000));
    out.push(
      `<line class="grid" x1="${tx}" y1="${top}" x2="${tx}" y2="${bottom}"/>`,
      `<line class="frame" x1="${tx}" y1="${bottom}" x2="${tx}" y2="${bottom + 4}"/>`,
      `<text class="muted" x="${tx}" y="${bottom + 16}" text-anchor="middle">${tickLabel(i * stepS)}</text>`,
    );
  }
  out.push(`<text class="muted" x="${PLOT_RIGHT}" y="${bottom + 32}" text-anchor="end">seconds since the scenario started</text></g>`);
  return out.join('');
}

/** The value axis left of a plot: a tick and grid line at each of `ticks`, and the axis's title turned upright. */
export function valueAxis({ top, bottom }: Frame, ticks: readonly (readonly [number, string])[], y: Scale, title: string): string {
  const out = [`<g class="axis value-axis"><line class="frame" x1="${PLOT_LEFT}" y1="${top}" x2="${PLOT_LEFT}" y2="${bottom}"/>`];
  for (const [value, label] of ticks) {
    const ty = px(y(value));
    out.push(
      `<line class="grid" x1="${PLOT_LEFT}" y1="${ty}" x2="${PLOT_RIGHT}" y2="${ty}"/>`,
      `<line class="frame" x1="${PLOT_LEFT - 4}" y1="${ty}" x2="${PLOT_LEFT}" y2="${ty}"/>`,
      `<text class="muted" x="${PLOT_LEFT - 7}" y="${px(y(value) + 4)}" text-anchor="end">${escapeHtml(label)}</text>`,
    );
  }
  const middle = px((top + bottom) / 2);
  out.push(
    `<text class="muted" x="16" y="${middle}" transform="rotate(-90 16 ${middle})" text-anchor="middle">${escapeHtml(title)}</text></g>`,
  );
  return out.join('');
}

/** A horizontal line across the plot at `atY`, labelled at its right end (or its left, so two labels at one height do not overlap). */
export function levelLine(className: string, atY: number, label: string, labelAt: 'left' | 'right' = 'right'): string {
  const anchor = labelAt === 'right' ? `x="${PLOT_RIGHT - 4}" text-anchor="end"` : `x="${PLOT_LEFT + 4}"`;
  return (
    `<line class="${className}" x1="${PLOT_LEFT}" y1="${px(atY)}" x2="${PLOT_RIGHT}" y2="${px(atY)}"/>` +
    `<text class="${className}-label halo" ${anchor} y="${px(atY - 4)}">${escapeHtml(label)}</text>`
  );
}

/**
 * A step line through `values`, the i-th held over step i, `[i·stepMs, (i+1)·stepMs)`; a value that is
 * not a finite number (none measured then) leaves a gap. An empty string when nothing is drawn.
 */
export function stepPath(values: readonly number[], stepMs: number, x: Scale, y: Scale): string {
  const parts: string[] = [];
  let drawing = false;
  for (const [i, value] of values.entries()) {
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      drawing = false;
      continue;
    }
    parts.push(drawing ? `V${px(y(value))}` : `M${px(x(i * stepMs))} ${px(y(value))}`, `H${px(x((i + 1) * stepMs))}`);
    drawing = true;
  }
  return parts.join('');
}
