/**
 * The decision path: the gates and the write-back retries on an injected monotonic clock (`perf`),
 * and `limitAll()` on the path `limit()` takes (the ledger, `close()`), against a real
 * redis-server child that is frozen (SIGSTOP) where Redis must not answer. Nothing sleeps: time moves
 * only when a test moves it, so each bound is checked at its exact edge, on a loaded machine too.
 * The breaker's own deadline is opossum's real timer: it is set to 60 s, far past any test.
 */
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { ResilientLimiter, BreakerState, LimiterDecision, ResilientLimiterOptions } from '../../src/index.js';
import { useLimiters } from '../support/limiters.js';

/** Longer than any test: the gates, not opossum's timer, must be what answers. */
const DEADLINE_MS = 60_000;

const lim = useLimiters({ limit: 1_000, windowMs: 60_000, local: { instances: 1 } });
// After useLimiters's: vitest runs afterEach hooks last registered first, so the server thaws before the limiters close.
afterEach(() => {
  lim.server.thaw();
});

/** A monotonic clock that moves only when told to. */
function fakePerf(): { now(): number; advance(ms: number): void } {
  let t = 1_000;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

/**
 * Resolves in the next event-loop turn, after the loop has polled for I/O. The gate counts Redis's
 * silence only up to a time that a completed poll vouches for (see PollWatch): it looks at the perf
 * clock as the first call of a turn is asked, and again right after the next poll (the check phase,
 * where this resolves). So a test that moves the clock makes a call, which lets the gate see the new
 * time (the gate cannot count it yet), then waits for this: the time is vouched for.
 */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

async function limiter(perf: { now(): number }, options: Partial<ResilientLimiterOptions> = {}, warm = true): Promise<ResilientLimiter> {
  const { breaker, ...rest } = options;
  const l = await lim.limiter({
    prefix: `g:${randomUUID()}:`,
    perf,
    ...rest,
    breaker: { timeoutMs: DEADLINE_MS, resetTimeoutMs: 60_000, ...breaker },
  });
  // Warm: the script is loaded and the clock offset known.
  for (let i = 0; warm && i < 3; i++) expect(await l.limit(`warm${i}`)).toMatchObject({ source: 'redis', reason: 'decided' });
  return l;
}

/** A decision that is already made when this is called (answered without waiting on Redis). */
async function answeredAtOnce(decision: Promise<LimiterDecision>): Promise<LimiterDecision> {
  const marker = Symbol('pending');
  const first = await Promise.race([decision, nextTurn().then(() => marker)]);
  if (first === marker) throw new Error('the call waited on Redis');
  return first as LimiterDecision;
}

describe('the gates on the perf clock, Redis frozen', () => {
  it('answers slow only once a poll vouches that Redis was silent for more than slowCallMs, and opens the breaker past the deadline (a stall)', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { slowCallMs: 20, reconcile: false });
    lim.server.freeze();
    const sent = [l.limit('stuck')];
    await nextTurn(); // sent: the oldest outstanding call, at perf time t
    perf.advance(20);
    // Silent for 20 ms, but no poll since the gate saw t + 20: not counted yet, the call goes to Redis.
    sent.push(l.limit('sees-20'));
    await nextTurn();
    // Silent for exactly slowCallMs, vouched for: not slow yet, the call goes to Redis.
    sent.push(l.limit('at-edge'));
    await nextTurn();
    expect(l.stats().inFlight).toBe(3);
    perf.advance(1);
    sent.push(l.limit('sees-21'));
    await nextTurn();
    expect(l.stats().inFlight).toBe(4);
    expect(await answeredAtOnce(l.limit('slow'))).toMatchObject({ source: 'local', reason: 'slow', allowed: true });
    await nextTurn();
    perf.advance(DEADLINE_MS - 21);
    expect(await answeredAtOnce(l.limit('sees-deadline'))).toMatchObject({ reason: 'slow' });
    await nextTurn();
    // Silent for exactly the deadline, vouched for: still slow, not a stall.
    expect(await answeredAtOnce(l.limit('slow2'))).toMatchObject({ reason: 'slow' });
    expect(l.state).toBe('closed');
    await nextTurn();
    perf.advance(1);
    expect(await answeredAtOnce(l.limit('sees-past'))).toMatchObject({ reason: 'slow' });
    expect(l.state).toBe('closed');
    await nextTurn();
    expect(await answeredAtOnce(l.limit('stall'))).toMatchObject({ source: 'local', reason: 'breaker-open' });
    expect(l.state).toBe('open');
    lim.server.thaw();
    // The frozen calls run once Redis wakes (their staleness deadline is opossum's 60 s away).
    for (const d of await Promise.all(sent)) expect(d.source).toBe('redis');
  });

  it('does not count as silence the time this process was busy before a poll could read the reply', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { reconcile: false });
    await lim.admin.ping(); // from here on this runs in a poll phase, right after a reply was read
    const first = l.limit('a');
    await new Promise<void>((resolve) => process.nextTick(resolve)); // sent, at perf time t; Redis answers at once
    // A timer callback asks again before the loop polls: the rest of this iteration keeps the process
    // busy past the deadline (the clock moves, as for handlers burning CPU; and 2 ms of real time, so
    // that the timer's 1 ms is due when the iteration reaches its timers), so the reply lies unread.
    const asked = new Promise<Promise<LimiterDecision>>((resolve) => setTimeout(() => resolve(l.limit('b')), 0));
    perf.advance(DEADLINE_MS + 1);
    const until = performance.now() + 2;
    while (performance.now() < until);
    const second = await asked;
    // Not a stall: no poll has run since the call was sent. Redis decides both.
    expect(await first).toMatchObject({ source: 'redis', reason: 'decided' });
    expect(await second).toMatchObject({ source: 'redis', reason: 'decided' });
    expect(l.state).toBe('closed');
  });

  it('measures silence from the last reply, not only from the oldest call', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { slowCallMs: 20, reconcile: false });
    lim.server.freeze();
    const stuck = l.limit('stuck');
    await nextTurn();
    perf.advance(50);
    lim.server.thaw();
    expect((await stuck).source).toBe('redis'); // a reply at perf t + 50
    lim.server.freeze();
    const again = l.limit('again'); // sent at t + 50
    await nextTurn();
    perf.advance(20);
    const atEdge = l.limit('at-edge'); // the gate sees t + 70
    await nextTurn();
    expect(l.stats().inFlight).toBe(2);
    perf.advance(1);
    const seeing = l.limit('sees-71');
    await nextTurn();
    expect(l.stats().inFlight).toBe(3);
    // Silent for 21 ms since the reply (71 since the oldest call but one, long answered).
    expect(await answeredAtOnce(l.limit('slow'))).toMatchObject({ reason: 'slow' });
    lim.server.thaw();
    await Promise.all([again, atEdge, seeing]);
  });

  it('does not count a burst made in one turn as silence of its own making', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { slowCallMs: 20, reconcile: false });
    lim.server.freeze();
    const first = l.limit('a');
    // The clock moves within the same turn: the gate measures up to the start of the turn.
    perf.advance(1_000);
    const second = l.limit('b');
    await nextTurn();
    expect(l.stats().inFlight).toBe(2);
    lim.server.thaw();
    expect((await first).reason).toBe('decided');
    expect((await second).reason).toBe('decided');
  });

  it('answers saturated once maxInFlight decisions wait on Redis, sent or queued', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { maxInFlight: 3, reconcile: false });
    lim.server.freeze();
    const waiting = [l.limit('a'), l.limit('b')]; // queued for this turn's batch
    await nextTurn();
    waiting.push(l.limit('c')); // two sent, one queued
    expect(await answeredAtOnce(l.limit('d'))).toMatchObject({ source: 'local', reason: 'saturated' });
    lim.server.thaw();
    for (const d of await Promise.all(waiting)) expect(d.reason).toBe('decided');
    expect(await l.limit('e')).toMatchObject({ reason: 'decided' });
  });

  it('lets the half-open trial through although the ledger still holds stalled calls', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { reconcile: false, breaker: { resetTimeoutMs: 1 } });
    lim.server.freeze();
    const stuck = l.limit('stuck');
    await nextTurn();
    perf.advance(DEADLINE_MS + 1);
    const seeing = l.limit('sees-deadline'); // not vouched for yet: sent, and stalled too
    await nextTurn();
    const halfOpen = new Promise<void>((resolve) => {
      const onChange = ({ state }: { state: BreakerState }): void => {
        if (state === 'half-open') resolve();
      };
      l.on('stateChange', onChange);
    });
    expect(await answeredAtOnce(l.limit('stall'))).toMatchObject({ reason: 'breaker-open' });
    await halfOpen; // opossum's open period (1 ms, its own timer)
    expect(l.state).toBe('half-open');
    const trial = l.limit('trial');
    // The trial is the one call opossum lets through: any other is refused at once.
    expect(await answeredAtOnce(l.limit('other'))).toMatchObject({ reason: 'breaker-open' });
    const closed = once(l, 'stateChange');
    lim.server.thaw();
    expect(await trial).toMatchObject({ source: 'redis', reason: 'decided' });
    expect(await closed).toEqual([{ state: 'closed', previous: 'half-open' }]);
    await Promise.all([stuck, seeing]);
  });
});

