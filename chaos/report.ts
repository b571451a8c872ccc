/**
 * The chaos suite's report: `report.json` (meta and every measured figure), `report.md` (one table
 * with a row per scenario, then the checks that failed) and one SVG timeline per scenario
 * (`timeline.ts`). The renderers are pure functions of the results, so tests read their output
 * without touching the disk.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { DASH, formatMs, jsonFileText } from './format.ts';
import { renderSvg } from './timeline.ts';
import type { ScenarioResult } from './types.ts';

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

/** The file name of a scenario's SVG: its name with anything outside `[A-Za-z0-9._-]` made `-`. */
export function svgFileName(scenarioName: string): string {
  const safe = scenarioName.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+/, '');
  return `${safe === '' ? 'scenario' : safe}.svg`;
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
// Files

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
    writeFile(json, jsonFileText({ meta, results })),
    writeFile(markdown, renderMarkdownReport(results, meta)),
    ...timelines.map((t) => writeFile(t.path, renderSvg(t.result))),
  ]);
  return { json, markdown, svgs: timelines.map((t) => t.path) };
}
