/**
 * `npm run bench` itself (bench/run.ts): its help, its refusal of an unknown flag, and that it knows
 * every benchmark in bench/ (a new one left out of it would never run). Nothing is measured here.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const run = (...args: string[]) => spawnSync(process.execPath, ['bench/run.ts', ...args], { cwd: root, encoding: 'utf8', timeout: 30_000 });

describe('npm run bench (bench/run.ts)', () => {
  it('--help lists every benchmark of bench/, with its durations, and exits 0', () => {
    const help = run('--help');
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^Usage: npm run bench -- \[--quick\] \[name \.\.\.\]/);
    const benches = readdirSync(new URL('../../bench/', import.meta.url))
      .filter((f) => f.endsWith('.ts') && f !== 'run.ts')
      .map((f) => f.slice(0, -3));
    expect(benches.length).toBeGreaterThan(5);
    for (const name of benches) expect(help.stdout).toMatch(new RegExp(`^  ${name} +\\d+:\\d\\d `, 'm'));
  });

  it('refuses an unknown flag or name with exit 2, naming it and what it knows', () => {
    for (const arg of ['--bogus', 'nonsense']) {
      const r = run(arg);
      expect(r.status).toBe(2);
      expect(r.stderr + r.stdout).toContain(`Unknown benchmark(s) or flag(s): ${arg}.`);
      expect(r.stderr + r.stdout).toMatch(/Known: steady, /);
    }
  });
});
