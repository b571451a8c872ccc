/**
 * The verdicts as plain text for a terminal and for an error's message: a summary line, a row per
 * scenario with a column per verdict, then a line per failed verdict with its full figure.
 */
import type { ChaosReport, ScenarioOutcome, Verdict } from '../types.js';
import { failuresOf, failureText, markOf, NOT_CHECKED, notApplicable, summaryLine, verdictNamesOf, verdictOf } from './format.js';
import type { VerdictName } from '../types.js';

/** The widest a scenario's name and a verdict's cell may be; with the gaps the table stays under 140 columns. */
const NAME_WIDTH = 24;
const CELL_WIDTH = 14;
const GAP = '  ';

/** Columns a string takes in a terminal: one per code point (the marks, `×`, `≤` and `—` take one). */
export function textWidth(text: string): number {
  return [...text].length;
}

/** `text` cut to `width` columns, ending in `…` when cut. */
export function truncate(text: string, width: number): string {
  const points = [...text];
  if (points.length <= width) return text;
  return width <= 0 ? '' : `${points.slice(0, width - 1).join('')}…`;
}

/** `text` padded with spaces to `width` columns. */
function pad(text: string, width: number): string {
  return text + ' '.repeat(Math.max(0, width - textWidth(text)));
}

/** A figure shortened to `width` columns: whole when it fits, else its part before ` (` (`1.05×`), else cut. */
function shorten(figure: string, width: number): string {
  if (textWidth(figure) <= width) return figure;
  const head = figure.split(' (')[0] ?? figure;
  return textWidth(head) <= width ? head : truncate(figure, width);
}

/** A verdict's cell: `✓ figure`, `✗ figure`, `· figure`, or `—` when not checked. */
function cellOf(verdict: Verdict | undefined): string {
  if (verdict === undefined) return NOT_CHECKED;
  return `${markOf(verdict)} ${shorten(verdict.figure, CELL_WIDTH - 2)}`;
}

type Row = { readonly name: string; readonly cells: readonly string[] } | { readonly name: string; readonly skipped: string };

function rowOf(outcome: ScenarioOutcome, names: readonly VerdictName[]): Row {
  if (outcome.skipped !== undefined) return { name: outcome.name, skipped: `skipped: ${outcome.skipped.replace(/\s+/g, ' ')}` };
  return { name: outcome.name, cells: names.map((name) => cellOf(verdictOf(outcome, name))) };
}

/** Each column's width: the widest of its heading and cells, the name column at most {@link NAME_WIDTH}. */
function columnWidths(rows: readonly Row[], names: readonly VerdictName[]): number[] {
  const widths = [Math.min(NAME_WIDTH, Math.max(textWidth('scenario'), ...rows.map((r) => textWidth(r.name))))];
  for (const [index, name] of names.entries()) {
    const cells = rows.map((r) => ('cells' in r ? textWidth(r.cells[index] ?? '') : 0));
    widths.push(Math.max(textWidth(name), ...cells));
  }
  return widths;
}

function line(cells: readonly string[], widths: readonly number[]): string {
  return cells
    .map((cell, i) => pad(truncate(cell, widths[i] ?? 0), widths[i] ?? 0))
    .join(GAP)
    .trimEnd();
}

/**
 * The report's verdicts as an aligned plain-text table: a summary line, a row per scenario (its name,
 * then a column per verdict: `✓ figure` held, `✗ figure` failed, `· figure` reported without a
 * promise, `—` not checked; `skipped: <reason>` for a scenario that did not run), then a line per
 * failed verdict, `✗ <scenario> <verdict>: <figure> against <bound>; <detail>`, with the full figure.
 * At most about 140 columns wide: long names and figures are shortened in the table only.
 * @example
 * console.log(verdictTable(report));
 * // broken: 1 verdict failed in 1 of 2 scenarios
 * //
 * // scenario  bound           redis-bound  …
 * // frozen    ✗ 1.32×         ✓ 1.00×      …
 * // …
 * // ✗ frozen bound: 1.32× (53 of 40) against ≤ 1.1× in 'local'; 9 over
 */
export function verdictTable(report: ChaosReport): string {
  const names = verdictNamesOf(report);
  const rows = report.scenarios.map((s) => rowOf(s, names));
  const widths = columnWidths(rows, names);
  const restWidth = widths.slice(1).reduce((sum, w) => sum + w + GAP.length, -GAP.length);
  const out = [
    summaryLine(report),
    '',
    line(['scenario', ...names], widths),
    line(
      widths.map((w) => '─'.repeat(w)),
      widths,
    ),
  ];
  for (const row of rows) {
    out.push('cells' in row ? line([row.name, ...row.cells], widths) : line([row.name, row.skipped], [widths[0] ?? 0, restWidth]));
  }
  if (report.scenarios.length === 0) out.push('(no scenario ran)');
  const inapplicable = notApplicable(report).map(([name]) => name);
  if (inapplicable.length > 0) out.push('', `not applicable to a concurrency limit: ${inapplicable.join(', ')}`);
  const failures = failuresOf(report);
  if (failures.length > 0) out.push('');
  for (const { scenario, verdict } of failures) out.push(`✗ ${scenario.name} ${verdict.name}: ${failureText(verdict)}`);
  for (const scenario of report.scenarios) {
    if (!scenario.passed && scenario.skipped === undefined && !failures.some((f) => f.scenario === scenario)) {
      out.push(`✗ ${scenario.name}: did not pass${scenario.errors[0] === undefined ? '' : `; ${scenario.errors[0]}`}`);
    }
  }
  return out.join('\n');
}
