/**
 * The report as one self-contained HTML page: no script, no external font or style sheet, the charts
 * as inline SVG coloured by the page's own style sheet, in a light and a dark theme.
 */
import type { ChaosReport, ScenarioOutcome, Verdict } from '../types.js';
import { scenarioCharts } from './charts.js';
import {
  failuresOf,
  failureText,
  figureRows,
  markOf,
  NOT_CHECKED,
  notApplicable,
  runFacts,
  scenarioFacts,
  summaryLine,
  verdictNamesOf,
  verdictOf,
  verdictWord,
} from './format.js';
import { slotFigureRows } from './slotFormat.js';
import { escapeHtml } from './svg.js';

const STYLE = `
:root { color-scheme: light dark; --bg: #ffffff; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --grid: #eaeef2;
  --pass: #1a7f37; --fail: #cf222e; --limit: #c0282d; --fault: #e15759; --admitted: #1f2328; --p99: #0969da; --max: #bc4c00;
  --deadline: #8250df; --budget: #c0282d; --closed: #4ac26b; --half-open: #d4a72c; --open: #e5534b; }
@media (prefers-color-scheme: dark) { :root { --bg: #0d1117; --ink: #e6edf3; --muted: #9198a1; --line: #3d444d; --grid: #21262d;
  --pass: #3fb950; --fail: #f85149; --limit: #ff7b72; --fault: #f85149; --admitted: #e6edf3; --p99: #4493f8; --max: #f0883e;
  --deadline: #ab7df8; --budget: #ff7b72; --closed: #2ea043; --half-open: #bb8009; --open: #da3633; } }
body { margin: 0 auto; max-width: 960px; padding: 1.5rem; background: var(--bg); color: var(--ink);
  font: 14px/1.5 system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; }
h1 .held { color: var(--pass); } h1 .broken { color: var(--fail); }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
.verdicts { display: block; overflow-x: auto; }
td.pass { color: var(--pass); } td.fail { color: var(--fail); font-weight: 600; } td.info, td.none, .muted { color: var(--muted); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 1rem; } dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
.failures li { color: var(--fail); } code { font-size: 12px; }
section.scenario { border-top: 1px solid var(--line); margin-top: 1.5rem; }
svg.chart { display: block; width: 100%; height: auto; max-width: 900px; font: 11px system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; }
svg.chart text { fill: var(--ink); } svg.chart text.muted { fill: var(--muted); }
svg.chart .frame { stroke: var(--muted); } svg.chart .grid { stroke: var(--grid); }
svg.chart .halo { paint-order: stroke; stroke: var(--bg); stroke-width: 3px; stroke-linejoin: round; }
svg.chart path { fill: none; stroke-linejoin: round; }
svg.chart .admitted { stroke: var(--admitted); stroke-width: 1.8; }
svg.chart .limit { stroke: var(--limit); stroke-width: 1.6; } svg.chart .limit-label { fill: var(--limit); }
svg.chart .limit-110 { stroke: var(--limit); stroke-width: 1.2; stroke-dasharray: 6 4; } svg.chart .limit-110-label { fill: var(--limit); }
svg.chart .p99 { stroke: var(--p99); stroke-width: 1.6; } svg.chart .latency-max { stroke: var(--max); stroke-width: 1.2; }
svg.chart .deadline { stroke: var(--deadline); stroke-width: 1.4; stroke-dasharray: 6 4; } svg.chart .deadline-label { fill: var(--deadline); }
svg.chart .budget { stroke: var(--budget); stroke-width: 1.4; stroke-dasharray: 2 3; } svg.chart .budget-label { fill: var(--budget); }
svg.chart .fault { fill: var(--fault); fill-opacity: 0.15; } svg.chart .fault-edge { stroke: var(--fault); stroke-dasharray: 3 2; }
svg.chart .state-closed { fill: var(--closed); } svg.chart .state-half-open { fill: var(--half-open); } svg.chart .state-open { fill: var(--open); }
`;

/** `<tag class="…">text</tag>` with the text escaped. */
function element(tag: string, className: string, text: string): string {
  return `<${tag}${className === '' ? '' : ` class="${className}"`}>${escapeHtml(text)}</${tag}>`;
}

function verdictCell(verdict: Verdict | undefined): string {
  if (verdict === undefined) return element('td', 'none', NOT_CHECKED);
  const className = verdict.pass === true ? 'pass' : verdict.pass === false ? 'fail' : 'info';
  return `<td class="${className}" title="${escapeHtml(verdict.bound)}">${escapeHtml(`${markOf(verdict)} ${verdict.figure}`)}</td>`;
}

/** A link to a scenario's section (when it ran), its name and title. */
function scenarioCell(s: ScenarioOutcome): string {
  const name = s.skipped === undefined ? `<a href="#${anchorOf(s)}">${escapeHtml(s.name)}</a>` : escapeHtml(s.name);
  return `<th scope="row">${name}<br><span class="muted">${escapeHtml(s.title)}</span></th>`;
}

/** An id for a scenario's section: its name with anything outside `[A-Za-z0-9_-]` made `-`. */
function anchorOf(s: ScenarioOutcome): string {
  return `scenario-${s.name.replace(/[^A-Za-z0-9_-]+/g, '-')}`;
}

