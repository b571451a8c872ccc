/**
 * `npm run demo` (examples/demo/), run the way a newcomer runs it: `node examples/demo/main.ts` in a
 * child process on the built `dist/` (`npm test` builds before the suites run), stdout a pipe rather
 * than a terminal, with a short duration. Checks what it prints, that it exits by itself, and what
 * its report says.
 *
 *   npm run build && npx vitest run --project chaos chaos/demo.test.ts
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeContainerRuntime } from './backends/index.ts';
import { RANGES } from '../examples/demo/options.ts';
import type { SecondFigures } from '../examples/demo/record.ts';
import { breakerEventText, limitBar, plainHeader, plainLine, wrap } from '../examples/demo/render.ts';
import type { DemoReport } from '../examples/demo/types.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const runtime = await probeContainerRuntime();
const MAIN = fileURLToPath(new URL('../examples/demo/main.ts', import.meta.url));
const DIST = fileURLToPath(new URL('../dist/index.js', import.meta.url));

const DURATION_S = 10;
const INSTANCES = 2;
const LIMIT = 60;
/** The demo must have exited by itself by then (startup takes a few seconds). */
const EXIT_WITHIN_MS = 30_000;
/**
 * Admitted calls a healthy second may hold over the limit. Redis decides exactly, but a stall of
 * this machine (an event-loop pause, another process hogging the cores) can open an instance's
 * breaker or divert a call ('slow') while Redis is healthy; that instance's local window then admits
 * up to its share, counting only its own calls. So: at most one share over.
 */
const SHARE = Math.ceil(LIMIT / INSTANCES);
const HEALTHY_SLACK = SHARE;

type Run = { code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string; ms: number };

/**
 * Runs the demo with `args` (and `extraEnv` over this process's environment); kills it (and reports
 * so) if it has not exited within `withinMs`.
 */
