/**
 * `resilimit/metrics` on a real Redis with real limiters: the OpenTelemetry instruments, read through
 * the SDK; the prom-client example of docs/metrics.md, scraped; and the promise that the main entry costs
 * nothing (it never loads `@opentelemetry/api` and leaves the decision channel without subscribers).
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { hasSubscribers, subscribe, unsubscribe } from 'node:diagnostics_channel';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import { metrics } from '@opentelemetry/api';
import { MeterProvider, type Histogram as HistogramPoint, type MetricData } from '@opentelemetry/sdk-metrics';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createRedisClient,
  ErrorCode,
  ResilientLimiter,
  type DecisionMessage,
  type LimiterDecision,
  type ResilientLimiterOptions,
} from '../../src/index.js';
import { DURATION_BUCKETS_S, instrumentLimiter, MetricName, type LimiterInstrumentation } from '../../src/metrics.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';
import { collect, TestReader } from '../support/metrics.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

let server: RedisHandle;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];
const instrumentations: LimiterInstrumentation[] = [];
const stops: (() => void)[] = [];

beforeAll(async () => {
  server = await useRedis();
});
afterEach(async () => {
  for (const i of instrumentations.splice(0)) i.close();
  for (const stop of stops.splice(0)) stop();
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
  metrics.disable();
});
afterAll(async () => {
  await server?.close();
});

async function limiter(options: Partial<ResilientLimiterOptions> = {}): Promise<ResilientLimiter> {
  const redis = createRedisClient({ host: server.host, port: server.port });
  clients.push(redis);
  await waitReady(redis);
  const l = new ResilientLimiter({
    redis,
    limit: 3,
    windowMs: 60_000,
    prefix: `metrics:${randomUUID()}:`,
    local: { instances: 1 },
    // A generous deadline: on a loaded machine Redis must still decide, or the counts would move.
    breaker: { timeoutMs: 2_000 },
    ...options,
  });
  limiters.push(l);
  return l;
}

function sdk() {
  const reader = new TestReader();
  const provider = new MeterProvider({ readers: [reader] });
  return { reader, provider, meter: provider.getMeter('test') };
}

function instrument(...args: Parameters<typeof instrumentLimiter>): LimiterInstrumentation {
  const instrumentation = instrumentLimiter(...args);
  instrumentations.push(instrumentation);
  return instrumentation;
}

function metric(all: MetricData[], name: string): MetricData | undefined {
  return all.find((m) => m.descriptor.name === name);
}

/** `"<limiter> <source> <reason> <allowed>"` (then ` shadow_rejected` on a shadowed refusal's series) → count, for the decisions counter. */
function decisionCounts(all: MetricData[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of metric(all, MetricName.DECISIONS)?.dataPoints ?? []) {
    const a = p.attributes;
    const shadow = a['resilimit.shadow_rejected'] === true ? ' shadow_rejected' : '';
    out[`${a['resilimit.limiter']} ${a['resilimit.source']} ${a['resilimit.reason']} ${a['resilimit.allowed']}${shadow}`] =
      p.value as number;
  }
  return out;
}

/** `"<limiter> <source> <reason>"` → histogram point, for the duration histogram. */
function durations(all: MetricData[]): Record<string, HistogramPoint> {
  const out: Record<string, HistogramPoint> = {};
  for (const p of metric(all, MetricName.DECISION_DURATION)?.dataPoints ?? []) {
    const a = p.attributes;
    out[`${a['resilimit.limiter']} ${a['resilimit.source']} ${a['resilimit.reason']}`] = p.value as HistogramPoint;
  }
  return out;
}

/** `"<limiter> <state>"` → 0 or 1, for the breaker-state gauge. */
function breakerStates(all: MetricData[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of metric(all, MetricName.BREAKER_STATE)?.dataPoints ?? []) {
    out[`${p.attributes['resilimit.limiter']} ${p.attributes['resilimit.state']}`] = p.value as number;
  }
  return out;
}

