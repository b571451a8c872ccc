/**
 * The chaos suite on the public harness (`resilimit/chaos`, the same code `npx resilimit chaos` runs),
 * with the repository's own configuration (`chaos/configs/repo.mjs`): every scenario's verdicts must
 * hold, and each kind of fault must show the breaker doing what it is for. Needs the built package
 * (`npm test` builds first) and `redis-server` on PATH; `CHAOS_BACKEND=external` with `REDIS_URL`,
 * `TOXIPROXY_URL` (and `CHAOS_REDIS_UPSTREAM`, `CHAOS_PROXY_PORTS`) runs it on your own servers.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type * as Chaos from '../src/chaos.ts';
import type { ChaosOptions, ChaosReport, ScenarioOutcome } from '../src/chaos/types.ts';

// The built entry, as users import it: its instances' processes run the compiled worker.
const { runChaos, writeReport } = (await import(new URL('../dist/chaos.js', import.meta.url).href)) as typeof Chaos;

const CONFIG = fileURLToPath(new URL('./configs/repo.mjs', import.meta.url));
/**
 * 6 s a scenario: healthy 1.5 s (the windows fill), the fault 2 s, 2.5 s to recover. A fault of 1.5 s
 * made the calls waiting for the deadline before the breaker opened the p99 of a busy-script fault
 * on a loaded machine (41.6 ms net of stalls).
 */
const PHASES = { healthyMs: 1500, faultMs: 2000, recoveryMs: 2500 } as const;
const reports: ChaosReport[] = [];

function external(): ChaosOptions['external'] | undefined {
  if (process.env['CHAOS_BACKEND'] !== 'external') return undefined;
  const { REDIS_URL: redisUrl, TOXIPROXY_URL: toxiproxyUrl, CHAOS_REDIS_UPSTREAM: upstream, CHAOS_PROXY_PORTS: ports } = process.env;
  if (redisUrl === undefined || toxiproxyUrl === undefined) throw new Error('CHAOS_BACKEND=external needs REDIS_URL and TOXIPROXY_URL');
  const [from = 0, to = from] = (ports ?? '').split('-').map(Number);
  return {
    redisUrl,
    toxiproxyUrl,
    ...(upstream === undefined ? {} : { upstream }),
    ...(ports === undefined ? {} : { proxyPorts: Array.from({ length: to - from + 1 }, (_, i) => from + i) }),
    destructive: true,
  };
}

/** Runs `scenarios` with the repository's config, `env` varying it for this run (the instances inherit it). */
async function chaos(name: string, options: Partial<ChaosOptions>, env: Record<string, string> = {}): Promise<ChaosReport> {
  const saved = { ...process.env };
  Object.assign(process.env, env);
  try {
    const ext = external();
    const report = await runChaos({
      config: CONFIG,
      instances: 1,
      phases: PHASES,
      seed: 1,
      ...(ext === undefined ? {} : { external: ext }),
      ...options,
    });
    reports.push(report);
    console.log(`chaos ${name}: ${report.backend.kind} (${report.backend.detail})`);
    return report;
  } finally {
    for (const key of Object.keys(env)) {
      if (saved[key] === undefined) delete process.env[key];
      else process.env[key] = saved[key];
    }
  }
}

afterAll(async () => {
  for (const [i, report] of reports.entries()) {
    const dir = join(process.env['CHAOS_REPORT_DIR'] ?? 'reports/chaos', `${report.startedAt.replace(/[:.]/g, '-')}-${i}`);
    const files = await writeReport(report, dir);
    console.log(`chaos report: ${files.markdown}`);
  }
});

function outcome(report: ChaosReport, name: string): ScenarioOutcome {
  const found = report.scenarios.find((s) => s.name === name);
  if (found === undefined) throw new Error(`no outcome for ${name}`);
  return found;
}

/** Every verdict held; the figures printed for the log. */
function held(o: ScenarioOutcome, skip: (note: string) => void): NonNullable<ScenarioOutcome['figures']> | undefined {
  if (o.skipped !== undefined) {
    skip(o.skipped);
    return undefined;
  }
  const f = o.figures as NonNullable<ScenarioOutcome['figures']>;
  console.log(
    `${o.name}: ${f.decisions} decisions, most admitted ${f.mostAdmitted.count} of ${f.mostAdmitted.limit}, fault p99 ${f.faultLatencyNetOfStalls.p99.toFixed(2)} ms net of stalls, open ${f.timeToOpenMs?.toFixed(0) ?? '—'} ms, close ${f.timeToCloseMs?.toFixed(0) ?? '—'} ms, reasons ${JSON.stringify(f.byReason)}`,
  );
  expect(o.verdicts.filter((v) => v.pass === false)).toEqual([]);
  expect(o.passed, o.errors.join('\n')).toBe(true);
  return f;
}

