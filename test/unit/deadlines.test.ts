import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Deadlines } from '../../src/redis/Deadlines.js';

type Outcome = { value: unknown } | { code: unknown };
const outcome = (p: Promise<unknown>): Promise<Outcome> =>
  p.then(
    (value) => ({ value }),
    (error: { code?: unknown }) => ({ code: error.code }),
  );

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('Deadlines', () => {
  it('serves every call in flight with one timer, not one per call', async () => {
    const d = new Deadlines(50, undefined);
    const waiting = Array.from({ length: 100 }, () => outcome(d.race(new Promise(() => {}))));
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(51); // the deadline, then the poll after it
    expect(new Set((await Promise.all(waiting)).map((o) => ('code' in o ? o.code : 'answered')))).toEqual(new Set(['ETIMEDOUT']));
    expect(vi.getTimerCount()).toBe(0);
  });

  it('gives each call its own deadline, counted from its send, and an answered call its answer', async () => {
    const d = new Deadlines(50, undefined);
    const settled: string[] = [];
    const first = d.race(new Promise(() => {})).catch(() => settled.push(`first at ${Date.now() - t0}`));
    const t0 = Date.now();
    await vi.advanceTimersByTimeAsync(20);
    const answered = Promise.withResolvers<string>();
    const second = outcome(d.race(answered.promise));
    await vi.advanceTimersByTimeAsync(10);
    const third = d.race(new Promise(() => {})).catch(() => settled.push(`third at ${Date.now() - t0}`));
    answered.resolve('yes');
    expect(await second).toEqual({ value: 'yes' });
    await vi.advanceTimersByTimeAsync(20); // t = 50: the first's deadline
    expect(settled).toEqual([]);
    await vi.advanceTimersByTimeAsync(1); // the poll after it
    expect(settled).toEqual(['first at 51']);
    await vi.advanceTimersByTimeAsync(29); // t = 80: the third's deadline (sent at 30)
    expect(settled).toEqual(['first at 51']);
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toEqual(['first at 51', 'third at 81']);
    await Promise.all([first, third]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('lets an answer read in the poll after the deadline count, and shows both moments to the poll watch', async () => {
    const observed: string[] = [];
    const d = new Deadlines(50, { observe: (phase: string) => observed.push(phase) } as never);
    // Answered by a timer due with the deadline's, made after it: read before the verdict.
    const answer = new Promise((resolve) => setTimeout(() => setTimeout(resolve, 1, 'in time'), 49));
    const late = outcome(d.race(new Promise(() => {})));
    const result = outcome(d.race(answer));
    await vi.advanceTimersByTimeAsync(51);
    expect(await result).toEqual({ value: 'in time' });
    expect(await late).toEqual({ code: 'ETIMEDOUT' });
    expect(observed).toEqual(['any', 'check']);
  });

  it('stop() clears the timer when every call was answered, and keeps it for a call still waiting', async () => {
    const d = new Deadlines(50, undefined);
    await d.race(Promise.resolve(1));
    expect(vi.getTimerCount()).toBe(1);
    d.stop();
    expect(vi.getTimerCount()).toBe(0);
    const waiting = outcome(d.race(new Promise(() => {})));
    d.stop();
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(51);
    expect(await waiting).toEqual({ code: 'ETIMEDOUT' });
  });
});