function opens(all: MetricData[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of metric(all, MetricName.BREAKER_OPENS)?.dataPoints ?? [])
    out[String(p.attributes['resilimit.limiter'])] = p.value as number;
  return out;
}

/**
 * A known sequence at limit 3 (local share 3): Redis admits 3 calls of `a` and rejects the 4th
 * (`decided`), the 5th is rejected by the deny cache; then, breaker forced open, the local window
 * admits 3 calls of `b` and rejects the 4th (`breaker-open`); one call in fail-closed mode, one with
 * the kill switch on. Ends with the limiter as it began (mode local, enabled, breaker closed).
 */
async function knownSequence(l: ResilientLimiter): Promise<LimiterDecision[]> {
  const out: LimiterDecision[] = [];
  for (let i = 0; i < 5; i += 1) out.push(await l.limit('a'));
  l.forceOpen();
  for (let i = 0; i < 4; i += 1) out.push(await l.limit('b'));
  l.setMode('fail-closed');
  out.push(await l.limit('c'));
  l.setEnabled(false);
  out.push(await l.limit('d'));
  l.setEnabled(true);
  l.setMode('local');
  l.forceClose();
  return out;
}

/** What the known sequence must produce, as `"<source> <reason> <allowed>"` → count. */
const SEQUENCE_COUNTS = {
  'redis decided true': 3,
  'redis decided false': 1,
  'local deny-cache false': 1,
  'local breaker-open true': 3,
  'local breaker-open false': 1,
  'fail-closed breaker-open false': 1,
  'disabled disabled true': 1,
};

/**
 * What the known sequence must produce in shadow mode: every refusal admitted, in a series of its own.
 * (The deny cache still answers the 5th call: Redis refused the 4th.)
 */
const SHADOW_SEQUENCE_COUNTS = {
  'redis decided true': 3,
  'redis decided true shadow_rejected': 1,
  'local deny-cache true shadow_rejected': 1,
  'local breaker-open true': 3,
  'local breaker-open true shadow_rejected': 1,
  'fail-closed breaker-open true shadow_rejected': 1,
  'disabled disabled true': 1,
};

function tally(decisions: LimiterDecision[], name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const d of decisions) {
    const key = `${name} ${d.source} ${d.reason} ${d.allowed}${d.shadowRejected === true ? ' shadow_rejected' : ''}`;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

function named(name: string, counts: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(counts).map(([k, v]) => [`${name} ${k}`, v]));
}

