import { describe, expect, it } from 'vitest';
import { adaptiveLimit } from '../../src/index.js';

/** An injected load signal and clock. */
function harness() {
  const h = { load: 0, t: 0, reads: 0 };
  return {
    h,
    signal: () => {
      h.reads += 1;
      return h.load;
    },
    now: () => h.t,
  };
}

describe('adaptiveLimit', () => {
  it('keeps the limit up to `from`, goes down in a straight line to `min` at `to`, and stays at `min` above', () => {
    const { h, signal, now } = harness();
    const limit = adaptiveLimit({ limit: 100, min: 10, signal, from: 0.5, to: 1, intervalMs: 100, now });
    const at = (load: number): number => {
      h.load = load;
      h.t += 100;
      return limit();
    };
    expect(limit()).toBe(100); // before the first reading
    expect(limit.load).toBeUndefined();
    expect([0, 0.5, 0.6, 0.75, 0.9, 0.99, 1, 5].map(at)).toEqual([100, 100, 82, 55, 28, 11, 10, 10]);
    expect(limit.load).toBe(5);
    expect(at(0.2)).toBe(100); // and back up when the load goes
  });

  it('reads the signal at most every intervalMs, when asked', () => {
    const { h, signal, now } = harness();
    const limit = adaptiveLimit({ limit: 50, min: 5, signal, from: 0, to: 10, intervalMs: 1000, now });
    h.load = 10;
    for (let i = 0; i < 100; i++) limit();
    expect(h.reads).toBe(0); // no reading until the first interval has passed
    h.t = 1000;
    expect(limit()).toBe(5);
    h.load = 0;
    h.t = 1999;
    expect(limit()).toBe(5); // not yet
    h.t = 2000;
    expect(limit()).toBe(50);
    expect(h.reads).toBe(2);
  });

  it('keeps the limit when the signal has nothing to say (NaN)', () => {
    const { h, signal, now } = harness();
    const limit = adaptiveLimit({ limit: 10, min: 1, signal, from: 0, to: 1, intervalMs: 10, now });
    h.load = 1;
    h.t = 10;
    expect(limit()).toBe(1);
    h.load = Number.NaN;
    h.t = 20;
    expect(limit()).toBe(1);
  });

  it('follows the real event-loop utilization: a blocked loop lowers the limit', async () => {
    const limit = adaptiveLimit({ limit: 100, min: 10, intervalMs: 200 });
    await new Promise((resolve) => setTimeout(resolve, 220)); // an idle interval
    expect(limit()).toBe(100);
    expect(limit.load).toBeLessThan(0.5);
    const until = performance.now() + 250;
    while (performance.now() < until) {
      // busy: the event loop is fully used
    }
    expect(limit()).toBe(10);
    expect(limit.load).toBeGreaterThan(0.95);
    limit.close();
  });

  it('follows the real event-loop delay, and close() stops its monitor', async () => {
    // Bounds well apart from what a loaded machine's idle loop shows (tests run side by side here).
    const limit = adaptiveLimit({ limit: 100, min: 10, signal: 'event-loop-delay', from: 60, to: 150, intervalMs: 50 });
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(limit()).toBe(100);
    // A blocked loop delays the monitor's own timer by about the blocking time.
    setTimeout(() => {
      const until = performance.now() + 250;
      while (performance.now() < until) {
        // busy
      }
    }, 10);
    await new Promise((resolve) => setTimeout(resolve, 350));
    expect(limit.load).toBeLessThan(60);
    expect(limit()).toBe(10);
    expect(limit.load).toBeGreaterThan(150);
    limit.close();
    // Closed: no more samples, so an idle interval says nothing and the limit stays (a running
    // monitor would report a short delay and raise it back to 100).
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(limit()).toBe(10);
  });

  it('rejects bad options, naming the option, what was expected and what was given', () => {
    const f = () => 0.5;
    expect(() => adaptiveLimit({ limit: 0, min: 1 })).toThrow(/Expected `limit` to be an integer from 1 to 2147483647, got `0` \(number\)/);
    expect(() => adaptiveLimit({ limit: 10, min: 11 })).toThrow(/Expected `min` to be an integer from 1 to 10, got `11`/);
    expect(() => adaptiveLimit({ limit: 10, min: 1, signal: f })).toThrow(
      /Expected `from` to be a finite number \(required with a signal function\), got `undefined`/,
    );
    expect(() => adaptiveLimit({ limit: 10, min: 1, signal: f, from: 2, to: 1 })).toThrow(
      /Expected `to` to be a number greater than `from` \(2\), got `1`/,
    );
    expect(() => adaptiveLimit({ limit: 10, min: 1, signal: 'cpu' as never })).toThrow(
      /Expected `signal` to be 'event-loop-utilization', 'event-loop-delay' or a function, got `"cpu"`/,
    );
    expect(() => adaptiveLimit({ limit: 10, min: 1, intervalMs: 5 })).toThrow(
      /Expected `intervalMs` to be an integer from 10 to 3600000, got `5`/,
    );
    expect(() => adaptiveLimit(undefined as never)).toThrow(/options of adaptiveLimit\(\) to be an object, got `undefined`/);
  });
});
