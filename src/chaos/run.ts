/**
 * `runChaos()`: the user's limiter config, in `instances` processes, through the fault scenarios; a
 * verdict per promise per scenario, from every call the instances made.
 */
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BreakerState } from '../redis/Breaker.js';
import type { DecisionReason, DecisionSource } from '../types.js';
import { startBackend, type Backend } from './backend.js';
import { ChaosUsageError, loadChaosConfig } from './config.js';
import { figures, series, type Call, type InstanceRun } from './figures.js';
import { startFleet, type Fleet } from './fleet.js';
import type { FromWorker, WorkerSetup } from './protocol.js';
import { SCENARIOS, STANDARD, scenarioNames, type FaultContext, type Scenario, type Timing } from './scenarios.js';
import type {
  ChaosOptions,
  ChaosPhase,
  ChaosReport,
  ChaosScenario,
  LimiterProfile,
  ScenarioFigures,
  ScenarioOutcome,
  VerdictName,
} from './types.js';
import { verdicts } from './verdicts.js';

const VERDICTS: readonly VerdictName[] = ['bound', 'redis-bound', 'deadline', 'latency', 'lost', 'recovery', 'write-back'];
/** Reason: counting takes a few heartbeats (1 s each by default) on a loaded machine. */
const COUNT_WITHIN_MS = 15_000;
/** Offered load at most, all instances: 2 cores also run Redis, the proxy and the harness. */
const MAX_RATE = 2000;
/** Per scenario beyond its phases: processes started, counted, stopped. */
const OVERHEAD_MS = 1500;

/**
 * Runs the scenarios against the config module's limiter and returns the report (written to
 * `reportDir` when given by the caller with `writeReport`).
 * @throws {ChaosUsageError} for bad options, a config module that does not load or builds no limiter, an unknown scenario, an external server that does not answer.
 * @example
 * const report = await runChaos({ config: './limiter.config.mjs', instances: 3 });
 * assertChaos(report);
 */
export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const instances = checkInstances(options.instances);
  const chosen = chooseScenarios(options.scenarios);
  const seed = options.seed ?? randomInt(2 ** 31);
  const latencyBudgetMs = options.latencyBudgetMs ?? 100;
  if (!(Number.isFinite(latencyBudgetMs) && latencyBudgetMs > 0)) {
    throw new ChaosUsageError(`latencyBudgetMs must be a number of ms above 0; got ${String(options.latencyBudgetMs)}`);
  }
  const require = options.require ?? [];
  const unknown = require.filter((r) => !VERDICTS.includes(r));
  if (unknown.length > 0)
    throw new ChaosUsageError(`require: unknown verdict ${unknown.join(', ')}; expected some of ${VERDICTS.join(', ')}`);
  checkPhases('', options.phases);
  const loaded = await loadChaosConfig(options.config);
  const config = options.config; // as given: the instances run in this working directory, and errors name it so
  const started = Date.now();
  const backend = await startBackend(options, seed);
  const outcomes: ScenarioOutcome[] = [];
  let profile: LimiterProfile | undefined;
  let keys: string[] = [];
  const signal = options.signal;
  try {
    profile = await probe(backend, config);
    const onFleet = (p: LimiterProfile): void => {
      profile = p; // instance 0 of a whole fleet: its count and share, not the probe's alone
    };
    for (const [index, scenario] of chosen.entries()) {
      if (signal?.aborted === true) break;
      const timing = timingOf(scenario, profile, options.phases);
      keys = keysOf(loaded.keys, scenario.name);
      const left = chosen.slice(index).reduce((a, s) => a + plannedMs(s, profile as LimiterProfile, options.phases), 0);
      options.onProgress?.({
        scenario: scenario.name,
        index,
        total: chosen.length,
        elapsedMs: Date.now() - started,
        leftMs: left,
        event: 'start',
      });
      const skipped = typeof timing === 'string' ? timing : whySkipped(scenario, backend, instances);
      const outcome =
        skipped !== undefined
          ? skippedOutcome(scenario, skipped, instances)
          : await runScenario({
              scenario,
              timing: timing as Timing,
              backend,
              config,
              instances,
              keys,
              profile,
              rate: loaded.rate,
              latencyBudgetMs,
              require,
              signal,
              onFleet,
            });
      outcomes.push(outcome);
      options.onProgress?.({
        scenario: scenario.name,
        index,
        total: chosen.length,
        elapsedMs: Date.now() - started,
        leftMs: left - plannedMs(scenario, profile, options.phases),
        event: 'end',
        outcome,
      });
    }
  } finally {
    await backend.close();
  }
  return {
    tool: 'resilimit chaos',
    version: packageVersion(),
    startedAt: new Date(started).toISOString(),
    durationMs: Date.now() - started,
    config: options.config,
    seed,
    instances,
    limiter: profile as LimiterProfile,
    keys,
    backend: { kind: backend.kind, detail: backend.detail },
    machine: { node: process.version, cpus: cpus().length, loadavg: loadavg().map((l) => Math.round(l * 100) / 100) },
    latencyBudgetMs,
    require,
    scenarios: outcomes,
    passed: outcomes.every((o) => o.passed) && signal?.aborted !== true,
    interrupted: signal?.aborted === true,
  };
}