describe('write-back retries on the perf clock', () => {
  it('retries a held key at most every 50 ms (HELD_RETRY_MS) after a failed pass', async () => {
    const perf = fakePerf();
    const prefix = `g:${randomUUID()}:`;
    const l = await limiter(perf, { prefix });
    const passes: number[] = [];
    l.on('reconciled', (r) => passes.push(r.remaining));
    l.forceOpen();
    expect(await l.limit('held')).toMatchObject({ source: 'local', reason: 'breaker-open' });
    // The key's window in Redis is a string: its write-back fails (WRONGTYPE) without opening the breaker.
    await lim.admin.set(`${prefix}{held}`, 'not a window');
    const firstPass = once(l, 'reconciled');
    l.forceClose(); // catch-up: one pass, which fails
    await firstPass;
    await nextTurn(); // the catch-up ends with its pass
    expect(passes).toEqual([1]);
    // Failed at perf t: the key stays held, and no pass starts before t + 50.
    expect(await answeredAtOnce(l.limit('held'))).toMatchObject({ source: 'local', reason: 'reconciling' });
    perf.advance(49);
    expect(await answeredAtOnce(l.limit('held'))).toMatchObject({ reason: 'reconciling' });
    expect(passes).toEqual([1]);
    perf.advance(1);
    // A new pass sends the key's calls, and this call goes right behind them (and fails the same way).
    const secondPass = once(l, 'reconciled');
    expect(await l.limit('held')).toMatchObject({ source: 'local', reason: 'redis-reply-error' });
    await secondPass;
    expect(passes).toEqual([1, 3]); // the two calls answered `reconciling` were journalled too
    // Other keys were decided by Redis all along.
    expect(await l.limit('other')).toMatchObject({ reason: 'decided' });
    await lim.admin.del(`${prefix}{held}`);
  });
});

