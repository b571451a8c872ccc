/**
 * `resilimit chaos` interrupted: the built command (`node bin/resilimit.js`, run from the repository's
 * root on a config module importing dist/ by absolute URL) is sent SIGINT once a scenario runs. It
 * must exit 1, write a report marked `interrupted`, and leave no process: not the redis-server and
 * the proxy it started (their pids are in the report), nor any instance's process. Needs the build
 * (`npm test` builds before the chaos project runs) and `redis-server` on PATH.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ChaosReport } from '../src/chaos/types.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DIST = pathToFileURL(join(ROOT, 'dist/index.js')).href;
let dir: string;
let configFile: string;
/** Every process a test saw under its command: killed after the test if still there (a failed test must not leak). */
const seen = new Set<number>();

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/chaos/cli.js'))) throw new Error('run `npm run build` first (`npm test` does): the command runs dist/');
  dir = mkdtempSync(join(tmpdir(), 'resilimit-interrupt-'));
  configFile = join(dir, 'limiter.config.mjs');
  writeFileSync(
    configFile,
    `import { createRedisClient, ResilientLimiter } from ${JSON.stringify(DIST)};
export function createLimiter({ host, port }) {
  const redis = createRedisClient({ host, port });
  const limiter = new ResilientLimiter({ redis, prefix: 'app:', limit: 20, windowMs: 1000 });
  return { limiter, close: () => redis.disconnect() };
}
`,
  );
});

afterEach(() => {
  for (const pid of seen) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
  seen.clear();
});

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** Alive: signal 0 reaches it and it is not a zombie (exited, waiting for a parent to reap it). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false; // gone between the two looks
  }
}

/** Whether `pid` is gone within `ms` (a process just sent SIGKILL takes a moment). */
async function goneWithin(pid: number, ms: number): Promise<boolean> {
  for (const until = Date.now() + ms; isAlive(pid); await sleep(20)) if (Date.now() > until) return false;
  return true;
}