/** A Redis slower than the deadline, dead or refusing: the breaker opens within 1 s, closes within 2 s of the end, and the fault's calls are answered fast. */
function opensAndCloses(f: NonNullable<ScenarioOutcome['figures']>, { opens = true, fast = true } = {}): void {
  if (opens) expect(f.timeToOpenMs, 'time to open').toBeLessThan(1000);
  expect(f.timeToCloseMs, 'time to close').toBeLessThan(2000);
  // Net of this process's stalls: a fault that spawns a process or a GC delays every pending answer.
  // The calls in flight before Redis is called slow wait the deadline: at 400 calls/s a 2 s fault has
  // 800 calls, and its 1% (8 calls, 20 ms of traffic) is less than one deadline (50 ms) of them, so
  // the p99 cannot tell "the deadline once" from more. The 5% (40 calls, 100 ms of traffic) can.
  if (fast) expect(f.faultLatencyNetOfStalls.p95, 'fault p95, net of stalls').toBeLessThan(10);
}

/** A Redis that is slow but within the deadline, or fragments its replies: the breaker stays closed and Redis decides. */
function staysClosed(f: NonNullable<ScenarioOutcome['figures']>): void {
  expect(f.timeToOpenMs, 'the breaker never opened').toBeUndefined();
  const byRedis = (f.byReason.decided ?? 0) + (f.byReason['deny-cache'] ?? 0);
  expect(byRedis / f.decisions, 'Redis decided (its deny cache included)').toBeGreaterThanOrEqual(0.9);
}

describe('chaos: one instance under each fault', () => {
  const SINGLE = [
    'latency-below',
    'latency-above',
    'outage',
    'black-hole',
    'reset-peer',
    'truncated',
    'fragmented',
    'bandwidth',
    'flapping',
    'frozen',
    'killed',
    'pause-writes',
    'busy-script',
    'misconf',
    'flushall',
  ];
  let report: Promise<ChaosReport> | undefined;
  const run = (): Promise<ChaosReport> => {
    report ??= chaos('one instance', { scenarios: SINGLE }, { CHAOS_OPTIONS: JSON.stringify({ local: { instances: 1 } }) });
    return report;
  };
  const expectations: Record<string, (f: NonNullable<ScenarioOutcome['figures']>) => void> = {
    'latency-below': staysClosed,
    fragmented: staysClosed,
    // A Redis that answers slowly but steadily is not silent: calls wait for the deadline until the
    // error rate opens the breaker, and each half-open trial waits it too (bounded by the deadline verdict).
    bandwidth: (f) => opensAndCloses(f, { fast: false }),
    // Whether the breaker opens depends on where the cut falls in the error window: not asserted.
    truncated: (f) => opensAndCloses(f, { opens: false }),
    flapping: (f) => opensAndCloses(f, { opens: false }),
    killed: (f) => opensAndCloses(f, { opens: false }),
    flushall: () => undefined,
    misconf: (f) => {
      opensAndCloses(f);
      // MISCONF is Redis unable to take the call, as OOM or READONLY: never read as the caller's bug.
      expect(f.byReason['redis-reply-error'] ?? 0).toBe(0);
    },
  };
  for (const name of SINGLE) {
    it(name, async (context) => {
      const f = held(outcome(await run(), name), (note) => context.skip(note));
      if (f !== undefined) (expectations[name] ?? opensAndCloses)(f);
    }, 240_000);
  }
});

describe('chaos: a 5 s cut over 200 keys, 10 s windows', () => {
  it('journals every call answered locally and writes it back', async (context) => {
    // 2,000 calls/s over 200 keys: 100 calls per key per window, 5× the limit.
    const report = await chaos(
      'many keys',
      { scenarios: ['outage'], phases: { healthyMs: 1500, faultMs: 5000, recoveryMs: 2500 } },
      { CHAOS_OPTIONS: JSON.stringify({ windowMs: 10_000, local: { instances: 1 } }), CHAOS_KEYS: '200', CHAOS_RATE: '2000' },
    );
    const f = held(outcome(report, 'outage'), (note) => context.skip(note));
    if (f === undefined) return;
    opensAndCloses(f);
    // Each key had 15 of its 20 admitted before the cut (the warm window knows): about 5 more each.
    expect(f.writeBack.answeredLocally).toBeGreaterThan(500);
    expect(f.writeBack.written + f.writeBack.present + f.writeBack.expired).toBe(f.writeBack.answeredLocally);
  }, 120_000);
});

describe('chaos: four instances sharing the limit through an outage', () => {
  it('holds the bound with reconciliation, and goes over without it', async () => {
    const reconciled = outcome(await chaos('four, reconciled', { instances: 4, scenarios: ['outage'] }), 'outage');
    held(reconciled, () => undefined);
    const without = outcome(
      await chaos('four, not reconciled', { instances: 4, scenarios: ['outage'] }, { CHAOS_OPTIONS: JSON.stringify({ reconcile: false }) }),
      'outage',
    );
    // Without reconciliation Redis grants a fresh limit on top of the outage's calls.
    expect(without.figures?.mostAdmitted.count).toBeGreaterThan(reconciled.figures?.mostAdmitted.count ?? 0);
  }, 120_000);
});
