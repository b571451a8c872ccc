/**
 * `resilimit/metrics` without a Redis: argument checks, the channel subscription's lifetime, the
 * mapping of published decisions to measurements, and a failing meter that must not break `limit()`.
 * The integration test runs the same instruments on real limiters.
 */
import { channel, hasSubscribers } from 'node:diagnostics_channel';
import { MeterProvider, type Histogram } from '@opentelemetry/sdk-metrics';
import type { Meter } from '@opentelemetry/api';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ErrorCode, type DecisionMessage, type LimiterDecision, type ResilientLimiter } from '../../src/index.js';
import { instrumentLimiter, MetricName, type LimiterInstrumentation } from '../../src/metrics.js';
import { collect, TestReader } from '../support/metrics.js';

const decisionChannel = channel('resilimit:decision');
const open: LimiterInstrumentation[] = [];

afterEach(() => {
  for (const i of open.splice(0)) i.close();
  vi.restoreAllMocks();
});

function sdk() {
  const reader = new TestReader();
  return { reader, meter: new MeterProvider({ readers: [reader] }).getMeter('test') };
}

/** Enough of a limiter for the instrumentation: what it reads, and an identity for the channel. */
function fakeLimiter(state: ResilientLimiter['state'] = 'closed', opened = 0): ResilientLimiter {
  return { state, limit: () => undefined, stats: () => ({ opened }) } as unknown as ResilientLimiter;
}

function instrument(...args: Parameters<typeof instrumentLimiter>): LimiterInstrumentation {
  const i = instrumentLimiter(...args);
  open.push(i);
  return i;
}

function publish(limiter: ResilientLimiter, decision: Partial<LimiterDecision>, durationMs: number): void {
  const full: LimiterDecision = {
    allowed: true,
    limit: 10,
    remaining: 9,
    retryAfterMs: 0,
    resetAtMs: 0,
    source: 'redis',
    reason: 'decided',
    reducedCapacity: false,
    id: undefined,
    ...decision,
  };
  decisionChannel.publish({ limiter, key: 'k', cost: 1, decision: full, durationMs } satisfies DecisionMessage);
}

function invalid(message: string) {
  return expect.objectContaining({ name: 'ResilimitError', code: ErrorCode.INVALID_OPTION, message });
}

describe('instrumentLimiter arguments', () => {
  it('refuses what is not a limiter', () => {
    expect(() => instrumentLimiter({} as never)).toThrow(invalid('Expected `limiter` to be a ResilientLimiter, got an object'));
    expect(() => instrumentLimiter(undefined as never)).toThrow(
      invalid('Expected `limiter` to be a ResilientLimiter, got `undefined` (undefined)'),
    );
  });

  it('refuses options that are not an object', () => {
    expect(() => instrumentLimiter(fakeLimiter(), 'api' as never)).toThrow(
      invalid('Expected `options` to be an object, got `"api"` (string of length 3)'),
    );
  });

  it('refuses a name that is empty, too long, malformed or not a string', () => {
    const expected = 'Expected `name` to be a well-formed string of 1 to 128 characters, got ';
    expect(() => instrumentLimiter(fakeLimiter(), { name: '' })).toThrow(invalid(`${expected}\`""\` (string of length 0)`));
    expect(() => instrumentLimiter(fakeLimiter(), { name: 'x'.repeat(129) })).toThrow(
      invalid(`${expected}\`"${'x'.repeat(40)}…"\` (string of length 129)`),
    );
    expect(() => instrumentLimiter(fakeLimiter(), { name: '\uD800' })).toThrow(invalid(`${expected}\`"\\ud800"\` (string of length 1)`));
    expect(() => instrumentLimiter(fakeLimiter(), { name: 7 as never })).toThrow(invalid(`${expected}\`7\` (number)`));
    expect(hasSubscribers('resilimit:decision')).toBe(false); // a refused call leaves nothing behind
  });

  it('refuses a meter that is not an OpenTelemetry Meter', () => {
    const { meter } = sdk();
    const partial = { createCounter: meter.createCounter.bind(meter) } as unknown as Meter;
    expect(() => instrumentLimiter(fakeLimiter(), { meter: partial })).toThrow(
      invalid('Expected `meter` to be an OpenTelemetry Meter, got an object'),
    );
  });
});