describe('instrumentLimiter with the OpenTelemetry SDK', () => {
  it('counts decisions exactly by source, reason and outcome, and never by key', async () => {
    const l = await limiter();
    const { reader, meter } = sdk();
    instrument(l, { name: 'api', meter });
    const decisions = await knownSequence(l);

    const all = await collect(reader);
    expect(tally(decisions, 'api')).toEqual(named('api', SEQUENCE_COUNTS)); // the sequence went as planned
    expect(decisionCounts(all)).toEqual(named('api', SEQUENCE_COUNTS));
    const attributeNames = new Set(metric(all, MetricName.DECISIONS)?.dataPoints.flatMap((p) => Object.keys(p.attributes)));
    expect([...attributeNames].sort()).toEqual(['resilimit.allowed', 'resilimit.limiter', 'resilimit.reason', 'resilimit.source']);
    expect(metric(all, MetricName.DECISIONS)?.descriptor).toMatchObject({ unit: '{decision}' });
  });

  it('counts a refusal admitted in shadow mode as allowed, in a series of its own: resilimit.shadow_rejected', async () => {
    const l = await limiter({ shadow: true });
    const { reader, meter } = sdk();
    instrument(l, { name: 'api', meter });
    const decisions = await knownSequence(l);

    const all = await collect(reader);
    expect(tally(decisions, 'api')).toEqual(named('api', SHADOW_SEQUENCE_COUNTS));
    expect(decisionCounts(all)).toEqual(named('api', SHADOW_SEQUENCE_COUNTS));
    const shadowed = metric(all, MetricName.DECISIONS)?.dataPoints.filter((p) => 'resilimit.shadow_rejected' in p.attributes) ?? [];
    expect(shadowed.map((p) => p.attributes['resilimit.shadow_rejected'])).toEqual([true, true, true, true]);
    expect(l.stats()).toMatchObject({ decisions: 11, allowed: 11, shadowRejected: 4 });
  });

  it('times every decision in seconds, per source and reason, in the advised buckets', async () => {
    const l = await limiter();
    const { reader, meter } = sdk();
    instrument(l, { name: 'api', meter });
    const started = performance.now();
    await knownSequence(l);
    const elapsedS = (performance.now() - started) / 1000;

    const all = await collect(reader);
    expect(metric(all, MetricName.DECISION_DURATION)?.descriptor).toMatchObject({ unit: 's' });
    const points = durations(all);
    expect(Object.fromEntries(Object.entries(points).map(([k, h]) => [k, h.count]))).toEqual({
      'api redis decided': 4,
      'api local deny-cache': 1,
      'api local breaker-open': 4,
      'api fail-closed breaker-open': 1,
      'api disabled disabled': 1,
    });
    for (const h of Object.values(points)) {
      expect(h.buckets.boundaries).toEqual(DURATION_BUCKETS_S);
      expect(h.buckets.counts.reduce((a, b) => a + b, 0)).toBe(h.count);
      expect(h.min).toBeGreaterThanOrEqual(0);
    }
    // The calls ran one after another: their times add up to at most the sequence's, in seconds.
    const sum = Object.values(points).reduce((a, h) => a + (h.sum ?? 0), 0);
    expect(sum).toBeGreaterThan(0);
    expect(sum).toBeLessThanOrEqual(elapsedS);
    expect(points['api redis decided']?.sum).toBeGreaterThan(0); // Redis round trips take time
  });

  it('reports the breaker state as one series per state, and the times it opened', async () => {
    const l = await limiter();
    const { reader, meter } = sdk();
    instrument(l, { name: 'api', meter });

    let all = await collect(reader);
    expect(breakerStates(all)).toEqual({ 'api closed': 1, 'api half-open': 0, 'api open': 0 });
    expect(opens(all)).toEqual({ api: 0 });

    l.forceOpen();
    all = await collect(reader);
    expect(breakerStates(all)).toEqual({ 'api closed': 0, 'api half-open': 0, 'api open': 1 });
    expect(opens(all)).toEqual({ api: 1 });

    l.forceClose();
    all = await collect(reader);
    expect(breakerStates(all)).toEqual({ 'api closed': 1, 'api half-open': 0, 'api open': 0 });
    expect(opens(all)).toEqual({ api: 1 });
    expect(l.stats().opened).toBe(1);
  });

  it('records nothing more after close(), and leaves the channel without subscribers', async () => {
    const l = await limiter();
    const { reader, meter } = sdk();
    const instrumentation = instrument(l, { name: 'api', meter });
    expect(hasSubscribers('resilimit:decision')).toBe(true);
    await l.limit('a');
    await l.limit('a');
    expect(decisionCounts(await collect(reader))).toEqual({ 'api redis decided true': 2 });

    instrumentation.close();
    instrumentation.close(); // idempotent
    expect(hasSubscribers('resilimit:decision')).toBe(false);
    const stats = vi.spyOn(l, 'stats');
    await l.limit('a');
    l.forceOpen();
    await l.limit('b');
    const all = await collect(reader);
    expect(decisionCounts(all)).toEqual({ 'api redis decided true': 2 });
    expect(durations(all)['api redis decided']?.count).toBe(2);
    expect(breakerStates(all)['api open']).not.toBe(1); // the callback is gone: the open state is never observed
    expect(stats).not.toHaveBeenCalled();
  });

  it('works with `using`', async () => {
    const l = await limiter();
    const { reader, meter } = sdk();
    {
      using _instrumentation = instrumentLimiter(l, { name: 'api', meter });
      await l.limit('a');
    }
    await l.limit('a');
    expect(hasSubscribers('resilimit:decision')).toBe(false);
    expect(decisionCounts(await collect(reader))).toEqual({ 'api redis decided true': 1 });
  });

  it('keeps limiters apart by name, ignores limiters it does not instrument, and refuses a name twice per meter', async () => {
    const [one, two, other] = [await limiter(), await limiter({ limit: 1 }), await limiter()];
    const { reader, meter } = sdk();
    const first = instrument(one, { name: 'one', meter });
    instrument(two, { name: 'two', meter });
    await one.limit('k');
    await two.limit('k');
    await two.limit('k');
    await other.limit('k');
    two.forceOpen();

    const all = await collect(reader);
    expect(decisionCounts(all)).toEqual({
      'one redis decided true': 1,
      'two redis decided true': 1,
      'two redis decided false': 1,
    });
    expect(breakerStates(all)).toEqual({
      'one closed': 1,
      'one half-open': 0,
      'one open': 0,
      'two closed': 0,
      'two half-open': 0,
      'two open': 1,
    });

    expect(() => instrumentLimiter(other, { name: 'one', meter })).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_OPTION, message: expect.stringContaining('`name`') }),
    );
    // Another meter is another namespace; a closed instrumentation frees its name.
    instrument(other, { name: 'one', meter: sdk().meter });
    first.close();
    instrument(other, { name: 'one', meter });
  });

  it('uses the global meter provider by default, as the scope resilimit at the package version', async () => {
    const l = await limiter();
    const { reader, provider } = sdk();
    expect(metrics.setGlobalMeterProvider(provider)).toBe(true);
    instrument(l); // name 'default'
    await l.limit('a');

    const { resourceMetrics } = await reader.collect();
    const version = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { version: string }).version;
    expect(resourceMetrics.scopeMetrics.map((s) => [s.scope.name, s.scope.version])).toEqual([['resilimit', version]]);
    expect(decisionCounts(resourceMetrics.scopeMetrics.flatMap((s) => s.metrics))).toEqual({ 'default redis decided true': 1 });
  });
});

