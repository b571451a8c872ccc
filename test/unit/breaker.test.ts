import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Breaker, countsAsFailure, type BreakerState } from '../../src/redis/Breaker.js';
import type { ResolvedBreakerOptions } from '../../src/options/options.js';
import { ErrorCode, ResilimitError } from '../../src/base/errors.js';

const OPTIONS: ResolvedBreakerOptions = {
  timeoutMs: 50,
  errorThresholdPercentage: 50,
  volumeThreshold: 4,
  resetTimeoutMs: 1000,
  maxResetTimeoutMs: 4000,
  rollingWindowMs: 1000,
};

type Settled = { value: unknown } | { error: unknown };

function unavailable(): ResilimitError {
  return new ResilimitError(ErrorCode.REDIS_UNAVAILABLE, 'Redis could not answer: connect ECONNREFUSED');
}

const ok = (): Promise<string> => Promise.resolve('ok');
const down = (): Promise<never> => Promise.reject(unavailable());

/** A breaker that records every transition it reports. */
function breaker(options: Partial<ResolvedBreakerOptions> = {}) {
  const changes: [BreakerState, BreakerState][] = [];
  const b = new Breaker({ ...OPTIONS, ...options }, (state, previous) => changes.push([state, previous]));
  return { b, changes };
}

/** Fires `run` and resolves with how the call settled, never rejecting. */
function settle(b: Breaker, run: () => Promise<unknown>): Promise<Settled> {
  return b.fire(run).then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
}

async function fail(b: Breaker, times: number): Promise<void> {
  for (let i = 0; i < times; i++) await settle(b, down);
}

function codeOf(s: Settled): unknown {
  return 'error' in s ? (s.error as { code?: unknown }).code : undefined;
}

const made: Breaker[] = [];

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  for (const b of made.splice(0)) b.shutdown();
  vi.useRealTimers();
});

function tracked(options: Partial<ResolvedBreakerOptions> = {}) {
  const t = breaker(options);
  made.push(t.b);
  return t;
}

/** Opens a fresh breaker with `volumeThreshold` failures. */
async function opened(options: Partial<ResolvedBreakerOptions> = {}) {
  const t = tracked(options);
  await fail(t.b, options.volumeThreshold ?? OPTIONS.volumeThreshold);
  expect(t.b.state).toBe('open');
  return t;
}

