/**
 * This process's wall clock (`Date.now`) stepping 60 s back or forward after the limiter was made
 * (an NTP step, an operator setting the time), with no injected `clock`: the durations the limiter
 * measures locally — the deny cache's wait, the local window, the journal's window on write-back —
 * must not step with it. Redis's clock does not step here (a real redis-server, whose `TIME` these
 * tests cannot move): only this process's `Date.now` is replaced.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createRedisClient, ResilientLimiter, type ResilientLimiterOptions } from '../../src/index.js';
import { startRedisServer, waitReady, type RedisChild } from '../support/redis.js';

const STEP_MS = 60_000;

let server: RedisChild;
const clients: Redis[] = [];
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  server = await startRedisServer();
  await waitReady(server.client());
});
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.all(limiters.splice(0).map((l) => l.close()));
  for (const c of clients.splice(0)) c.disconnect();
});
afterAll(async () => {
  await server?.close();
});

async function limiter(options: Partial<ResilientLimiterOptions> & { limit: number; windowMs: number }): Promise<ResilientLimiter> {
  const redis = createRedisClient({ host: '127.0.0.1', port: server.port });
  clients.push(redis);
  await waitReady(redis);
  const l = new ResilientLimiter({ redis, prefix: `step:${randomUUID()}:`, local: { instances: 1 }, ...options });
  limiters.push(l);
  for (let i = 0; i < 3; i++) expect(await l.limit(`warm-up-${i}`)).toMatchObject({ source: 'redis' });
  return l;
}

/**
 * `Date.now` is replaced before the limiter is made (it may keep a reference to it, as it would to
 * the real one, whose readings a step changes): `stepWallClock(ms)` makes it read `ms` away from
 * the real clock from then on.
 */
let stepWallClock: (ms: number) => void = () => undefined;
beforeEach(() => {
  const real = Date.now.bind(Date);
  let stepMs = 0;
  vi.spyOn(Date, 'now').mockImplementation(() => real() + stepMs);
  stepWallClock = (ms) => {
    stepMs = ms;
  };
});

describe.each([
  ['back', -STEP_MS],
  ['forward', STEP_MS],
])('the wall clock stepping 60 s %s', (_, stepMs) => {
  it('does not change how long the deny cache keeps a key denied', async () => {
    const l = await limiter({ limit: 2, windowMs: 1000 });
    for (let i = 0; i < 2; i++) expect(await l.limit('k')).toMatchObject({ source: 'redis', allowed: true });
    expect(await l.limit('k')).toMatchObject({ source: 'redis', allowed: false });
    expect(await l.limit('k')).toMatchObject({ reason: 'deny-cache', allowed: false });
    stepWallClock(stepMs);
    expect(await l.limit('k')).toMatchObject({ reason: 'deny-cache', allowed: false });
    await sleep(1100);
    const after = await l.limit('k');
    expect(after.reason).not.toBe('deny-cache');
    // Nor by the warm local window (a call Redis found past its deadline is answered there).
    expect(after).toMatchObject({ source: 'redis', reason: 'decided', allowed: true });
  });

  it('does not keep a key denied longer, nor free it earlier, in the local window while Redis is down', async () => {
    const l = await limiter({ limit: 3, windowMs: 1000 });
    l.forceOpen();
    for (let i = 0; i < 3; i++) expect(await l.limit('k')).toMatchObject({ source: 'local', allowed: true });
    stepWallClock(stepMs);
    const denied = await l.limit('k');
    expect(denied).toMatchObject({ source: 'local', allowed: false });
    expect(denied.retryAfterMs).toBeGreaterThan(0);
    expect(denied.retryAfterMs).toBeLessThanOrEqual(1000);
    await sleep(1100);
    expect(await l.limit('k')).toMatchObject({ source: 'local', allowed: true });
  });

  it('keeps every call the local window holds, and writes them back so that Redis counts them', async () => {
    const l = await limiter({ limit: 5, windowMs: STEP_MS });
    l.forceOpen();
    for (let i = 0; i < 3; i++) expect(await l.limit('k')).toMatchObject({ source: 'local', allowed: true });
    stepWallClock(stepMs);
    for (let i = 0; i < 2; i++) expect(await l.limit('k')).toMatchObject({ source: 'local', allowed: true });
    expect(await l.limit('k')).toMatchObject({ source: 'local', allowed: false });
    l.forceClose();
    await l.reconcile();
    expect(l.stats().reconcile).toMatchObject({ written: 5, expired: 0, pending: 0, dropped: 0 });
    expect(await l.limit('k')).toMatchObject({ source: 'redis', allowed: false });
  });
});
