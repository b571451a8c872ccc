/**
 * The chaos harness as users get it: the package packed, installed into a fresh app beside ioredis,
 * and `resilimit chaos` run on config modules this test writes. Needs the built package (`npm test`
 * builds before the chaos project runs) and `redis-server` on PATH.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { respOnce } from '../src/chaos/resp.ts';
import { startRedisServer, type RedisServer } from '../src/chaos/redisServer.ts';
import { startToxiproxyServer, type ToxiproxyServer } from '../src/chaos/toxiproxy/spawn.ts';
import type { ChaosReport } from '../src/chaos/types.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
let dir: string;
let app: string;

/** A config module: a limit of 20 per second, through `createRedisClient`, with `options` merged in. */
function config(name: string, options: Record<string, unknown>): string {
  const file = join(app, name);
  writeFileSync(
    file,
    `import { createRedisClient, ResilientLimiter } from 'resilimit';
export function createLimiter({ host, port }) {
  const redis = createRedisClient({ host, port });
  const limiter = new ResilientLimiter({ redis, prefix: 'app:', limit: 20, windowMs: 1000, ...${JSON.stringify(options)} });
  return { limiter, close: () => redis.disconnect() };
}
`,
  );
  return file;
}

type Run = { code: number | null; stdout: string; stderr: string };

/** `resilimit <args>` as installed in the app, with this Node; resolves when it exits. */
function resilimit(args: readonly string[]): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(app, 'node_modules/resilimit/bin/resilimit.js'), ...args], { cwd: app });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => void (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => void (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

function report(run: string): ChaosReport {
  return JSON.parse(readFileSync(join(app, run, 'report.json'), 'utf8')) as ChaosReport;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'resilimit-app-'));
  app = join(dir, 'app');
  execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], { cwd: ROOT, stdio: 'ignore' });
  execFileSync('mkdir', ['-p', app]);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  // From npm's cache where it can: `npm ci` filled it with ioredis 6 for the repository.
  execFileSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', join(dir, `resilimit-${version}.tgz`), 'ioredis@6'], {
    cwd: app,
    stdio: 'ignore',
  });
}, 120_000);

afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe('resilimit chaos, installed from the packed package', () => {
  it('holds on three instances, one cut off, and writes JSON, Markdown and HTML', async () => {
    // The default beat (a twelfth of the window) reserves a cut-off instance's share in time: with
    // beats of 1 s, one of three cut off admitted 23–27 of 20 (docs/options.md, partial failures).
    // A limit of 30: three even shares of 10 (at 20, shares of ceil(20 / 3) = 7 already sum to 21).
    config('limiter.config.mjs', { mode: 'local', limit: 30 });
    const run = await resilimit([
      'chaos',
      '--config',
      './limiter.config.mjs',
      '--scenarios',
      'one-cut-off',
      '--instances',
      '3',
      '--seed',
      '7',
      '--report',
      'out',
    ]);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stderr).toMatch(/\[1\/1\] one-cut-off … \d+ s elapsed, about \d+ s left/);
    const r = report('out');
    expect(r.passed).toBe(true);
    expect(r.limiter).toMatchObject({ limit: 30, windowMs: 1000, mode: 'local', timeoutMs: 50 });
    for (const s of r.scenarios) {
      expect(s.figures?.decisions).toBeGreaterThan(1000);
      const bound = s.verdicts.find((v) => v.name === 'bound');
      expect(bound?.pass, `${s.name}: ${bound?.figure}`).toBe(true);
      expect(s.figures?.mostAdmitted.count).toBeGreaterThanOrEqual(30); // the load reached the limit
    }
    const html = readFileSync(join(app, 'out/report.html'), 'utf8');
    expect(html.match(/<svg/g)?.length).toBe(3);
    expect(readFileSync(join(app, 'out/report.md'), 'utf8')).toContain('one-cut-off');
  }, 90_000);

  it('measures across processes: three instances that each think they are alone go over when one is cut off', async () => {
    config('alone.config.mjs', { local: { instances: 1 } });
    const run = await resilimit([
      'chaos',
      '--config',
      './alone.config.mjs',
      '--scenarios',
      'one-cut-off',
      '--instances',
      '3',
      '--report',
      'alone',
    ]);
    expect(run.code, run.stdout + run.stderr).toBe(1);
    const bound = report('alone').scenarios[0]?.verdicts.find((v) => v.name === 'bound');
    // The cut-off instance admits the whole limit locally while the other two take it from Redis.
    expect(bound?.pass).toBe(false);
    expect(report('alone').scenarios[0]?.figures?.mostAdmitted.ratio).toBeGreaterThanOrEqual(1.5);
    expect(run.stdout).toMatch(/✗ one-cut-off bound: \d\.\d\d×/);
  }, 60_000);

  it("reports fail-open's over-admission, and fails it when the bound is required", async () => {
    // Without --require, fail-open's bound is reported with no promise (test/unit/chaosFigures.test.ts).
    config('open.config.mjs', { mode: 'fail-open' });
    const run = await resilimit([
      'chaos',
      '--config',
      './open.config.mjs',
      '--scenarios',
      'outage',
      '--instances',
      '2',
      '--require',
      'bound',
      '--report',
      'open',
    ]);
    expect(run.code, run.stdout + run.stderr).toBe(1);
    const outage = report('open').scenarios[0];
    expect(outage?.figures?.mostAdmitted.ratio).toBeGreaterThan(1.5); // offered twice the limit, all admitted while cut
    expect(outage?.verdicts.find((v) => v.name === 'bound')?.bound).toBe("≤ 1.1× in 'fail-open'");
    expect(run.stdout).toMatch(/✗ outage bound: [12]\.\d\d×/);
  }, 60_000);

  it('fails the latency verdict of a 2 s deadline, saying by how much', async () => {
    config('slow.config.mjs', { breaker: { timeoutMs: 2000 } });
    const run = await resilimit([
      'chaos',
      '--config',
      './slow.config.mjs',
      '--scenarios',
      'latency-above',
      '--instances',
      '1',
      '--report',
      'slow',
    ]);
    expect(run.code, run.stdout + run.stderr).toBe(1);
    const latency = report('slow').scenarios[0]?.verdicts.find((v) => v.name === 'latency');
    expect(latency?.pass).toBe(false);
    expect(latency?.detail).toMatch(/ms over the budget \(breaker deadline 2000 ms\)/);
    expect(run.stdout).toContain('latency-above latency');
  }, 60_000);

  it('exits 2 naming the file for a config that does not load, exports nothing usable, or misspells an option', async () => {
    writeFileSync(join(app, 'syntax.config.mjs'), 'export function createLimiter( {\n');
    writeFileSync(join(app, 'empty.config.mjs'), 'export const limit = 20;\n');
    config('typo.config.mjs', { windowMS: 1000 });
    const cases: [string, RegExp][] = [
      ['syntax.config.mjs', /config file \.\/syntax\.config\.mjs does not load: SyntaxError/],
      [
        'empty.config.mjs',
        /config file \.\/empty\.config\.mjs: expected a createLimiter\(\{ host, port, instance \}\) function.*named exports limit/,
      ],
      ['typo.config.mjs', /config file \.\/typo\.config\.mjs: createLimiter\(\) threw: .*ERR_RESILIMIT_INVALID_OPTION.*windowMS/],
      ['missing.config.mjs', /config file \.\/missing\.config\.mjs: not found/],
    ];
    for (const [file, message] of cases) {
      const run = await resilimit(['chaos', '--config', `./${file}`, '--scenarios', 'outage', '--instances', '1']);
      expect(run.code, `${file}: ${run.stderr}`).toBe(2);
      expect(run.stderr).toMatch(message);
    }
    const usage = await resilimit(['chaos', '--config', './limiter.config.mjs', '--scenarios', 'frozn']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/unknown frozn; expected some of latency-below, .*frozen/);
  }, 60_000);

  describe('against an external Redis', () => {
    let redis: RedisServer;
    let proxy: ToxiproxyServer;
    beforeAll(async () => {
      redis = await startRedisServer();
      proxy = await startToxiproxyServer();
    });
    afterAll(async () => {
      await Promise.allSettled([redis?.close(), proxy?.stop()]);
    });

    it('refuses the destructive scenarios without --destructive, and never empties it', async () => {
      await respOnce({ host: redis.host, port: redis.port }, 'SET', 'precious', 'kept');
      const run = await resilimit([
        'chaos',
        '--config',
        './limiter.config.mjs',
        '--scenarios',
        'outage,killed,flushall',
        '--instances',
        '1',
        '--redis',
        redis.url,
        '--toxiproxy',
        proxy.url,
        '--report',
        'external',
      ]);
      expect(run.code, run.stdout + run.stderr).toBe(0);
      const [outage, killed, flushall] = report('external').scenarios;
      expect(outage?.skipped).toBeUndefined();
      expect(killed?.skipped).toMatch(/needs a redis-server the harness started/);
      expect(flushall?.skipped).toMatch(/destructive: refused against an external Redis without --destructive/);
      expect(await respOnce({ host: redis.host, port: redis.port }, 'GET', 'precious')).toBe('kept');
    }, 60_000);
  });
});