describe('the main entry pays nothing for metrics', () => {
  beforeAll(() => {
    if (!existsSync(`${root}dist/index.js`) || !existsSync(`${root}dist/metrics.js`)) {
      throw new Error('These tests import the built package: run `npm run build` first (`npm test` does).');
    }
  });

  /** Imports `entry` in a fresh Node process and lists every module URL it resolved. */
  async function load(entry: string): Promise<{ loaded: string[]; subscribed: boolean }> {
    const probe = `
      import { registerHooks } from 'node:module';
      import { hasSubscribers } from 'node:diagnostics_channel';
      const loaded = [];
      registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); loaded.push(r.url); return r; } });
      await import(process.env.ENTRY);
      console.log(JSON.stringify({ loaded, subscribed: hasSubscribers('resilimit:decision') }));`;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', probe], {
      cwd: root,
      env: { ...process.env, ENTRY: pathToFileURL(`${root}${entry}`).href, NODE_NO_WARNINGS: '1' },
    });
    return JSON.parse(stdout) as { loaded: string[]; subscribed: boolean };
  }

  it('importing resilimit loads no @opentelemetry module and subscribes to nothing', async () => {
    const main = await load('dist/index.js');
    expect(main.loaded.some((url) => url.includes('/node_modules/lru-cache/'))).toBe(true); // the probe sees the graph
    // Nor any Redis client's package: ioredis is loaded by createRedisClient() alone (users of another client need not install it).
    expect(main.loaded.filter((url) => /\/node_modules\/(ioredis|iovalkey|redis|@redis|@valkey)\//.test(url))).toEqual([]);
    expect(main.loaded.filter((url) => url.includes('@opentelemetry') || url.endsWith('/dist/metrics.js'))).toEqual([]);
    expect(main.subscribed).toBe(false);

    // The control: the metrics entry does load the API, and still subscribes only once instrumenting.
    const entry = await load('dist/metrics.js');
    expect(entry.loaded.some((url) => url.includes('/node_modules/@opentelemetry/api/'))).toBe(true);
    expect(entry.subscribed).toBe(false);
  });

  it('only dist/metrics.js names @opentelemetry, and the exports map gives it its own entry', () => {
    const files = readdirSync(`${root}dist`).filter((f) => f.endsWith('.js') || f.endsWith('.d.ts'));
    const naming = files.filter((f) => readFileSync(`${root}dist/${f}`, 'utf8').includes('@opentelemetry')).sort();
    expect(naming).toEqual(['metrics.d.ts', 'metrics.js']);
    const pkg = JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as {
      exports: Record<string, unknown>;
      peerDependenciesMeta: Record<string, { optional?: boolean }>;
    };
    expect(pkg.exports['./metrics']).toEqual({ types: './dist/metrics.d.ts', import: './dist/metrics.js', default: './dist/metrics.js' });
    expect(pkg.peerDependenciesMeta['@opentelemetry/api']).toEqual({ optional: true });
  });
});

