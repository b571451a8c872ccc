/**
 * The demo's report: `demo.json` (options, backend, phases, the figures of every second, breaker
 * transitions, summary) and `demo.svg` (the chart), in `reports/demo/<timestamp>/` or `--out`.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { arch, cpus, platform } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BackendKind } from '../types.ts';
import type { DemoMode } from './options.ts';
import type { SecondFigures, StateChange } from './record.ts';
import type { DemoPhase } from './script.ts';
import type { DemoSummary } from './summary.ts';
import { renderDemoSvg } from './svg.ts';

/** Everything demo.json holds. */
export type DemoReport = {
  readonly tool: 'resilimit demo';
  /** When the load started, ISO 8601. */
  readonly startedAt: string;
  /** Stopped early by Ctrl-C (or SIGTERM): the per-second and per-phase figures cover the first `ranMs`. */
  readonly interrupted: boolean;
  readonly ranMs: number;
  readonly node: string;
  readonly machine: string;
  readonly backend: { readonly kind: BackendKind; readonly why: string };
  readonly options: {
    readonly durationS: number;
    readonly instances: number;
    readonly limit: number;
    readonly windowMs: number;
    readonly mode: DemoMode;
    /** Calls per second offered, all instances together (round robin). */
    readonly offeredPerSecond: number;
    /** The one key every instance limits. */
    readonly key: string;
    readonly breaker: { readonly timeoutMs: number; readonly resetTimeoutMs: number; readonly maxResetTimeoutMs: number };
    /** Latency added to every reply while Redis is slow, ms. */
    readonly slowLatencyMs: number;
    /** The user's servers, when given. */
    readonly external: { readonly redis: string; readonly toxiproxy: string; readonly redisUpstream: string } | undefined;
  };
  /** The instance count each limiter found by heartbeat before the load started. */
  readonly instancesCounted: readonly number[];
  readonly phases: readonly DemoPhase[];
  readonly seconds: readonly SecondFigures[];
  readonly stateChanges: readonly StateChange[];
  readonly summary: DemoSummary;
};

export type ReportPaths = { readonly dir: string; readonly json: string; readonly svg: string };

/** `reports/demo/<startedAt>` in the repository (not the working directory). */
export function defaultReportDir(startedAt: string): string {
  return fileURLToPath(new URL(`../../reports/demo/${startedAt.replace(/[:.]/g, '-')}`, import.meta.url));
}

/** One line describing the machine: OS, CPU, cores. */
export function machine(): string {
  return `${platform()} ${arch()}, ${cpus().length} cores, ${cpus()[0]?.model ?? 'unknown cpu'}`;
}

/** Writes demo.json and demo.svg into `dir` (created if missing). Returns absolute paths. */
export async function writeDemoReport(dir: string, report: DemoReport): Promise<ReportPaths> {
  const root = resolve(dir);
  await mkdir(root, { recursive: true });
  const json = resolve(root, 'demo.json');
  const svg = resolve(root, 'demo.svg');
  await Promise.all([
    // Absent figures (a breaker that never opened) are written as null rather than dropped.
    writeFile(json, `${JSON.stringify(report, (_key, value: unknown) => (value === undefined ? null : value), 2)}\n`),
    writeFile(svg, renderDemoSvg(report)),
  ]);
  return { dir: root, json, svg };
}
