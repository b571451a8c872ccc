/** Number and table formatting for the printed reports (Markdown, readable as plain text too). */

/** 68612.3 → "68,612". */
export function perSecond(value: number): string {
  return Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '—';
}

/** Milliseconds with three significant digits: 0.0213, 1.52, 48.1, 3010. */
export function ms(value: number): string {
  if (!Number.isFinite(value)) return value === Number.POSITIVE_INFINITY ? '∞' : '—';
  if (value >= 100) return Math.round(value).toLocaleString('en-US');
  return value.toPrecision(3);
}

/** A ratio a / b as "1.23×" (three significant digits). */
export function ratio(a: number, b: number): string {
  const r = a / b;
  if (!Number.isFinite(r)) return '—';
  return `${r >= 100 ? Math.round(r).toLocaleString('en-US') : r.toPrecision(3)}×`;
}

export function bytes(value: number): string {
  return Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '—';
}

export function percent(part: number, whole: number): string {
  if (whole === 0) return '—';
  if (part === 0 || part === whole) return `${part === 0 ? 0 : 100} %`;
  const p = (100 * part) / whole;
  return p < 0.01 ? '<0.01 %' : `${p.toFixed(2)} %`;
}

/** A Markdown table; `align` is 'l' or 'r' per column (numbers right). */
export function table(header: readonly string[], rows: readonly (readonly string[])[], align?: string): string {
  const a = align ?? `l${'r'.repeat(header.length - 1)}`;
  const rule = header.map((_, i) => (a[i] === 'l' ? ':---' : '---:'));
  return [header, rule, ...rows].map((row) => `| ${row.join(' | ')} |`).join('\n');
}