type Sample = { name: string; labels: Record<string, string>; value: number };

/** Parses a Prometheus text exposition into samples. */
function parse(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m === null) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    out.push({ name: m[1] as string, labels: labels as Record<string, string>, value: Number(m[3]) });
  }
  return out;
}

async function scrape(register: Registry): Promise<Sample[]> {
  return parse(await register.metrics());
}

/** `"<limiter> <source> <reason> <allowed>"` (then ` shadow_rejected` on a shadowed refusal's series) → count, from a scrape. */
function scrapedDecisions(samples: Sample[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const { name, labels: l, value } of samples) {
    const shadow = l['resilimit_shadow_rejected'] === 'true' ? ' shadow_rejected' : '';
    if (name === 'resilimit_decisions_total')
      out[`${l['resilimit_limiter']} ${l['resilimit_source']} ${l['resilimit_reason']} ${l['resilimit_allowed']}${shadow}`] = value;
  }
  return out;
}

function scrapedStates(samples: Sample[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const { name, labels: l, value } of samples) {
    if (name === 'resilimit_breaker_state') out[`${l['resilimit_limiter']} ${l['resilimit_state']}`] = value;
  }
  return out;
}

function prometheus(register: Registry, limiters: Record<string, ResilientLimiter>): () => void {
  const stop = prometheusMetrics(register, limiters);
  stops.push(stop);
  return stop;
}

