/**
 * `runChaos()`: the user's limiter config, in `instances` processes, through the fault scenarios; a
 * verdict per promise per scenario, from every call the instances made.
 */
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { startBackend, type Backend } from './backend.js';
import { ChaosUsageError, loadChaosConfig } from './config.js';
import { startFleet, type Fleet } from './fleet.js';
import { outcome, type ScenarioRun } from './outcome.js';
import type { FromWorker, WorkerSetup } from './protocol.js';
import { SCENARIOS, STANDARD, scenarioNames, type FaultContext, type Scenario, type Timing } from './scenarios.js';
import type { ChaosOptions, ChaosReport, ChaosScenario, LimiterProfile, ScenarioOutcome, VerdictName } from './types.js';
import { requireRuntime } from '../base/runtime.js';

/** The verdicts of a rate limit (`ResilientLimiter`), and those of a concurrency limit (`ConcurrencyLimiter`). */
const RATE_VERDICTS: readonly VerdictName[] = ['bound', 'redis-bound', 'deadline', 'latency', 'lost', 'recovery', 'write-back'];
const SLOT_VERDICTS: readonly VerdictName[] = ['slot-bound', 'errors', 'slot-lost', 'recovery'];
const VERDICTS: readonly VerdictName[] = [...RATE_VERDICTS, ...SLOT_VERDICTS.filter((v) => !RATE_VERDICTS.includes(v))];
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
  requireRuntime();
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
    const kinds = profile.slots === undefined ? RATE_VERDICTS : SLOT_VERDICTS;
    const other = require.filter((r) => !kinds.includes(r));
    if (other.length > 0) {
      throw new ChaosUsageError(
        `require: ${other.join(', ')} not a verdict of a ${profile.slots === undefined ? 'ResilientLimiter' : 'ConcurrencyLimiter'}; expected some of ${kinds.join(', ')}`,
      );
    }
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
  // A concurrency limit's load is its tasks (`parallel` per instance), not a rate.
  const slots = profile.slots;
  const rate =
    slots !== undefined
      ? 0
      : (run.rate ??
        Math.min(MAX_RATE, (2 * profile.limit * keys.length * 1000) / Math.min(profile.windowMs, timing.healthyMs + timing.faultMs)));
  const context: FaultContext = { api: backend.api, proxies: names, admin: backend.admin, server: backend.server, profile, timing };
  let fleet: Fleet | undefined;
  const errors: string[] = [];
  let results: (Extract<FromWorker, { kind: 'done' | 'slots-done' }> | undefined)[] = [];
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
    // A task ends its hold (and perhaps a wait) before it stops.
    results = await fleet.stop(2 * profile.timeoutMs + 1000 + (slots === undefined ? 0 : slots.holdMs[1] + slots.maxWaitMs));
  } finally {
    fleet?.kill();
    if (run.signal?.aborted === true) await scenario.stop?.(context).catch(() => undefined);
    await backend.api.reset().catch(() => undefined);
    await Promise.all(names.map((n) => backend.drop(n)));
  }
  return outcome(run, { results, t0, durationMs, rate, errors });
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