function checkInstances(value: number | undefined): number {
  const n = value ?? 3;
  if (!Number.isInteger(n) || n < 1 || n > 32) throw new ChaosUsageError(`instances must be an integer 1 … 32; got ${String(value)}`);
  return n;
}

function chooseScenarios(asked: ChaosOptions['scenarios']): Scenario[] {
  if (asked === undefined || asked === 'default') return SCENARIOS.filter((s) => s.inDefault);
  if (asked === 'all') return [...SCENARIOS];
  const chosen = [...asked].map((entry) =>
    typeof entry === 'string' ? (SCENARIOS.find((s) => s.name === entry) ?? entry) : ownScenario(entry),
  );
  const unknown = chosen.filter((s): s is string => typeof s === 'string');
  if (unknown.length > 0 || chosen.length === 0) {
    throw new ChaosUsageError(
      `scenarios: unknown ${unknown.length === 0 ? '(none given)' : unknown.join(', ')}; expected some of ${scenarioNames().join(', ')}, or default, or all`,
    );
  }
  return chosen as Scenario[];
}

/** @throws {ChaosUsageError} naming the phase (after `where`) when one is not an integer of ms, 100 … 600,000. */
function checkPhases(where: string, phases: ChaosOptions['phases']): void {
  for (const [name, value] of Object.entries(phases ?? {})) {
    if (!(Number.isInteger(value) && (value as number) >= 100 && (value as number) <= 600_000)) {
      throw new ChaosUsageError(`${where}phases.${name} must be an integer of ms, 100 … 600,000; got ${String(value)}`);
    }
  }
}

/** A scenario of the caller's, checked. */
function ownScenario(s: ChaosScenario): Scenario {
  if (typeof s !== 'object' || s === null || typeof s.name !== 'string' || typeof s.title !== 'string' || typeof s.start !== 'function') {
    throw new ChaosUsageError(`scenarios: a scenario of your own needs name, title and start(); got ${JSON.stringify(s)}`);
  }
  const phases = s.phases;
  checkPhases(`scenario ${s.name}: `, phases);
  return {
    name: s.name,
    title: s.title,
    inDefault: false,
    destructive: s.destructive === true,
    needsServer: s.needsServer === true,
    minInstances: s.minInstances ?? 1,
    ...(phases === undefined ? {} : { timing: () => ({ ...phases }) }),
    start: (c) => s.start(c),
    ...(s.stop === undefined ? {} : { stop: (c: FaultContext) => (s.stop as NonNullable<ChaosScenario['stop']>)(c) }),
  };
}

function timingOf(scenario: Scenario, profile: LimiterProfile, phases: ChaosOptions['phases']): Timing | string {
  return scenario.timing?.(profile) ?? { ...STANDARD, ...phases };
}

function plannedMs(scenario: Scenario, profile: LimiterProfile, phases: ChaosOptions['phases']): number {
  const t = timingOf(scenario, profile, phases);
  return typeof t === 'string' ? 0 : t.healthyMs + t.faultMs + t.recoveryMs + OVERHEAD_MS;
}