describe("docs/metrics.md's Prometheus example (prom-client, from the diagnostics channel)", () => {
  it('counts decisions exactly by source, reason and outcome, and times each one', async () => {
    const l = await limiter();
    const register = new Registry();
    prometheus(register, { api: l });
    const started = performance.now();
    const decisions = await knownSequence(l);
    const elapsedS = (performance.now() - started) / 1000;

    const samples = await scrape(register);
    expect(tally(decisions, 'api')).toEqual(named('api', SEQUENCE_COUNTS));
    expect(scrapedDecisions(samples)).toEqual(named('api', SEQUENCE_COUNTS));
    const counts: Record<string, number> = {};
    for (const { name, labels: l, value } of samples) {
      if (name === 'resilimit_decision_duration_seconds_count') counts[`${l['resilimit_source']} ${l['resilimit_reason']}`] = value;
    }
    expect(counts).toEqual({
      'redis decided': 4,
      'local deny-cache': 1,
      'local breaker-open': 4,
      'fail-closed breaker-open': 1,
      'disabled disabled': 1,
    });
    // The calls ran one after another: their times add up to at most the sequence's, in seconds.
    const sums = samples.filter((s) => s.name === 'resilimit_decision_duration_seconds_sum');
    expect(sums.find((s) => s.labels['resilimit_source'] === 'redis')?.value).toBeGreaterThan(0);
    expect(sums.reduce((a, s) => a + s.value, 0)).toBeLessThanOrEqual(elapsedS);
    const inf = samples.filter((s) => s.name === 'resilimit_decision_duration_seconds_bucket' && s.labels['le'] === '+Inf');
    expect(inf.reduce((a, s) => a + s.value, 0)).toBe(11);
  });

  it('shows the breaker state as one series per state, following forceOpen and forceClose', async () => {
    const [l, other] = [await limiter(), await limiter()];
    const register = new Registry();
    prometheus(register, { api: l, other });
    expect(scrapedStates(await scrape(register))).toEqual({
      'api closed': 1,
      'api half-open': 0,
      'api open': 0,
      'other closed': 1,
      'other half-open': 0,
      'other open': 0,
    });
    l.forceOpen();
    expect(await l.limit('k')).toMatchObject({ source: 'local', reason: 'breaker-open' });
    const samples = await scrape(register);
    expect(scrapedStates(samples)).toEqual({
      'api closed': 0,
      'api half-open': 0,
      'api open': 1,
      'other closed': 1,
      'other half-open': 0,
      'other open': 0,
    });
    expect(scrapedDecisions(samples)).toEqual({ 'api local breaker-open true': 1 });
    l.forceClose();
    expect(scrapedStates(await scrape(register))['api closed']).toBe(1);
  });

  it('stops: unsubscribes, removes its metrics, and can start again on the same registry', async () => {
    const l = await limiter();
    const register = new Registry();
    const stop = prometheus(register, { api: l });
    await l.limit('k');
    stop();
    expect(hasSubscribers('resilimit:decision')).toBe(false);
    await l.limit('k');
    expect((await scrape(register)).filter((s) => s.name.startsWith('resilimit_'))).toEqual([]);
    prometheus(register, { api: l });
    await l.limit('k');
    expect(scrapedDecisions(await scrape(register))).toEqual({ 'api redis decided true': 1 });
  });

  it.each([
    ['', {}, SEQUENCE_COUNTS],
    [', in shadow mode too', { shadow: true }, SHADOW_SEQUENCE_COUNTS],
  ])(
    "writes the series of resilimit/metrics as OpenTelemetry's Prometheus exporters name them, with the same values%s",
    async (_, options, counts) => {
      const l = await limiter(options);
      const register = new Registry();
      prometheus(register, { api: l });
      const { reader, meter } = sdk();
      instrument(l, { name: 'api', meter });
      await knownSequence(l);
      const all = await collect(reader);
      const samples = await scrape(register);
      // What OpenTelemetry's Prometheus exporters write: '.' becomes '_', a counter gets '_total', a
      // histogram in seconds '_seconds' (the Collector's; the JavaScript exporter omits the unit).
      const promName = (name: string) => name.replaceAll('.', '_');
      const promLabels = (attributes: Record<string, unknown>) =>
        Object.fromEntries(Object.entries(attributes).map(([k, v]) => [promName(k), String(v)]));
      const fromOtel = (name: string, suffix: string) =>
        (metric(all, name)?.dataPoints ?? []).map((p) => ({
          name: promName(name) + suffix,
          labels: promLabels(p.attributes),
          value: typeof p.value === 'number' ? p.value : (p.value as HistogramPoint).count,
        }));
      const sortSamples = (list: Sample[]) => list.map((s) => JSON.stringify(s)).sort();
      const pick = (name: string) => samples.filter((s) => s.name === name);
      expect(fromOtel(MetricName.DECISIONS, '_total').length).toBe(Object.keys(counts).length);
      expect(scrapedDecisions(samples)).toEqual(named('api', counts));
      expect(sortSamples(fromOtel(MetricName.DECISIONS, '_total'))).toEqual(sortSamples(pick('resilimit_decisions_total')));
      expect(sortSamples(fromOtel(MetricName.DECISION_DURATION, '_seconds_count'))).toEqual(
        sortSamples(pick('resilimit_decision_duration_seconds_count')),
      );
      expect(sortSamples(fromOtel(MetricName.BREAKER_STATE, ''))).toEqual(sortSamples(pick('resilimit_breaker_state')));
    },
  );

  it('is the function docs/metrics.md shows', () => {
    const source = readFileSync(fileURLToPath(import.meta.url), 'utf8');
    const fn = source
      .slice(source.lastIndexOf('// docs/metrics.md:prometheus begin'), source.lastIndexOf('// docs/metrics.md:prometheus end'))
      .split('\n')
      .slice(1)
      .join('\n');
    const doc = readFileSync(`${root}docs/metrics.md`, 'utf8');
    const squash = (text: string) => text.replace(/\s+/g, ' ').trim();
    expect(fn).toContain('function prometheusMetrics(');
    expect(squash(doc).includes(squash(fn)), 'docs/metrics.md shows this prometheusMetrics, word for word').toBe(true);
  });
});