function demo(args: readonly string[], withinMs = EXIT_WITHIN_MS, extraEnv: Record<string, string> = {}): Promise<Run> {
  const env: Record<string, string | undefined> = { ...process.env, ...extraEnv };
  // Our own servers, whatever the suite's environment says.
  delete env['REDIS_URL'];
  delete env['TOXIPROXY_URL'];
  const started = Date.now();
  const child = spawn(process.execPath, [MAIN, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      stderr += `\n[test] still running after ${withinMs} ms: killed`;
      child.kill('SIGKILL');
    }, withinMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/** The per-second lines: they start with the time, e.g. `  7s down  …`. */
function secondLines(stdout: string): string[] {
  return stdout.split('\n').filter((line) => /^\s*\d+s /.test(line));
}

describe(`the demo, ${DURATION_S} s with ${INSTANCES} instances in mode local, stdout not a terminal`, () => {
  let out: string;
  let run: Run;
  let report: DemoReport;
  let svg: string;

  beforeAll(async () => {
    if (!existsSync(DIST)) throw new Error(`${DIST} is missing: run \`npm run build\` first (npm test does)`);
    out = await mkdtemp(join(tmpdir(), 'resilimit-demo-'));
    run = await demo(['--duration', String(DURATION_S), '--instances', String(INSTANCES), '--limit', String(LIMIT), '--out', out]);
    if (run.code === 0) {
      report = JSON.parse(await readFile(join(out, 'demo.json'), 'utf8')) as DemoReport;
      svg = await readFile(join(out, 'demo.svg'), 'utf8');
    }
  }, EXIT_WITHIN_MS + 10_000);

  afterAll(async () => {
    if (out !== undefined) await rm(out, { recursive: true, force: true });
  });

  it('exits with status 0 by itself', () => {
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.ms).toBeGreaterThanOrEqual(DURATION_S * 1000);
  });

  it('prints one plain line per second, in order, within 80 columns, without terminal codes', () => {
    const lines = secondLines(run.stdout);
    expect(lines.map((line) => Number(/^\s*(\d+)s/.exec(line)?.[1]))).toEqual(Array.from({ length: DURATION_S }, (_, i) => i + 1));
    for (const line of lines) expect([...line].length).toBeLessThanOrEqual(80);
    expect(run.stdout).not.toContain('\x1b[');
    expect(run.stdout).toMatch(/backend: (local|container): /);
  });

  it('prints where the report is, and writes it there', () => {
    expect(run.stdout).toContain(join(out, 'demo.svg'));
    expect(run.stdout).toContain(join(out, 'demo.json'));
    expect(report.tool).toBe('resilimit demo');
    expect(svg.startsWith('<svg')).toBe(true);
  });

  it('plays the four phases in order, covering the run, with the options given', () => {
    expect(report.phases.map((p) => p.name)).toEqual(['healthy', 'slow', 'down', 'back']);
    expect(report.phases[0]?.startMs).toBe(0);
    expect(report.phases.at(-1)?.endMs).toBe(DURATION_S * 1000);
    for (const [i, p] of report.phases.slice(1).entries()) expect(p.startMs).toBe(report.phases[i]?.endMs);
    for (const p of report.phases) expect(p.endMs - p.startMs).toBeGreaterThanOrEqual(2000);
    expect(report.options).toMatchObject({
      durationS: DURATION_S,
      instances: INSTANCES,
      limit: LIMIT,
      mode: 'local',
      offeredPerSecond: 2 * LIMIT,
    });
    expect(report.interrupted).toBe(false);
    expect(report.seconds.map((s) => s.second)).toEqual(Array.from({ length: DURATION_S }, (_, i) => i));
    expect(report.instancesCounted).toEqual(Array.from({ length: INSTANCES }, () => INSTANCES));
  });

  it('offers twice the limit every second and answers every call, without exceptions', () => {
    // Spread evenly; a stall of the machine at the end of a second moves its last calls to the next.
    for (const s of report.seconds) expect(Math.abs(s.offered - 2 * LIMIT)).toBeLessThanOrEqual(0.25 * 2 * LIMIT);
    expect(report.seconds.reduce((n, s) => n + s.offered, 0)).toBe(2 * LIMIT * DURATION_S);
    expect(report.summary.decisions).toBe(2 * LIMIT * DURATION_S);
    expect(report.summary.exceptions).toBe(0);
    expect(report.summary.unhandledRejections).toBe(0);
  });

  it(`while healthy, Redis decides and each second admits the limit: Redis never over it, all at most ${HEALTHY_SLACK} over`, () => {
    const healthy = report.seconds.filter((s) => s.phase === 'healthy');
    expect(healthy.length).toBeGreaterThanOrEqual(2);
    for (const s of healthy) {
      // By admission time on Redis's clock, a second is a window of the sliding log: exact.
      expect(s.admittedBy.redis).toBeLessThanOrEqual(LIMIT);
      expect(s.admitted).toBeGreaterThanOrEqual(LIMIT * 0.9);
      expect(s.admitted).toBeLessThanOrEqual(LIMIT + HEALTHY_SLACK);
    }
    // The deny cache repeats Redis's own rejections; the fallback answers only after a stall.
    const decided = healthy.reduce((n, s) => n + s.redis + s.denyCache, 0);
    expect(decided).toBeGreaterThanOrEqual(healthy.reduce((n, s) => n + s.decisions, 0) * 0.75);
  });

  it('while Redis is down, the local windows answer, admitting about the limit', () => {
    const down = report.seconds.filter((s) => s.phase === 'down');
    expect(down.length).toBeGreaterThanOrEqual(2);
    for (const s of down) {
      expect(s.redis).toBe(0);
      expect(s.fallback + s.denyCache).toBe(s.decisions);
      expect(s.fallback).toBeGreaterThan(s.decisions * 0.9);
      expect(s.bySource.local).toBe(s.decisions);
      // Each instance admits its share, ceil(LIMIT / INSTANCES), from its local window.
      expect(s.admittedBy.local).toBeGreaterThanOrEqual(LIMIT * 0.9);
      expect(s.admitted).toBeLessThanOrEqual(SHARE * INSTANCES);
    }
    // Answered at once: nothing waits for a Redis that is not there.
    expect(report.summary.perPhase.find((p) => p.name === 'down')?.latencyMs.p99).toBeLessThan(10);
  });

  it("opens every instance's breaker during the faults and closes it again after Redis is back", () => {
    const slow = report.phases.find((p) => p.name === 'slow');
    const back = report.phases.find((p) => p.name === 'back');
    if (slow === undefined || back === undefined) throw new Error('phases missing');
    expect(report.summary.breakers).toHaveLength(INSTANCES);
    for (const b of report.summary.breakers) {
      // Opened while Redis was slow or down (a failed trial opens it again, so once a second at least).
      const opened = report.stateChanges.filter((c) => c.instance === b.instance && c.state === 'open').map((c) => c.atMs);
      expect(opened.filter((atMs) => atMs >= slow.startMs && atMs < back.startMs).length).toBeGreaterThanOrEqual(1);
      expect(b.finalState).toBe('closed');
      expect(b.lastClosedAtMs as number).toBeGreaterThanOrEqual(back.startMs);
    }
    expect(report.seconds.at(-1)?.breakers).toEqual(Array.from({ length: INSTANCES }, () => 'closed'));
    // After recovery Redis decides again.
    expect(report.seconds.at(-1)?.redis).toBeGreaterThan(0);
  });

  it('draws the limit line and labels every phase in the SVG', () => {
    expect(svg).toMatch(/<line class="limit" [^>]*y1="([\d.]+)" [^>]*y2="\1"/);
    expect(svg).toContain(`>limit ${LIMIT}/s</text>`);
    for (const phase of report.phases) {
      expect(svg).toMatch(new RegExp(`class="phase-label"[^>]*>${phase.label.replace(/[()+]/g, '\\$&')}</text>`));
    }
  });
});

describe('the demo command line', () => {
  it('--help exits 0 and explains every option with its default', async () => {
    const run = await demo(['--help'], 10_000);
    expect(run.code).toBe(0);
    for (const option of [
      '--duration',
      '--instances',
      '--limit',
      '--mode',
      '--redis',
      '--toxiproxy',
      '--redis-upstream',
      '--out',
      '--help',
    ]) {
      expect(run.stdout).toContain(` ${option} `);
    }
    const defaults = [RANGES.duration.default, RANGES.instances.default, RANGES.limit.default, 'local'].map((d) => `(default ${d})`);
    for (const fallback of [...defaults, '(default: host:port of --redis)', '(default reports/demo/<timestamp>)']) {
      expect(run.stdout).toContain(fallback);
    }
  });

  it('a bad value exits 2 with a message naming the option, what was expected and what was given', async () => {
    const instances = await demo(['--instances', 'x'], 10_000);
    expect(instances.code).toBe(2);
    expect(instances.stderr).toContain(`--instances: expected an integer from 1 to 16, got 'x'`);
    expect(instances.stdout).toBe('');

    const mode = await demo(['--mode', 'sideways'], 10_000);
    expect(mode.code).toBe(2);
    expect(mode.stderr).toContain(`--mode: expected one of local, fail-open, fail-closed, got 'sideways'`);

    const half = await demo(['--redis', 'redis://127.0.0.1:6379'], 10_000);
    expect(half.code).toBe(2);
    expect(half.stderr).toContain('--redis needs --toxiproxy too');
  });

  // The chaos suite's selection (auto: containers, else local): with neither, the demo says how to get a backend.
  it.skipIf(runtime.ok)('without a container runtime or redis-server, exits 1 saying how to get a Redis', async () => {
    const run = await demo(['--duration', '10'], 10_000, { PATH: '/nonexistent', CHAOS_BACKEND: 'auto', CHAOS_STRICT: '0' });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('demo: no Redis to run the demo against: auto: no container runtime (');
    expect(run.stderr).toContain('redis-server is not on PATH');
    expect(run.stderr).toContain('  - install Redis: apt-get install redis-server (or brew install redis), then npm run demo\n');
  });
});

describe('the live display', () => {
  const figures = (overrides: Partial<SecondFigures>): SecondFigures => ({
    second: 299,
    phase: 'healthy',
    offered: 2000,
    decisions: 2000,
    admitted: 1000,
    admittedBy: { redis: 1000, local: 0, 'fail-open': 0, 'fail-closed': 0, disabled: 0 },
    bySource: { redis: 2000, local: 0, 'fail-open': 0, 'fail-closed': 0, disabled: 0 },
    byReason: { decided: 2000 },
    redis: 2000,
    fallback: 0,
    denyCache: 0,
    breakers: Array.from({ length: 16 }, (_, i) => (i % 3 === 0 ? 'open' : i % 3 === 1 ? 'half-open' : 'closed')),
    latencyMs: { p50: 0.0123, p99: 51.26, max: 52, count: 2000 },
    ...overrides,
  });

  it('keeps every plain line within 80 columns at the extremes of the options', () => {
    for (const line of [
      ...plainHeader(),
      plainLine(figures({}), 1),
      plainLine(figures({ admitted: 99_999, fallback: 99_999, denyCache: 99_999 }), 1000),
    ]) {
      expect([...line].length).toBeLessThanOrEqual(80);
    }
    expect(plainLine(figures({ breakers: ['closed', 'open', 'half-open'] }), 100)).toMatch(/^ 300s healthy 1000 .* COH +0\.012 +51\.3$/);
  });

  it('draws admitted against the limit: full at the limit, marked over it', () => {
    expect(limitBar(0, 100)).toBe('··········|    ');
    expect(limitBar(50, 100)).toBe('█████·····|    ');
    expect(limitBar(100, 100)).toBe('██████████|    ');
    expect(limitBar(110, 100)).toBe('██████████|█   ');
    expect(limitBar(200, 100)).toBe('██████████|███»');
  });

  it('names the breakers of one event, and counts them beyond six', () => {
    expect(breakerEventText('opened', [2, 0], 'local')).toBe('breakers #0, #2 opened: the local window answers');
    expect(breakerEventText('closed', [1], 'fail-open')).toBe('breaker #1 closed: Redis decides again');
    expect(breakerEventText('opened', [0, 1, 2, 3, 4, 5, 6], 'fail-closed')).toBe('7 breakers opened: every call is denied');
  });

  it('wraps text at spaces, indenting the continuation', () => {
    expect(wrap('aaa bbb ccc', 7)).toEqual(['aaa bbb', '    ccc']);
    expect(wrap('one\n  two', 80)).toEqual(['one', '  two']);
  });
});
