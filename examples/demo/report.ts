/**
 * The demo's report: `demo.json` (options, backend, phases, the figures of every second, breaker
 * transitions, summary) and `demo.svg` (the chart), in `reports/demo/<timestamp>/` or `--out`.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jsonFileText } from '../../chaos/format.ts';
import { renderDemoSvg } from './chart.ts';
import type { DemoReport } from './types.ts';

export type ReportPaths = { readonly dir: string; readonly json: string; readonly svg: string };

/** `reports/demo/<startedAt>` in the repository (not the working directory). */
export function defaultReportDir(startedAt: string): string {
  return fileURLToPath(new URL(`../../reports/demo/${startedAt.replace(/[:.]/g, '-')}`, import.meta.url));
}

/** Writes demo.json and demo.svg into `dir` (created if missing). Returns absolute paths. */
export async function writeDemoReport(dir: string, report: DemoReport): Promise<ReportPaths> {
  const root = resolve(dir);
  await mkdir(root, { recursive: true });
  const json = resolve(root, 'demo.json');
  const svg = resolve(root, 'demo.svg');
  await Promise.all([writeFile(json, jsonFileText(report)), writeFile(svg, renderDemoSvg(report))]);
  return { dir: root, json, svg };
}