// docs/metrics.md:prometheus begin — the prom-client example of docs/metrics.md defines this same function.
/**
 * Exports the decisions, decision latency and breaker state of the named limiters to a prom-client
 * registry, with the names and labels that resilimit/metrics gives them. Returns a function that stops it.
 */
function prometheusMetrics(register: Registry, limiters: Record<string, ResilientLimiter>): () => void {
  const names = new Map(Object.entries(limiters).map(([name, limiter]) => [limiter, name]));
  const decisions = new Counter({
    name: 'resilimit_decisions_total',
    help: 'Rate-limit decisions, by source, reason and outcome.',
    labelNames: ['resilimit_limiter', 'resilimit_source', 'resilimit_reason', 'resilimit_allowed', 'resilimit_shadow_rejected'],
    registers: [register],
  });
  const duration = new Histogram({
    name: 'resilimit_decision_duration_seconds',
    help: 'Time limit() took to decide, by source and reason.',
    labelNames: ['resilimit_limiter', 'resilimit_source', 'resilimit_reason'],
    buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
    registers: [register],
  });
  new Gauge({
    name: 'resilimit_breaker_state',
    help: "The breaker's state: 1 for the current one, 0 for the others.",
    labelNames: ['resilimit_limiter', 'resilimit_state'],
    registers: [register],
    collect() {
      for (const [limiter, name] of names) {
        for (const state of ['closed', 'half-open', 'open']) {
          this.set({ resilimit_limiter: name, resilimit_state: state }, limiter.state === state ? 1 : 0);
        }
      }
    },
  });
  const onDecision = (message: unknown): void => {
    const { limiter, decision, durationMs } = message as DecisionMessage;
    const name = names.get(limiter);
    if (name === undefined) return;
    const labels = { resilimit_limiter: name, resilimit_source: decision.source, resilimit_reason: decision.reason };
    const outcome = { ...labels, resilimit_allowed: String(decision.allowed) };
    // Shadow mode's admissions of refusals get a label of their own; the other series have none.
    decisions.inc(decision.shadowRejected ? { ...outcome, resilimit_shadow_rejected: 'true' } : outcome);
    duration.observe(labels, durationMs / 1000);
  };
  subscribe('resilimit:decision', onDecision);
  return () => {
    unsubscribe('resilimit:decision', onDecision);
    for (const name of ['resilimit_decisions_total', 'resilimit_decision_duration_seconds', 'resilimit_breaker_state']) {
      register.removeSingleMetric(name);
    }
  };
}
// docs/metrics.md:prometheus end
