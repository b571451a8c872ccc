/** Text both reports write, the chaos suite's and the demo's: durations, the machine, JSON files. */
import { arch, cpus, platform } from 'node:os';

/** What a table cell shows for a figure there is none of. */
export const DASH = '—';

/**
 * A duration in ms for a table cell: two significant digits below 1 ms (`0.034`, `0.50`), at most one
 * decimal below 100 ms (`12.3`, `61`), whole ms above; `—` when there is no value.
 */
export function formatMs(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return DASH;
  const abs = Math.abs(ms);
  if (abs === 0) return '0';
  if (abs < 1) return ms.toFixed(Math.min(20, 1 - Math.floor(Math.log10(abs))));
  if (abs < 100) return String(Number(ms.toFixed(1)));
  return Math.round(ms).toString();
}

/** One line describing the machine: OS, CPU, cores. */
export function machine(): string {
  return `${platform()} ${arch()}, ${cpus().length} cores, ${cpus()[0]?.model ?? 'unknown cpu'}`;
}

/** `value` as indented JSON and a newline, absent figures (a breaker that never opened) as `null` rather than dropped. */
export function jsonFileText(value: unknown): string {
  return `${JSON.stringify(value, (_key, field: unknown) => (field === undefined ? null : field), 2)}\n`;
}