describe('instrumentLimiter recording', () => {
  it('subscribes to the decision channel only while an instrumentation is open', () => {
    const { meter } = sdk();
    expect(hasSubscribers('resilimit:decision')).toBe(false);
    const a = instrument(fakeLimiter(), { name: 'a', meter });
    const b = instrument(fakeLimiter(), { name: 'b', meter });
    expect(hasSubscribers('resilimit:decision')).toBe(true);
    a.close();
    expect(hasSubscribers('resilimit:decision')).toBe(true);
    b[Symbol.dispose]();
    expect(hasSubscribers('resilimit:decision')).toBe(false);
  });

  it('counts the decisions of its limiter only, and records their time in seconds', async () => {
    const { reader, meter } = sdk();
    const mine = fakeLimiter();
    instrument(mine, { name: 'api', meter });
    publish(mine, {}, 250);
    publish(mine, { allowed: false }, 500);
    publish(mine, { source: 'local', reason: 'breaker-open' }, 0.5);
    publish(fakeLimiter(), {}, 1_000); // another limiter: not counted
    decisionChannel.publish({ unrelated: true }); // not a decision message: ignored

    const all = await collect(reader);
    const counts = all.find((m) => m.descriptor.name === MetricName.DECISIONS)?.dataPoints.map((p) => [p.attributes, p.value]);
    expect(counts).toEqual([
      [{ 'resilimit.limiter': 'api', 'resilimit.source': 'redis', 'resilimit.reason': 'decided', 'resilimit.allowed': true }, 1],
      [{ 'resilimit.limiter': 'api', 'resilimit.source': 'redis', 'resilimit.reason': 'decided', 'resilimit.allowed': false }, 1],
      [{ 'resilimit.limiter': 'api', 'resilimit.source': 'local', 'resilimit.reason': 'breaker-open', 'resilimit.allowed': true }, 1],
    ]);
    const times = all
      .find((m) => m.descriptor.name === MetricName.DECISION_DURATION)
      ?.dataPoints.map((p) => [p.attributes['resilimit.source'], (p.value as Histogram).count, (p.value as Histogram).sum]);
    expect(times).toEqual([
      ['redis', 2, 0.75],
      ['local', 1, 0.0005],
    ]);
  });

  it('observes the breaker state and openings from the limiter at each collection', async () => {
    const { reader, meter } = sdk();
    instrument(fakeLimiter('half-open', 4), { name: 'api', meter });
    const all = await collect(reader);
    const states = all
      .find((m) => m.descriptor.name === MetricName.BREAKER_STATE)
      ?.dataPoints.map((p) => [p.attributes['resilimit.state'], p.value]);
    expect(states).toEqual([
      ['closed', 0],
      ['half-open', 1],
      ['open', 0],
    ]);
    expect(all.find((m) => m.descriptor.name === MetricName.BREAKER_OPENS)?.dataPoints.map((p) => p.value)).toEqual([4]);
  });

  it('warns once, and never throws into limit(), when the meter fails', () => {
    const { meter } = sdk();
    const failing = new Proxy(meter, {
      get(target, property, receiver) {
        if (property !== 'createCounter') return Reflect.get(target, property, receiver) as unknown;
        return () => ({
          add: () => {
            throw new Error('exporter exploded');
          },
        });
      },
    });
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const limiter = fakeLimiter();
    instrument(limiter, { name: 'api', meter: failing });
    expect(() => publish(limiter, {}, 1)).not.toThrow();
    publish(limiter, {}, 1);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]?.[0]).toContain('exporter exploded');
    expect(warn.mock.calls[0]?.[1]).toEqual({ type: 'ResilimitWarning', code: 'RESILIMIT_METRICS_FAILED' });
  });
});