/** `pid`'s children, with their command lines. */
function children(pid: number): { pid: number; cmd: string }[] {
  let out: string;
  try {
    out = execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' });
  } catch {
    return []; // pgrep exits 1 when there is none
  }
  return out
    .split(/\s+/)
    .filter((w) => /^\d+$/.test(w))
    .map((w) => {
      const child = Number(w);
      let cmd = '';
      try {
        cmd = readFileSync(`/proc/${child}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      } catch {
        // exited meanwhile
      }
      return { pid: child, cmd };
    });
}

type Run = {
  child: ChildProcess;
  stderr: () => string;
  stdout: () => string;
  exit: Promise<{ code: number | null; signal: string | null }>;
};

/** `node bin/resilimit.js chaos …` from the repository's root, in a process group of its own (so a Ctrl-C can be sent to it alone). */
function chaos(report: string, scenarios = 'outage,frozen'): Run {
  const child = spawn(
    process.execPath,
    ['bin/resilimit.js', 'chaos', '--config', configFile, '--scenarios', scenarios, '--instances', '2', '--report', report],
    { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  if (child.pid !== undefined) seen.add(child.pid);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => void (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => void (stderr += d.toString()));
  const exit = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, stdout: () => stdout, stderr: () => stderr, exit };
}

async function waitFor(run: Run, text: string, ms: number): Promise<void> {
  for (const until = Date.now() + ms; !run.stderr().includes(text); await sleep(50)) {
    if (Date.now() > until) throw new Error(`no ${JSON.stringify(text)} on stderr within ${ms} ms:\n${run.stderr()}`);
  }
}

/** Exit, or fail the test (killing it) if it does not exit within `ms`: an interrupted run that hangs leaks too. */
async function exited(run: Run, ms: number): Promise<{ code: number | null; signal: string | null }> {
  const timeout = sleep(ms).then(() => undefined);
  const result = await Promise.race([run.exit, timeout]);
  if (result === undefined) {
    run.child.kill('SIGKILL');
    throw new Error(`the command did not exit within ${ms} ms of SIGINT:\n${run.stderr()}`);
  }
  return result;
}

/** The processes the command started: one redis-server, the proxy, and one worker per instance. */
function started(pid: number, instances: number): { redis: number; proxy: number; workers: number[] } {
  const list = children(pid);
  for (const c of list) seen.add(c.pid);
  const redis = list.filter((c) => c.cmd.startsWith('redis-server'));
  const proxy = list.filter((c) => c.cmd.includes('chaos/toxiproxy/main.js'));
  const workers = list.filter((c) => c.cmd.includes('chaos/worker.js'));
  const shown = list.map((c) => `${c.pid} ${c.cmd}`).join('\n');
  expect(redis, shown).toHaveLength(1);
  expect(proxy, shown).toHaveLength(1);
  expect(workers, shown).toHaveLength(instances);
  return { redis: redis[0]!.pid, proxy: proxy[0]!.pid, workers: workers.map((w) => w.pid) };
}

/** The report, and the pids its backend names. */
function report(path: string): { report: ChaosReport; redis: number; proxy: number } {
  const r = JSON.parse(readFileSync(join(path, 'report.json'), 'utf8')) as ChaosReport;
  const pids = /redis-server pid (\d+) on .*proxy, pid (\d+)/.exec(r.backend.detail);
  if (pids === null) throw new Error(`no pids in the report's backend: ${r.backend.detail}`);
  return { report: r, redis: Number(pids[1]), proxy: Number(pids[2]) };
}

async function expectGone(pids: readonly number[]): Promise<void> {
  for (const pid of pids) {
    expect(await goneWithin(pid, 2000), `pid ${pid} is still running`).toBe(true);
    expect(() => process.kill(pid, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
  }
}

describe('resilimit chaos, interrupted', () => {
  it('on SIGINT during the first scenario: exits 1, writes the report marked interrupted, leaves no process', async () => {
    const out = join(dir, 'sigint');
    const run = chaos(out);
    await waitFor(run, '[1/2]', 30_000);
    await sleep(3000);
    const pid = run.child.pid!;
    const before = started(pid, 2);
    process.kill(pid, 'SIGINT');
    const { code, signal } = await exited(run, 30_000);
    expect(signal).toBeNull();
    expect(code, run.stdout() + run.stderr()).toBe(1);
    expect(run.stderr()).toContain('resilimit: interrupted: stopping the scenario and every process it started');
    expect(run.stderr()).toContain('resilimit: interrupted; the report holds what was measured until then');
    expect(run.stderr()).not.toContain('[2/2]');

    const { report: r, redis, proxy } = report(out);
    expect(r.interrupted).toBe(true);
    expect(r.passed).toBe(false);
    expect(r.scenarios.map((s) => s.name)).toEqual(['outage']);
    expect(r.scenarios[0]?.passed).toBe(false); // incomplete
    expect(r.scenarios[0]?.figures?.decisions).toBeGreaterThan(0); // what was measured until then
    expect(existsSync(join(out, 'report.html'))).toBe(true);
    // The pids the report names are the processes seen under the command.
    expect([redis, proxy]).toEqual([before.redis, before.proxy]);
    await expectGone([redis, proxy, ...before.workers]);
    expect(children(pid)).toEqual([]);
  }, 60_000);

  it('on Ctrl-C (SIGINT to the whole process group) while redis-server is frozen: the same, nothing left', async () => {
    const out = join(dir, 'ctrl-c');
    const run = chaos(out, 'frozen');
    await waitFor(run, '[1/1]', 45_000);
    const pid = run.child.pid!;
    // frozen: a healthy phase of 2.5 s, then SIGSTOP for 3 s. Interrupted once redis-server is stopped.
    await sleep(1000);
    const before = started(pid, 2);
    for (const until = Date.now() + 10_000; !/\) T /.test(readFileSync(`/proc/${before.redis}/stat`, 'utf8')); await sleep(20)) {
      if (Date.now() > until) throw new Error(`redis-server (pid ${before.redis}) was not stopped within 10 s:\n${run.stderr()}`);
    }
    process.kill(-pid, 'SIGINT');
    const { code } = await exited(run, 30_000);
    expect(code, run.stdout() + run.stderr()).toBe(1);

    const { report: r, redis, proxy } = report(out);
    expect(r.interrupted).toBe(true);
    expect(r.passed).toBe(false);
    expect(r.scenarios.map((s) => s.name)).toEqual(['frozen']);
    expect(r.scenarios[0]?.passed).toBe(false);
    expect([redis, proxy]).toEqual([before.redis, before.proxy]);
    await expectGone([redis, proxy, ...before.workers]);
  }, 90_000);
});