describe('limitAll() on the decision path of limit()', () => {
  const limits = [{ key: 'a', limit: 5, windowMs: 60_000 }];

  it('feeds the average Redis latency, on the perf clock', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { reconcile: false }, false);
    expect(l.stats().redisLatencyMs).toBe(1);
    const decision = l.limitAll(limits); // sent before limitAll() returns: the ledger read perf then
    perf.advance(9);
    expect(await decision).toMatchObject({ allowed: true, source: 'redis' });
    // 1 + (9 - 1) × 0.05: one call 9 ms long moves the average a twentieth of the way.
    expect(l.stats().redisLatencyMs).toBeCloseTo(1.4, 9);
  });

  it('is waited for by close(), as limit() is', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { reconcile: false });
    lim.server.freeze();
    const decision = l.limitAll(limits);
    let closed = false;
    const closing = l.close().then(() => {
      closed = true;
    });
    for (let i = 0; i < 50; i++) await nextTurn();
    expect(closed).toBe(false);
    expect(l.stats().inFlight).toBe(1);
    lim.server.thaw();
    expect(await decision).toMatchObject({ allowed: true, source: 'redis' });
    await closing;
    expect(closed).toBe(true);
  });
});

describe('the deny cache on the perf clock', () => {
  it('denies a key for retryAfterMs of the perf clock, whatever the wall clock does', async () => {
    const perf = fakePerf();
    const l = await limiter(perf, { limit: 1, windowMs: 60_000, reconcile: false });
    expect(await l.limit('k')).toMatchObject({ allowed: true, source: 'redis' });
    const refused = await l.limit('k');
    expect(refused).toMatchObject({ allowed: false, source: 'redis' });
    expect(await l.limit('k')).toMatchObject({ allowed: false, reason: 'deny-cache' });
    // The wait Redis gave has passed on the monotonic clock (not on the wall clock): Redis is asked again.
    perf.advance(refused.retryAfterMs + 1);
    expect(await l.limit('k')).toMatchObject({ allowed: false, source: 'redis', reason: 'decided' });
  });
});