function verdictsTable(report: ChaosReport): string {
  const VERDICT_NAMES = verdictNamesOf(report);
  const head = `<tr><th>scenario</th>${VERDICT_NAMES.map((n) => element('th', '', n)).join('')}</tr>`;
  const rows = report.scenarios.map((s) => {
    const cells =
      s.skipped === undefined
        ? VERDICT_NAMES.map((name) => verdictCell(verdictOf(s, name))).join('')
        : `<td class="info" colspan="${VERDICT_NAMES.length}">${escapeHtml(`skipped: ${s.skipped}`)}</td>`;
    return `<tr>${scenarioCell(s)}${cells}</tr>`;
  });
  return `<table class="verdicts"><thead>${head}</thead><tbody>${rows.join('\n')}</tbody></table>`;
}

function definitionList(className: string, rows: readonly (readonly [string, string])[]): string {
  return `<dl class="${className}">${rows.map(([label, value]) => `${element('dt', '', label)}${element('dd', '', value)}`).join('')}</dl>`;
}

function failuresList(report: ChaosReport): string {
  const failures = failuresOf(report);
  if (failures.length === 0) return '';
  const items = failures.map(({ scenario, verdict }) => element('li', '', `✗ ${scenario.name} ${verdict.name}: ${failureText(verdict)}`));
  return `<h2>Failures</h2><ul class="failures">${items.join('')}</ul>`;
}

/** The verdicts not applicable to this kind of limit, and why: none for a rate limit. */
function notApplicableList(report: ChaosReport): string {
  const rows = notApplicable(report);
  if (rows.length === 0) return '';
  const items = rows.map(([name, why]) => `<li><code>${escapeHtml(name)}</code>: ${escapeHtml(why)}</li>`);
  return `<p class="muted">Not applicable to a concurrency limit (never reported as held):</p><ul class="muted">${items.join('')}</ul>`;
}

function skippedList(report: ChaosReport): string {
  const skipped = report.scenarios.filter((s) => s.skipped !== undefined);
  if (skipped.length === 0) return '';
  const items = skipped.map(
    (s) => `<li><strong>${escapeHtml(s.name)}</strong> (${escapeHtml(s.title)}): ${escapeHtml(s.skipped ?? '')}</li>`,
  );
  return `<h2>Skipped</h2><ul class="skipped">${items.join('')}</ul>`;
}

/** A scenario that ran: its facts, figures, errors and three charts. */
function scenarioSection(s: ScenarioOutcome, report: ChaosReport): string {
  const verdict = s.passed ? element('span', 'pass', '✓ held') : element('span', 'fail', '✗ broken');
  const errors =
    s.errors.length === 0
      ? ''
      : `<details><summary>${s.errors.length} error(s)</summary><ul>${s.errors.map((e) => element('li', '', e)).join('')}</ul></details>`;
  const charts = scenarioCharts(s, report);
  return [
    `<section class="scenario" id="${anchorOf(s)}">`,
    `<h2>${escapeHtml(s.title)} <code>${escapeHtml(s.name)}</code> ${verdict}</h2>`,
    element('p', 'muted', scenarioFacts(s)),
    s.figures !== undefined
      ? definitionList('facts figures', figureRows(s.figures))
      : s.slots !== undefined
        ? definitionList('facts figures', slotFigureRows(s.slots))
        : element('p', 'muted', 'No figures were measured.'),
    errors,
    charts === '' ? element('p', 'muted', 'No series were measured: no charts.') : `<div class="charts">\n${charts}\n</div>`,
    '</section>',
  ].join('\n');
}

/**
 * The report as one self-contained HTML page (inline style and SVG only, no script): the verdict,
 * the run's facts, the table of verdicts, the failures and skipped scenarios, then per scenario that
 * ran its figures and three charts on one time axis (admitted in the window against the limit,
 * decision latency against the deadline and the budget, each instance's breaker state). Every string
 * from the report is escaped. Follows the reader's light or dark theme.
 * @example
 * await writeFile('report.html', toHtml(report));
 */
export function toHtml(report: ChaosReport): string {
  const word = verdictWord(report);
  const ran = report.scenarios.filter((s) => s.skipped === undefined);
  return [
    '<!doctype html>',
    '<html lang="en">',
    '<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${escapeHtml(`resilimit chaos: ${word}${report.interrupted ? ' (interrupted)' : ''}`)}</title>`,
    `<style>${STYLE}</style></head>`,
    '<body>',
    `<h1>resilimit chaos: <span class="${word}">${word}</span>${report.interrupted ? ' (interrupted)' : ''}</h1>`,
    element('p', '', summaryLine(report)),
    definitionList('facts', runFacts(report)),
    '<h2>Verdicts</h2>',
    element('p', 'muted', '✓ held · ✗ failed · “·” reported, no promise · — not checked; hover a cell for its promise'),
    verdictsTable(report),
    notApplicableList(report),
    failuresList(report),
    skippedList(report),
    ...ran.map((s) => scenarioSection(s, report)),
    '</body>',
    '</html>',
    '',
  ].join('\n');
}
