/**
 * The bound the library holds itself to, end to end: 4 service processes sharing one limit, offered
 * 2× (and 4×) the limit, through a healthy phase, Redis frozen (SIGSTOP), resumed, frozen again one
 * second later, killed and restarted empty, and healthy again. In every sliding window of every key:
 * admitted ≤ 1.1 × limit in mode `local`, ≤ limit in `fail-closed`; Redis-decided admissions alone ≤
 * limit always. No exception, no unhandled rejection, every decision within the deadline plus the
 * process's own event-loop stalls.
 *
 * Each instance is a process of its own (`chaos/bound/worker.ts`, the built package), as users run
 * them, so that instances recover one after another as their clients reconnect: the staggered
 * recovery that heartbeats must cover (`InstanceCounter`).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisChild } from '../test/support/redis.ts';
import { startFleet, summary, type FleetRun } from './bound/fleet.ts';
import type { Setup } from './bound/worker.ts';

const INSTANCES = 4;
const LIMIT = 40;
const WINDOW_MS = 1000;
const KEYS = 2;
/** The library's default deadline. */
const TIMEOUT_MS = 50;
/** Slack on a decision's latency over the deadline, net of the process's own stalls: timers and one I/O poll on a loaded machine (as the chaos runner's). */
const LATENCY_SLACK_MS = 40;

/** What happens when, in ms from the start of the load. */
const TIMELINE = { freeze: 2000, thaw: 4000, freezeAgain: 5000, thawAgain: 6500, kill: 8000, restart: 8500, end: 12_000 };

let server: RedisChild;

beforeAll(async () => {
  server = await startRedisServer();
});

afterAll(async () => {
  await server?.stop();
});

/** Forks the workers, runs the timeline, and gathers every call they made. */
async function run(mode: Setup['mode'], offered: number): Promise<FleetRun> {
  const setup: Setup = {
    port: server.port,
    prefix: `bound:${randomUUID()}:`,
    limit: LIMIT,
    windowMs: WINDOW_MS,
    mode,
    perSecond: (offered * LIMIT * KEYS * 1000) / WINDOW_MS / INSTANCES,
    keys: KEYS,
    instances: INSTANCES,
  };
  // Instances beat once a second; all four count each other within a few beats (reason: 3 beats, and a loaded machine).
  const fleet = await startFleet(Array.from({ length: INSTANCES }, () => setup));
  try {
    const at = fleet.go();
    await at(TIMELINE.freeze);
    server.freeze();
    await at(TIMELINE.thaw);
    server.thaw();
    await at(TIMELINE.freezeAgain);
    server.freeze();
    await at(TIMELINE.thawAgain);
    server.thaw();
    await at(TIMELINE.kill);
    await server.kill();
    await at(TIMELINE.restart);
    await server.restart();
    await at(TIMELINE.end);
    return await fleet.stop();
  } finally {
    server.thaw();
    fleet.kill();
  }
}

describe('4 processes through a freeze, a second freeze and a restart', () => {
  it.each([
    ['local', 2, Math.floor(LIMIT * 0.1)],
    ['local', 4, Math.floor(LIMIT * 0.1)],
    ['fail-closed', 4, 0],
  ] as const)(
    'mode %s offered %i× the limit: admitted within %i over the limit in every window',
    async (mode, offered, maxExcess) => {
      const r = await run(mode, offered);
      const { all, redis, latencyNet } = summary(`${mode} ${offered}×`, r, WINDOW_MS, LIMIT);
      expect(r.errors).toEqual([]);
      expect(r.calls.filter((c) => c.threw)).toEqual([]);
      expect(redis.maxExcess).toBe(0);
      expect(all.maxExcess).toBeLessThanOrEqual(maxExcess);
      expect(latencyNet).toBeLessThanOrEqual(TIMEOUT_MS + LATENCY_SLACK_MS);
    },
    60_000,
  );
});
