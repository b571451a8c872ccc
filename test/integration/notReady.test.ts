/**
 * A client that never becomes ready (a wrong REDIS_URL) is told, not silent: real limiters, real
 * timers, a port nothing listens on and a real Redis. The limiter has no option for its timers
 * (the warning is not a knob worth one), so this waits the real second once, for all three cases
 * together; the schedule itself (every 60 s after, stopping once ready or closed) is tested with
 * injected timers in test/unit/readyWatch.test.ts.
 */
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisClient, ResilientLimiter } from '../../src/index.js';
import { freePort, startRedisServer, useRedis, waitReady, type RedisHandle } from '../support/redis.js';

/** When the first report is due after the limiter is made. */
const AFTER_MS = 1_000;
/** Room for a loaded machine on top of it: a timer fires late, never early. */
const SLACK_MS = 2_000;

let server: RedisHandle;
const clients: Redis[] = [];

beforeAll(async () => {
  server = await useRedis();
});

afterAll(async () => {
  for (const c of clients) c.disconnect();
  await server?.close();
});

describe('a client that never becomes ready', () => {
  it('is reported 1 s after the limiter is made, saying what calls are answered on (warning, event, stats); a healthy one and a closed one are not', async () => {
    const port = await freePort(); // nothing listens there
    const wrong = createRedisClient({ host: '127.0.0.1', port });
    const healthy = createRedisClient({ host: server.host, port: server.port });
    const early = createRedisClient({ host: '127.0.0.1', port });
    clients.push(wrong, healthy, early);
    await waitReady(healthy);
    const tag = `${process.pid}-${performance.now().toFixed(0)}`;
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => {
      if ((warning as { code?: string }).code === 'RESILIMIT_REDIS_NOT_READY' && warning.message.includes(tag)) warnings.push(warning);
    };
    process.on('warning', onWarning);
    try {
      const made = performance.now();
      // The one to be reported last: timers of one length fire in the order they were set.
      const limiters = {
        healthy: new ResilientLimiter({ redis: healthy, limit: 10, windowMs: 1000, prefix: `healthy-${tag}:` }),
        early: new ResilientLimiter({ redis: early, limit: 10, windowMs: 1000, prefix: `early-${tag}:` }),
        wrong: new ResilientLimiter({ redis: wrong, limit: 10, windowMs: 1000, prefix: `wrong-${tag}:` }),
      };
      const events: Record<string, { forMs: number; status: string; lastError?: string }[]> = { wrong: [], healthy: [], early: [] };
      for (const [name, limiter] of Object.entries(limiters)) limiter.on('notReady', (info) => events[name]?.push(info));
      await limiters.early.close(); // its timer goes with it
      // Counting instances, it never reached Redis: on limit / local.maxInstances, said by the reason.
      expect((await limiters.wrong.limit('k')).reason).toBe('no-lease');
      expect((await limiters.healthy.limit('k')).source).toBe('redis');
      expect(limiters.wrong.stats()).toMatchObject({ state: 'closed', redisReady: false });
      expect(limiters.wrong.stats().notReadyForMs).toBeLessThan(AFTER_MS);

      const reported = await new Promise<number>((resolve) => limiters.wrong.once('notReady', () => resolve(performance.now())));
      expect(reported - made).toBeGreaterThanOrEqual(AFTER_MS - 1); // less a millisecond of timer rounding
      expect(reported - made).toBeLessThan(AFTER_MS + SLACK_MS);
      // The warning is emitted on a process.nextTick; and had the others a timer, it was due by now.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(events['wrong']).toHaveLength(1);
      expect(events['wrong']?.[0]?.forMs).toBeGreaterThanOrEqual(AFTER_MS - 1);
      expect(['connecting', 'reconnecting']).toContain(events['wrong']?.[0]?.status);
      expect(events['wrong']?.[0]?.lastError).toBe(`connect ECONNREFUSED 127.0.0.1:${port}`);
      expect(warnings.map((w) => [w.name, w.message])).toEqual([
        [
          'ResilimitWarning',
          expect.stringMatching(
            new RegExp(
              `^The Redis client of the limiter with prefix "wrong-${tag}:" has not been ready in the 1 s since the limiter was made \\(status '(re)?connecting', connecting to 127\\.0\\.0\\.1:${port}; its last error: connect ECONNREFUSED 127\\.0\\.0\\.1:${port}\\)\\. Every call is answered without Redis: mode 'local', on 1 of 10 calls a 1000 ms window \\(limit / local\\.maxInstances \\(10\\): this instance has never reached Redis`,
            ),
          ),
        ],
      ]);
      expect(limiters.wrong.stats()).toMatchObject({ state: 'closed', redisReady: false });
      expect(limiters.wrong.stats().notReadyForMs).toBeGreaterThanOrEqual(AFTER_MS - 1);
      expect(limiters.healthy.stats()).toMatchObject({ redisReady: true, notReadyForMs: 0 });
      expect(events['healthy']).toEqual([]);
      expect(events['early']).toEqual([]);
      await limiters.wrong.close();
      await limiters.healthy.close();
    } finally {
      process.off('warning', onWarning);
    }
  });

  it("names why: a password missing or wrong, a host that does not resolve (the client's last error)", async () => {
    // Started open (the harness checks the process it talks to), then locked: new connections must AUTH.
    const locked = await startRedisServer();
    const admin = locked.client();
    await admin.config('SET', 'requirepass', 'right');
    admin.disconnect();
    const made = [
      { name: 'noauth', client: createRedisClient({ host: locked.host, port: locked.port }), cause: /^NOAUTH / },
      { name: 'wrongpass', client: createRedisClient({ host: locked.host, port: locked.port, password: 'wrong' }), cause: /^WRONGPASS / },
      {
        name: 'dns',
        client: createRedisClient({ host: 'no-such-host.invalid', port: 6379 }),
        cause: /^getaddrinfo (ENOTFOUND|EAI_AGAIN) no-such-host\.invalid/,
      },
    ];
    clients.push(...made.map((m) => m.client));
    try {
      const tag = `${process.pid}-${performance.now().toFixed(0)}`;
      const reports = await Promise.all(
        made.map(({ name, client }) => {
          const limiter = new ResilientLimiter({ redis: client, limit: 10, windowMs: 1000, prefix: `${name}-${tag}:` });
          return new Promise<{ name: string; lastError?: string }>((resolve) =>
            limiter.once('notReady', (info) => void limiter.close().then(() => resolve({ name, ...info }))),
          );
        }),
      );
      for (const [i, { cause }] of made.entries()) expect(reports[i]?.lastError).toMatch(cause);
    } finally {
      await locked.stop();
    }
  });
});