describe('Breaker', () => {
  it('starts closed, accepting calls, with the configured open period', () => {
    const { b, changes } = tracked();
    expect(b.state).toBe('closed');
    expect(b.accepting).toBe(true);
    expect(b.resetTimeoutMs).toBe(1000);
    expect(changes).toEqual([]);
  });

  it('passes a successful call through with its value', async () => {
    const { b } = tracked();
    expect(await settle(b, ok)).toEqual({ value: 'ok' });
  });

  it('does not open on a single failure, nor before volumeThreshold calls', async () => {
    const { b, changes } = tracked();
    const first = await settle(b, down);
    expect(codeOf(first)).toBe('ERR_RESILIMIT_REDIS_UNAVAILABLE');
    expect(b.state).toBe('closed');
    await fail(b, 2);
    expect(b.state).toBe('closed');
    expect(changes).toEqual([]);
    await fail(b, 1);
    expect(b.state).toBe('open');
    expect(b.accepting).toBe(false);
    expect(changes).toEqual([['open', 'closed']]);
  });

  it('opens only when more than errorThresholdPercentage of the calls failed', async () => {
    const { b } = tracked();
    await settle(b, ok);
    await settle(b, ok);
    await fail(b, 2);
    // 2 of 4 failed: 50 % is not more than 50 %.
    expect(b.state).toBe('closed');
    await fail(b, 1);
    // 3 of 5: 60 %.
    expect(b.state).toBe('open');
  });

  it('forgets failures older than rollingWindowMs', async () => {
    const { b } = tracked();
    await fail(b, 3);
    await vi.advanceTimersByTimeAsync(1000);
    await fail(b, 1);
    expect(b.state).toBe('closed');
  });

  it('rejects every call at once with EOPENBREAKER while open, without running it', async () => {
    const { b } = await opened();
    const run = vi.fn(ok);
    const result = await settle(b, run);
    expect(codeOf(result)).toBe('EOPENBREAKER');
    expect(run).not.toHaveBeenCalled();
  });

  it('half-opens after exactly resetTimeoutMs', async () => {
    const { b, changes } = await opened();
    await vi.advanceTimersByTimeAsync(999);
    expect(b.state).toBe('open');
    await vi.advanceTimersByTimeAsync(1);
    expect(b.state).toBe('half-open');
    expect(b.accepting).toBe(true);
    expect(changes).toEqual([
      ['open', 'closed'],
      ['half-open', 'open'],
    ]);
  });

  it('re-opens after a failing trial with a doubled open period, up to maxResetTimeoutMs', async () => {
    const { b } = await opened();
    const periods: number[] = [];
    for (const period of [1000, 2000, 4000, 4000, 4000]) {
      await vi.advanceTimersByTimeAsync(period - 1);
      expect(b.state).toBe('open');
      await vi.advanceTimersByTimeAsync(1);
      expect(b.state).toBe('half-open');
      periods.push(period);
      await fail(b, 1);
      expect(b.state).toBe('open');
    }
    expect(periods).toEqual([1000, 2000, 4000, 4000, 4000]);
    expect(b.resetTimeoutMs).toBe(4000);
  });

  it('closes after a successful trial and resets the open period to resetTimeoutMs', async () => {
    const { b, changes } = await opened();
    await vi.advanceTimersByTimeAsync(1000);
    await fail(b, 1);
    await vi.advanceTimersByTimeAsync(2000);
    expect(b.state).toBe('half-open');
    expect(await settle(b, ok)).toEqual({ value: 'ok' });
    expect(b.state).toBe('closed');
    expect(b.resetTimeoutMs).toBe(1000);
    // The next opening uses resetTimeoutMs again, not the doubled period.
    await vi.advanceTimersByTimeAsync(1000); // leave the rolling window
    await fail(b, 4);
    expect(b.state).toBe('open');
    await vi.advanceTimersByTimeAsync(999);
    expect(b.state).toBe('open');
    await vi.advanceTimersByTimeAsync(1);
    expect(b.state).toBe('half-open');
    expect(changes).toEqual([
      ['open', 'closed'],
      ['half-open', 'open'],
      ['open', 'half-open'],
      ['half-open', 'open'],
      ['closed', 'half-open'],
      ['open', 'closed'],
      ['half-open', 'open'],
    ]);
  });

  it('lets exactly one trial through while half-open and rejects the others with EOPENBREAKER', async () => {
    const { b } = await opened();
    await vi.advanceTimersByTimeAsync(1000);
    const trial = Promise.withResolvers<string>();
    const runs: number[] = [];
    const first = settle(b, () => {
      runs.push(1);
      return trial.promise;
    });
    const others = await Promise.all(
      [2, 3, 4].map((n) =>
        settle(b, () => {
          runs.push(n);
          return ok();
        }),
      ),
    );
    expect(others.map(codeOf)).toEqual(['EOPENBREAKER', 'EOPENBREAKER', 'EOPENBREAKER']);
    expect(runs).toEqual([1]);
    expect(b.state).toBe('half-open');
    trial.resolve('trial');
    expect(await first).toEqual({ value: 'trial' });
    expect(b.state).toBe('closed');
  });

  it('rejects a call longer than timeoutMs with ETIMEDOUT', async () => {
    const { b } = tracked();
    const slow = Promise.withResolvers<string>();
    let result: Settled | undefined;
    void settle(b, () => slow.promise).then((r) => (result = r));
    await vi.advanceTimersByTimeAsync(49);
    expect(result).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    // Due: the verdict waits for the event loop's next poll (an immediate; the fake clock runs it on its next step).
    expect(result).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(codeOf(result as Settled)).toBe('ETIMEDOUT');
    expect((result as { error: Error }).error.message).toBe('Timed out after 50ms');
    // The late answer changes nothing.
    slow.resolve('late');
    await vi.advanceTimersByTimeAsync(0);
    expect(result).toEqual({ error: expect.objectContaining({ code: 'ETIMEDOUT' }) });
  });

  it('lets a call answered in the same loop iteration as its deadline count: the verdict waits for the poll', async () => {
    const { b } = tracked();
    let result: Settled | undefined;
    // The answer is read after the deadline's timer in the same iteration (a reply that lay unread
    // while the process was busy): here, a timer due at the same time, made after the call's.
    const answer = (): Promise<string> => new Promise((resolve) => setTimeout(() => setTimeout(resolve, 1, 'in time'), 49));
    void settle(b, answer).then((r) => (result = r));
    await vi.advanceTimersByTimeAsync(51);
    expect(result).toEqual({ value: 'in time' });
    expect(b.state).toBe('closed');
  });

  it('counts a timed-out call as a failure', async () => {
    const { b, changes } = tracked();
    const calls = Array.from({ length: 4 }, () => settle(b, () => new Promise<never>(() => {})));
    await vi.advanceTimersByTimeAsync(51); // the deadline, then the poll after it
    expect((await Promise.all(calls)).map(codeOf)).toEqual(['ETIMEDOUT', 'ETIMEDOUT', 'ETIMEDOUT', 'ETIMEDOUT']);
    expect(b.state).toBe('open');
    expect(changes).toEqual([['open', 'closed']]);
  });

  it('re-opens when the half-open trial times out', async () => {
    const { b } = await opened();
    await vi.advanceTimersByTimeAsync(1000);
    const trial = settle(b, () => new Promise<never>(() => {}));
    await vi.advanceTimersByTimeAsync(51); // the deadline, then the poll after it
    expect(codeOf(await trial)).toBe('ETIMEDOUT');
    expect(b.state).toBe('open');
    expect(b.resetTimeoutMs).toBe(2000);
  });

  it.each([
    ['a Redis reply about the request', () => new ResilimitError(ErrorCode.REDIS_REPLY, 'Redis rejected the call: WRONGTYPE')],
    ['a TypeError (a bug of ours)', () => new TypeError('x is not a function')],
    ['an invalid key', () => new ResilimitError(ErrorCode.INVALID_KEY, 'bad key')],
  ])('does not count %s as a failure, and passes it through', async (_, make) => {
    const { b, changes } = tracked();
    for (let i = 0; i < 20; i++) {
      const error = make();
      expect(await settle(b, () => Promise.reject(error))).toEqual({ error });
    }
    expect(b.state).toBe('closed');
    expect(changes).toEqual([]);
  });

  it.each([
    ['ERR_RESILIMIT_REDIS_UNAVAILABLE', true, unavailable()],
    ["opossum's ETIMEDOUT", true, Object.assign(new Error('Timed out after 50ms'), { code: 'ETIMEDOUT' })],
    ['ERR_RESILIMIT_REDIS_REPLY', false, new ResilimitError(ErrorCode.REDIS_REPLY, 'Redis rejected the call: ERR x')],
    ['ERR_RESILIMIT_INVALID_COST', false, new ResilimitError(ErrorCode.INVALID_COST, 'x')],
    ['ERR_RESILIMIT_CLOSED', false, new ResilimitError(ErrorCode.CLOSED, 'x')],
    ['a TypeError', false, new TypeError('x is not a function')],
    ['a RangeError', false, new RangeError('x')],
    ["opossum's EOPENBREAKER", false, Object.assign(new Error('Breaker is open'), { code: 'EOPENBREAKER' })],
    ['a plain Error', false, new Error('boom')],
    ['an unwrapped ioredis connection error', false, new Error('Connection is closed.')],
    ['a resilimit code on a foreign error', false, Object.assign(new Error('x'), { code: 'ERR_RESILIMIT_REDIS_UNAVAILABLE' })],
    ['null', false, null],
    ['undefined', false, undefined],
    ['a string', false, 'ETIMEDOUT'],
  ])('countsAsFailure(%s) is %s', (_, expected, error) => {
    expect(countsAsFailure(error)).toBe(expected);
  });

  it('opens at once on open() and half-opens after resetTimeoutMs', async () => {
    const { b, changes } = tracked();
    b.open();
    expect(b.state).toBe('open');
    await vi.advanceTimersByTimeAsync(1000);
    expect(b.state).toBe('half-open');
    expect(changes).toEqual([
      ['open', 'closed'],
      ['half-open', 'open'],
    ]);
  });

  it('holds it open past resetTimeoutMs with no half-open trial after forceOpen', async () => {
    const { b, changes } = tracked();
    b.forceOpen();
    expect(b.state).toBe('open');
    expect(b.accepting).toBe(false);
    await vi.advanceTimersByTimeAsync(10 * 4000);
    expect(b.state).toBe('open');
    expect(b.accepting).toBe(false);
    expect(changes).toEqual([['open', 'closed']]);
  });

  it('forceOpen holds an open breaker open and keeps a half-open one from trialling', async () => {
    const { b, changes } = await opened();
    await vi.advanceTimersByTimeAsync(1000);
    expect(b.state).toBe('half-open');
    b.forceOpen();
    expect(b.state).toBe('open');
    await vi.advanceTimersByTimeAsync(20_000);
    expect(b.state).toBe('open');
    expect(changes).toEqual([
      ['open', 'closed'],
      ['half-open', 'open'],
      ['open', 'half-open'],
    ]);
  });

  // BUG (src/redis/Breaker.ts, forceOpen + the 'halfOpen' handler): forceOpen() only hides the half-open
  // state; opossum's reset timer still moves it to half-open after resetTimeoutMs, so fire() lets a
  // trial through (and, if it succeeds, every call after it) while `state` says 'open'.
  it('rejects fire() with EOPENBREAKER while forced open, also after resetTimeoutMs', async () => {
    const { b } = tracked();
    b.forceOpen();
    expect(codeOf(await settle(b, ok))).toBe('EOPENBREAKER');
    await vi.advanceTimersByTimeAsync(1000);
    const run = vi.fn(ok);
    expect(codeOf(await settle(b, run))).toBe('EOPENBREAKER');
    expect(run).not.toHaveBeenCalled();
  });

  it('closes on forceClose, lifts a forced open and resets the open period', async () => {
    const { b, changes } = await opened();
    await vi.advanceTimersByTimeAsync(1000);
    await fail(b, 1); // open period now 2000
    b.forceOpen();
    b.forceClose();
    expect(b.state).toBe('closed');
    expect(b.accepting).toBe(true);
    expect(b.resetTimeoutMs).toBe(1000);
    expect(await settle(b, ok)).toEqual({ value: 'ok' });
    // No reset timer is left to half-open it.
    await vi.advanceTimersByTimeAsync(10_000);
    expect(b.state).toBe('closed');
    expect(changes).toEqual([
      ['open', 'closed'],
      ['half-open', 'open'],
      ['open', 'half-open'],
      ['closed', 'open'],
    ]);
  });

  it('trial() makes one trial while open and resolves when it is over; none while closed or forced open', async () => {
    const { b } = await opened();
    const probe = Promise.withResolvers<void>();
    const first = b.trial(() => probe.promise);
    const other = vi.fn(ok);
    expect(b.trial(other)).toBe(first); // the trial running now, not a second one
    expect(other).not.toHaveBeenCalled();
    expect(b.state).toBe('half-open');
    let over = false;
    void first.then(() => (over = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(over).toBe(false);
    probe.resolve();
    await first;
    expect(b.state).toBe('closed');
    await b.trial(other); // closed: nothing to try
    b.forceOpen();
    await b.trial(other);
    expect(other).not.toHaveBeenCalled();
    expect(b.state).toBe('open');
  });

  it('reports nothing for forceClose on a closed breaker', () => {
    const { b, changes } = tracked();
    b.forceClose();
    expect(b.state).toBe('closed');
    expect(changes).toEqual([]);
  });

  it('reports every transition to onChange, in order, with the previous state', async () => {
    const { b, changes } = tracked();
    await fail(b, 4);
    await vi.advanceTimersByTimeAsync(1000);
    await fail(b, 1);
    await vi.advanceTimersByTimeAsync(2000);
    await settle(b, ok);
    b.forceOpen();
    b.forceClose();
    b.open();
    b.forceClose();
    expect(changes).toEqual([
      ['open', 'closed'],
      ['half-open', 'open'],
      ['open', 'half-open'],
      ['half-open', 'open'],
      ['closed', 'half-open'],
      ['open', 'closed'],
      ['closed', 'open'],
      ['open', 'closed'],
      ['closed', 'open'],
    ]);
  });

  it('leaves no pending timer after shutdown, closed (bucket interval included) or open', async () => {
    const closed = breaker();
    expect(vi.getTimerCount()).toBe(1); // opossum's rolling-window bucket interval
    closed.b.shutdown();
    expect(vi.getTimerCount()).toBe(0);

    const open = breaker();
    await fail(open.b, 4);
    expect(open.b.state).toBe('open');
    // Bucket interval, reset timer, and the deadlines' timer: it stays armed until the deadline of
    // the last call passes (it is shared by every call: see Deadlines), even when all were answered.
    expect(vi.getTimerCount()).toBe(3);
    open.b.shutdown();
    expect(vi.getTimerCount()).toBe(0);

    const forced = breaker();
    forced.b.forceOpen();
    forced.b.shutdown();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('rejects calls after shutdown without running them and reports no transition', async () => {
    const { b, changes } = breaker();
    b.shutdown();
    const run = vi.fn(ok);
    expect(codeOf(await settle(b, run))).toBe('ESHUTDOWN');
    expect(run).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(changes).toEqual([]);
  });
});