function whySkipped(scenario: Scenario, backend: Backend, instances: number): string | undefined {
  if (scenario.needsServer && backend.server === undefined) return 'needs a redis-server the harness started (not an external Redis)';
  if (scenario.destructive && !backend.destructive) return 'destructive: refused against an external Redis without --destructive';
  if (instances < scenario.minInstances) return `needs at least ${scenario.minInstances} instances (--instances)`;
  return undefined;
}

function skippedOutcome(scenario: Scenario, reason: string, instances: number): ScenarioOutcome {
  return {
    name: scenario.name,
    title: scenario.title,
    skipped: reason,
    instances,
    durationMs: 0,
    rate: 0,
    phases: [],
    verdicts: [],
    passed: true,
    errors: [],
  };
}

function keysOf(keys: number | readonly string[] | undefined, scenario: string): string[] {
  if (Array.isArray(keys)) return [...(keys as readonly string[])];
  return Array.from({ length: (keys as number | undefined) ?? 4 }, (_, i) => `chaos-${scenario}-k${i}`);
}

/** One instance, built and counted: the config works, and what the limiter says of itself. */
async function probe(backend: Backend, config: string): Promise<LimiterProfile> {
  await backend.clean();
  const { host, port } = await backend.proxy('resilimit-chaos-probe');
  const fleet = await startFleet([{ config, instance: 0, instances: 1, host, port, keys: ['probe'], countWithinMs: COUNT_WITHIN_MS }]);
  await fleet.stop(0);
  await backend.drop('resilimit-chaos-probe');
  return fleet.profile;
}

type ScenarioRun = {
  scenario: Scenario;
  timing: Timing;
  backend: Backend;
  config: string;
  instances: number;
  keys: readonly string[];
  profile: LimiterProfile;
  rate: number | undefined;
  latencyBudgetMs: number;
  require: readonly VerdictName[];
  signal: AbortSignal | undefined;
  onFleet: (profile: LimiterProfile) => void;
};

async function runScenario(run: ScenarioRun): Promise<ScenarioOutcome> {
  const { scenario, timing, backend, instances, keys, profile } = run;
  await backend.clean();
  const names = Array.from({ length: instances }, (_, i) => `resilimit-chaos-${scenario.name}-${i}`);
  const addresses = await Promise.all(names.map((n) => backend.proxy(n)));
  const setups: WorkerSetup[] = addresses.map(({ host, port }, instance) => ({
    config: run.config,
    instance,
    instances,
    host,
    port,
    keys,
    countWithinMs: COUNT_WITHIN_MS,
  }));
  const durationMs = timing.healthyMs + timing.faultMs + timing.recoveryMs;
  // Twice the limit per key within the healthy and fault phases (a long window fills within them too).
  const rate =
    run.rate ??
    Math.min(MAX_RATE, (2 * profile.limit * keys.length * 1000) / Math.min(profile.windowMs, timing.healthyMs + timing.faultMs));
  const context: FaultContext = { api: backend.api, proxies: names, admin: backend.admin, server: backend.server, profile, timing };
  let fleet: Fleet | undefined;
  const errors: string[] = [];
  let results: (Extract<FromWorker, { kind: 'done' }> | undefined)[] = [];
  let t0 = Number.NaN;
  try {
    fleet = await startFleet(setups);
    run.onFleet(fleet.profile);
    t0 = Date.now() + 100; // every instance starts its load together, once all are ready
    fleet.go(t0, rate / instances);
    const faultAt = t0 + timing.healthyMs;
    if (await sleepUntil(faultAt, run.signal)) {
      await scenario.start(context).catch((error: unknown) => errors.push(`fault start: ${String(error)}`));
      if (await sleepUntil(faultAt + timing.faultMs, run.signal)) {
        await scenario.stop?.(context).catch((error: unknown) => errors.push(`fault stop: ${String(error)}`));
        await sleepUntil(t0 + durationMs, run.signal);
      }
    }
    results = await fleet.stop(2 * profile.timeoutMs + 1000);
  } finally {
    fleet?.kill();
    if (run.signal?.aborted === true) await scenario.stop?.(context).catch(() => undefined);
    await backend.api.reset().catch(() => undefined);
    await Promise.all(names.map((n) => backend.drop(n)));
  }
  return outcome(run, { results, t0, durationMs, rate, errors });
}

