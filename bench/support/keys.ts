/** Pre-built key strings, so that building a key costs no contender anything during a run. */
export function makeKeys(count: number, prefix = 'user:'): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}${i}`);
}

/** Multiplies the measured durations (e.g. `BENCH_TIME_SCALE=0.3` for a quick look); 1 by default. */
export const TIME_SCALE = Number(process.env['BENCH_TIME_SCALE'] ?? '1') || 1;

export function scaled(ms: number): number {
  return Math.max(100, Math.round(ms * TIME_SCALE));
}
