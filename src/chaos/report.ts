/**
 * The chaos harness's report in three forms: `report.json` (every figure, for tools), `report.md`
 * (for a pull-request comment) and `report.html` (one self-contained page with charts); and the
 * verdicts as a plain-text table for a terminal. Every renderer is a pure function of the report.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { toHtml } from './report/html.js';
import { toMarkdown } from './report/markdown.js';
import type { ChaosReport } from './types.js';

export { toHtml } from './report/html.js';
export { toMarkdown } from './report/markdown.js';
export { verdictTable } from './report/table.js';

/** Where {@link writeReport} wrote each file, absolute paths. */
export type ReportFiles = { readonly json: string; readonly markdown: string; readonly html: string };

/**
 * Writes `report.json` (the report as JSON, indented by 2), `report.md` ({@link toMarkdown}) and
 * `report.html` ({@link toHtml}) into `dir`, created with its parents when missing; files of those
 * names there are replaced.
 * @returns the absolute paths of the three files.
 * @throws when `dir` is not a non-empty string (a `TypeError` naming what was given), or the file
 *   system refuses (the error of `node:fs`, e.g. `EACCES`, `ENOTDIR`).
 * @example
 * const { html } = await writeReport(report, 'chaos-report');
 * console.log(`open ${html}`);
 */
export async function writeReport(report: ChaosReport, dir: string): Promise<ReportFiles> {
  if (typeof dir !== 'string' || dir === '') {
    throw new TypeError(`writeReport: expected the directory as a non-empty string, got ${dir === '' ? 'an empty string' : typeof dir}`);
  }
  const root = resolve(dir);
  await mkdir(root, { recursive: true });
  const files: ReportFiles = { json: join(root, 'report.json'), markdown: join(root, 'report.md'), html: join(root, 'report.html') };
  await Promise.all([
    writeFile(files.json, `${JSON.stringify(report, null, 2)}\n`),
    writeFile(files.markdown, toMarkdown(report)),
    writeFile(files.html, toHtml(report)),
  ]);
  return files;
}