function outcome(
  run: ScenarioRun,
  m: { results: (Extract<FromWorker, { kind: 'done' }> | undefined)[]; t0: number; durationMs: number; rate: number; errors: string[] },
): ScenarioOutcome {
  const { scenario, timing, profile, keys } = run;
  const phases: ChaosPhase[] = [
    { name: 'healthy', startMs: 0, endMs: timing.healthyMs, fault: false },
    { name: scenario.name, startMs: timing.healthyMs, endMs: timing.healthyMs + timing.faultMs, fault: true },
    { name: 'recovery', startMs: timing.healthyMs + timing.faultMs, endMs: m.durationMs, fault: false },
  ];
  const calls: Call[] = [];
  const runs: InstanceRun[] = m.results.map((r, instance) => {
    if (r === undefined) {
      m.errors.push(`instance ${instance} did not report (killed)`);
      return { stalls: [], states: [], unanswered: 0, unhandledRejections: 0, stats: undefined };
    }
    for (const [issued, latency, k, allowed, source, reason, admitted, limit, threw] of r.calls) {
      calls.push({
        instance,
        key: keys[k] as string,
        issuedMs: issued - m.t0,
        latencyMs: latency,
        allowed: allowed === 1,
        source: source as DecisionSource | 'none',
        reason: reason as DecisionReason | 'none',
        admittedAtMs: admitted < 0 ? undefined : admitted - m.t0,
        limit,
        threw: threw === 1,
      });
    }
    m.errors.push(...r.errors.map((e) => `instance ${instance}: ${e}`));
    return {
      stalls: r.stalls.map(([at, gap]) => ({ atMs: at - m.t0, gapMs: gap })),
      states: r.states.map(([at, state]: [number, BreakerState]) => ({ atMs: at - m.t0, state })),
      unanswered: r.unanswered,
      unhandledRejections: r.unhandledRejections,
      stats: r.stats,
    };
  });
  const measured = figures({ calls, runs, phases, windowMs: profile.windowMs });
  const f =
    scenario.name === 'long-outage' && profile.leaseMs !== undefined
      ? { ...measured, afterLease: afterLease(calls, timing, profile.leaseMs) }
      : measured;
  const checked = verdicts({
    figures: f,
    mode: profile.mode,
    timeoutMs: profile.timeoutMs,
    latencyBudgetMs: run.latencyBudgetMs,
    require: run.require,
    recovers: true,
  });
  const incomplete = m.results.some((r) => r === undefined) || run.signal?.aborted === true;
  return {
    name: scenario.name,
    title: scenario.title,
    instances: run.instances,
    durationMs: m.durationMs,
    rate: Math.round(m.rate),
    phases,
    figures: f,
    series: series({ calls, runs, durationMs: m.durationMs, windowMs: profile.windowMs, busiest: f.mostAdmitted.key, stepMs: 100 }),
    verdicts: checked,
    passed: !incomplete && checked.every((v) => v.pass !== false),
    errors: m.errors.slice(0, 100),
  };
}

/** Admitted a second after the lease ended (from lease end + 1 s, for 1 s), against the last healthy second. */
function afterLease(calls: readonly Call[], timing: Timing, leaseMs: number): NonNullable<ScenarioFigures['afterLease']> {
  const admitted = (from: number): number => calls.filter((c) => c.allowed && c.issuedMs >= from && c.issuedMs < from + 1000).length;
  const healthyPerSecond = admitted(timing.healthyMs - 1000);
  const admittedPerSecond = admitted(timing.healthyMs + leaseMs + 1000);
  return { admittedPerSecond, healthyPerSecond, ratio: healthyPerSecond === 0 ? 0 : admittedPerSecond / healthyPerSecond };
}

/** Sleeps until the epoch ms `at`; false when aborted first. */
async function sleepUntil(at: number, signal: AbortSignal | undefined): Promise<boolean> {
  const wait = at - Date.now();
  if (wait > 0) await sleep(wait, undefined, signal === undefined ? {} : { signal }).catch(() => undefined);
  return signal?.aborted !== true;
}

function packageVersion(): string {
  try {
    const json = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return json.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}
