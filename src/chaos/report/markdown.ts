/**
 * The report as GitHub-flavoured Markdown, for a pull-request comment or a job summary: the verdict,
 * the run's facts, a table of verdicts per scenario, the failures, then each scenario's figures.
 */
import type { ChaosReport, ScenarioOutcome, Verdict } from '../types.js';
import {
  failuresOf,
  failureText,
  figureRows,
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

/**
 * Text from the report made safe in Markdown, table cells included: one line, HTML's `<`, `>` and `&`
 * as entities (GitHub would render a tag), Markdown's punctuation backslash-escaped.
 */
export function escapeMarkdown(text: string): string {
  return text
    .replace(/\r?\n|\r/g, ' ')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/([\\`*_[\]#|~])/g, '\\$1');
}

/** A Markdown mark for a verdict: ✅ held, ❌ failed, `·` reported without a promise. */
function emojiOf(verdict: Verdict): string {
  if (verdict.pass === true) return '✅';
  return verdict.pass === false ? '❌' : '·';
}

function tableRow(cells: readonly string[]): string {
  return `| ${cells.join(' | ')} |`;
}

function verdictCell(verdict: Verdict | undefined): string {
  return verdict === undefined ? NOT_CHECKED : `${emojiOf(verdict)} ${escapeMarkdown(verdict.figure)}`;
}

function scenarioCell(outcome: ScenarioOutcome): string {
  return `**${escapeMarkdown(outcome.name)}**<br>${escapeMarkdown(outcome.title)}`;
}

/** The table of verdicts: a row per scenario, a column per verdict; a skipped scenario says why. */
function verdictsTable(report: ChaosReport): string[] {
  const VERDICT_NAMES = verdictNamesOf(report);
  const out = [tableRow(['Scenario', ...VERDICT_NAMES.map((n) => `\`${n}\``)]), tableRow(['---', ...VERDICT_NAMES.map(() => '---')])];
  for (const s of report.scenarios) {
    const cells =
      s.skipped === undefined
        ? VERDICT_NAMES.map((name) => verdictCell(verdictOf(s, name)))
        : [`skipped: ${escapeMarkdown(s.skipped)}`, ...VERDICT_NAMES.slice(1).map(() => '')];
    out.push(tableRow([scenarioCell(s), ...cells]));
  }
  return out;
}

/** The verdicts not applicable to this kind of limit, and why: none for a rate limit. */
function notApplicableList(report: ChaosReport): string[] {
  const rows = notApplicable(report);
  if (rows.length === 0) return [];
  return [
    'Not applicable to a concurrency limit (never reported as held):',
    '',
    ...rows.map(([n, why]) => `- \`${n}\`: ${escapeMarkdown(why)}`),
    '',
  ];
}

function factsList(report: ChaosReport): string[] {
  return runFacts(report).map(([label, value]) => `- **${label}**: ${escapeMarkdown(value)}`);
}

function failuresList(report: ChaosReport): string[] {
  const failures = failuresOf(report);
  if (failures.length === 0) return [];
  return [
    '## Failures',
    '',
    ...failures.map(
      ({ scenario, verdict }) => `- ❌ **${escapeMarkdown(scenario.name)}** \`${verdict.name}\`: ${escapeMarkdown(failureText(verdict))}`,
    ),
    '',
  ];
}

/** A scenario's section: what it ran, its figures as a two-column table, and the errors its instances reported. */
function scenarioSection(outcome: ScenarioOutcome): string[] {
  const mark = outcome.skipped !== undefined ? '⏭️' : outcome.passed ? '✅' : '❌';
  const out = [`### ${mark} ${escapeMarkdown(outcome.title)} (\`${escapeMarkdown(outcome.name)}\`)`, ''];
  if (outcome.skipped !== undefined) return [...out, `Skipped: ${escapeMarkdown(outcome.skipped)}`, ''];
  out.push(escapeMarkdown(scenarioFacts(outcome)), '');
  const rows =
    outcome.figures !== undefined ? figureRows(outcome.figures) : outcome.slots !== undefined ? slotFigureRows(outcome.slots) : undefined;
  if (rows === undefined) out.push('No figures were measured.', '');
  else {
    out.push(tableRow(['Figure', 'Value']), tableRow(['---', '---']));
    for (const [label, value] of rows) out.push(tableRow([escapeMarkdown(label), escapeMarkdown(value)]));
    out.push('');
  }
  if (outcome.errors.length > 0) {
    out.push(`<details><summary>${outcome.errors.length} error(s) reported by the instances</summary>`, '');
    for (const error of outcome.errors) out.push(`- ${escapeMarkdown(error)}`);
    out.push('', '</details>', '');
  }
  return out;
}

/**
 * The report as GitHub-flavoured Markdown: a heading with the verdict (held or broken), the run's
 * facts, a table of verdicts per scenario, the failed verdicts, then a section of figures per
 * scenario. Every string from the report is escaped, so a title cannot inject HTML or break a table.
 * @example
 * await writeFile(process.env.GITHUB_STEP_SUMMARY!, toMarkdown(report));
 */
export function toMarkdown(report: ChaosReport): string {
  const word = verdictWord(report);
  const out = [
    `# ${word === 'held' ? '✅' : '❌'} resilimit chaos: ${word}${report.interrupted ? ' (interrupted)' : ''}`,
    '',
    `**${escapeMarkdown(summaryLine(report))}**`,
    '',
    ...factsList(report),
    '',
    '## Verdicts',
    '',
    '✅ held · ❌ failed · `·` reported, no promise · — not checked',
    '',
    ...verdictsTable(report),
    '',
    ...notApplicableList(report),
    ...failuresList(report),
    '## Scenarios',
    '',
    ...report.scenarios.flatMap(scenarioSection),
  ];
  return `${out.join('\n').trimEnd()}\n`;
}
