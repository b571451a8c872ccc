import { describe, expect, it } from 'vitest';
import { netOfStallsMax, overLimit, type Call } from './metrics.ts';

function admitted(key: string, atMs: number, source: 'redis' | 'local' = 'redis', instance = 0): Call {
  return {
    issuedMs: atMs,
    latencyMs: 0,
    instance,
    key,
    allowed: true,
    source,
    reason: source === 'redis' ? 'decided' : 'slow',
    admittedAtMs: atMs,
    threw: false,
  };
}

describe('overLimit (the chaos suite measure of the promise)', () => {
  it('finds nothing when every window (t - windowMs, t] holds at most the limit', () => {
    // 3 per 100 ms, the fourth exactly one window after the first: the first has left.
    const calls = [0, 10, 20, 100, 110, 120].map((t) => admitted('k', t));
    expect(overLimit(calls, 100, 3)).toEqual({ maxExcess: 0, callsOver: 0 });
  });

  it('counts the excess, the calls that found their window over, and names the first such window', () => {
    const calls = [
      admitted('k', 0),
      admitted('k', 10, 'local'),
      admitted('k', 20),
      admitted('k', 99, 'redis', 1), // 4 in (−1, 99]: 1 over
      admitted('k', 105), // 4 in (5, 105]: 1 over
      admitted('other', 50),
    ];
    const result = overLimit(calls, 100, 3);
    expect(result).toMatchObject({ maxExcess: 1, callsOver: 2 });
    expect(result.firstOver).toEqual({
      key: 'k',
      calls: [
        { atMs: 0, instance: 0, source: 'redis', reason: 'decided' },
        { atMs: 10, instance: 0, source: 'local', reason: 'slow' },
        { atMs: 20, instance: 0, source: 'redis', reason: 'decided' },
        { atMs: 99, instance: 1, source: 'redis', reason: 'decided' },
      ],
    });
  });

  it('counts calls at the same instant together, across keys separately, and ignores rejected calls', () => {
    const calls = [
      admitted('a', 5),
      admitted('a', 5),
      admitted('a', 5),
      admitted('b', 5),
      { ...admitted('a', 6), admittedAtMs: undefined },
    ];
    expect(overLimit(calls, 100, 2)).toMatchObject({ maxExcess: 1, callsOver: 3 });
  });
});

describe('netOfStallsMax', () => {
  const call = (issuedMs: number, latencyMs: number): Call => ({ ...admitted('k', issuedMs), latencyMs });

  it('takes out of each call only the part of a stall that overlaps it', () => {
    const stalls = [{ atMs: 100, gapMs: 120 }];
    // 100..260 overlaps the stall for 120 ms: 40 ms net; 0..60 does not overlap it: 60 ms.
    expect(netOfStallsMax([call(100, 160)], stalls)).toBe(40);
    expect(netOfStallsMax([call(100, 160), call(0, 60)], stalls)).toBe(60);
    // 150..250 overlaps 150..220: 30 ms net.
    expect(netOfStallsMax([call(150, 100)], stalls)).toBe(30);
    expect(netOfStallsMax([call(150, 100)], [])).toBe(100);
  });
});
