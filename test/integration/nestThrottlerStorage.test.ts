/**
 * resilimit/nestjs: ResilimitThrottlerStorage under the real @nestjs/throttler 6 (ThrottlerModule,
 * and its ThrottlerGuard as the global APP_GUARD, with @Throttle on a route) in a real Nest
 * application context. Without @nestjs/platform-express (not a dependency here), Nest's own
 * ExternalContextCreator runs each route's guards, and a real Express 5 app on an OS-assigned
 * loopback port serves it: a ThrottlerException answers its status and message, as Nest's exception
 * filter would; any other error answers 500 with its code. Decisions on a real Redis (a redis-server
 * child of this file, which the outage test freezes).
 */
import 'reflect-metadata';
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Controller, Get, HttpException, Module } from '@nestjs/common';
import { APP_GUARD, ExternalContextCreator, NestFactory } from '@nestjs/core';
import { Throttle, ThrottlerGuard, ThrottlerModule, type ThrottlerOptions } from '@nestjs/throttler';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { ResilimitThrottlerStorage, type ResilimitThrottlerStorageOptions } from '../../src/nestjs.js';
import { useLimiters } from '../support/limiters.js';

// The file's Redis server and clients (no limiter of its own: the storage makes them).
const redis = useLimiters({ limit: 1, windowMs: 1 });

/** The routes: `/hello` under the throttlers as configured, `/strict` with its own limit for the `default` throttler. */
class Routes {
  hello(): string {
    return 'hello';
  }
  strict(): string {
    return 'strict';
  }
}
// Nest's decorators, applied as the legacy (experimentalDecorators) compiler would: the tests run
// without that setting.
Controller()(Routes);
for (const [name, ...decorators] of [
  ['hello', Get('/hello')],
  ['strict', Get('/strict'), Throttle({ default: { limit: 1, ttl: 60_000 } })],
] as const) {
  const descriptor = Object.getOwnPropertyDescriptor(Routes.prototype, name) as PropertyDescriptor;
  for (const decorate of decorators) decorate(Routes.prototype, name, descriptor);
}

type App = {
  storage: ResilimitThrottlerStorage;
  get(path: string): Promise<Reply>;
  close(): Promise<void>;
};
type Reply = { status: number; headers: Headers; body: string; ms: number };

const apps: App[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((a) => a.close()));
});

/** A Nest application of ThrottlerModule (`throttlers`, the storage of `options`) and the routes, served by Express. */
async function serve(
  throttlers: ThrottlerOptions[],
  options: Partial<ResilimitThrottlerStorageOptions> = {},
  client?: Redis,
): Promise<App> {
  const storage = new ResilimitThrottlerStorage({
    redis: client ?? (await redis.client()),
    prefix: `nest:${crypto.randomUUID()}:`,
    local: { instances: 1 },
    // A generous deadline: these tests are about @nestjs/throttler, so Redis must decide even on a
    // loaded machine (the outage test sets its own).
    breaker: { timeoutMs: 2_000 },
    ...options,
  });
  class AppModule {}
  Module({
    imports: [ThrottlerModule.forRoot({ throttlers, storage })],
    controllers: [Routes],
    providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
  })(AppModule);
  const nest = await NestFactory.createApplicationContext(AppModule, { logger: false });
  const routes = nest.get(Routes);
  const contexts = nest.get(ExternalContextCreator);
  const app = express();
  for (const name of ['hello', 'strict'] as const) {
    const handle = contexts.create(routes, routes[name], name, undefined, undefined, undefined, undefined, { guards: true }, 'http');
    app.get(`/${name}`, async (req, res, next) => {
      try {
        res.send(await handle(req, res, next));
      } catch (error) {
        if (!(error instanceof HttpException)) throw error;
        res.status(error.getStatus()).json({ statusCode: error.getStatus(), message: error.message });
      }
    });
  }
  app.use((error: { code?: string; message: string }, _req: Request, res: Response, _next: NextFunction) => {
    res.status(500).json({ code: error.code, message: error.message });
  });
  const server: Server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  let closed = false;
  const served: App = {
    storage,
    async get(path) {
      const started = performance.now();
      const response = await fetch(`http://127.0.0.1:${port}${path}`);
      const body = await response.text();
      return { status: response.status, headers: response.headers, body, ms: performance.now() - started };
    },
    async close() {
      if (closed) return;
      closed = true;
      server.closeAllConnections();
      server.close();
      await Promise.all([once(server, 'close'), nest.close()]);
    },
  };
  apps.push(served);
  return served;
}

async function replies(app: App, path: string, n: number): Promise<Reply[]> {
  const out: Reply[] = [];
  for (let i = 0; i < n; i += 1) out.push(await app.get(path));
  return out;
}

describe('ResilimitThrottlerStorage under the ThrottlerGuard', () => {
  it("holds the limit: the guard's 429 and Retry-After, X-RateLimit-Remaining the decision's", async () => {
    const app = await serve([{ limit: 3, ttl: 60_000 }]);
    const got = await replies(app, '/hello', 4);
    expect(got.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(got.slice(0, 3).map((r) => r.headers.get('x-ratelimit-remaining'))).toEqual(['2', '1', '0']);
    expect(got[0]?.headers.get('x-ratelimit-limit')).toBe('3');
    // The window is empty 60 s after the call: 60 s from now, rounded up, less a second at most on a loaded machine.
    expect(got[2]?.headers.get('x-ratelimit-reset')).toMatch(/^(59|60)$/);
    expect(JSON.parse(got[3]?.body ?? '')).toEqual({ statusCode: 429, message: 'ThrottlerException: Too Many Requests' });
    // The guard's blockDuration defaults to ttl: the refusal blocks the key 60 s.
    expect(got[3]?.headers.get('retry-after')).toBe('60');
    const limiter = app.storage.limiters.get('3:60000:60000');
    expect(limiter?.stats().bySource.redis).toBe(4);
    expect([...app.storage.limiters.keys()]).toEqual(['3:60000:60000']);
  });

  it('passes resolutionMs to its limiters: the window counted by slices holds the limit', async () => {
    const app = await serve([{ limit: 3, ttl: 60_000 }], { resolutionMs: 1_000 });
    const got = await replies(app, '/hello', 4);
    expect(got.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(app.storage.limiters.get('3:60000:60000')?.stats().bySource.redis).toBe(4);
  });

  it("makes one limiter per (limit, ttl, blockDuration): a route's @Throttle has a window of its own", async () => {
    const app = await serve([{ limit: 3, ttl: 60_000, blockDuration: 0 }]);
    expect((await replies(app, '/strict', 2)).map((r) => r.status)).toEqual([200, 429]);
    expect((await replies(app, '/hello', 3)).map((r) => r.status)).toEqual([200, 200, 200]);
    // @Throttle gave limit and ttl; blockDuration is the throttler's.
    expect([...app.storage.limiters.keys()].sort()).toEqual(['1:60000:0', '3:60000:0']);
  });

  it('keeps named throttlers apart, also when their keys are the same', async () => {
    // Without the throttler's name in the key, both throttlers would count each request in one window.
    const app = await serve([
      { name: 'first', limit: 2, ttl: 60_000, generateKey: (_context, tracker) => tracker },
      { name: 'second', limit: 2, ttl: 60_000, generateKey: (_context, tracker) => tracker },
    ]);
    const got = await replies(app, '/hello', 3);
    expect(got.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(
      got.slice(0, 2).map((r) => [r.headers.get('x-ratelimit-remaining-first'), r.headers.get('x-ratelimit-remaining-second')]),
    ).toEqual([
      ['1', '1'],
      ['0', '0'],
    ]);
    expect(app.storage.limiters.size).toBe(1);
  });

  it('blocks a refused key for blockDuration, beyond its window, and not at all with a blockDuration of 0', async () => {
    // One clock for both tiers (it replaces Redis TIME): the test moves it, nothing sleeps.
    let now = Date.now();
    const blocking = await serve([{ limit: 1, ttl: 60_000, blockDuration: 600_000 }], { clock: () => now });
    const sliding = await serve([{ limit: 1, ttl: 60_000, blockDuration: 0 }], { clock: () => now });
    for (const app of [blocking, sliding]) expect((await replies(app, '/hello', 2)).map((r) => r.status)).toEqual([200, 429]);
    now += 1_000;
    expect((await blocking.get('/hello')).headers.get('retry-after')).toBe('599');
    expect((await sliding.get('/hello')).headers.get('retry-after')).toBe('59');
    now += 60_000; // the windows have passed; the block has not
    const blocked = await blocking.get('/hello');
    expect(blocked.status).toBe(429);
    expect(blocked.headers.get('retry-after')).toBe('539');
    expect((await sliding.get('/hello')).status).toBe(200);
    now += 540_000;
    expect((await blocking.get('/hello')).status).toBe(200);
  });

  it('closes its limiters when Nest closes the application; the Redis client stays open', async () => {
    const client = await redis.client();
    const app = await serve([{ limit: 3, ttl: 60_000 }], {}, client);
    expect((await app.get('/hello')).status).toBe(200);
    const [limiter] = app.storage.limiters.values();
    await app.close();
    await expect(limiter?.limit('k')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_CLOSED' });
    // A limit it had no limiter for: none is made (it would hold timers and a heartbeat past the shutdown).
    await expect(app.storage.increment('k', 1_000, 7, 0, 'default')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_CLOSED' });
    expect(app.storage.limiters.size).toBe(1);
    expect(client.status).toBe('ready');
  });
});

describe('ResilimitThrottlerStorage while Redis cannot answer', () => {
  // The breaker's deadline for a frozen Redis. The bound on a request adds a loaded machine's loopback
  // HTTP round trip and event-loop delays; a storage without a deadline would hang until the test's timeout.
  const TIMEOUT_MS = 100;
  const BOUND_MS = TIMEOUT_MS + 900;

  it('answers from the local window within the deadline while Redis is frozen; the guard still refuses past it', async () => {
    const app = await serve([{ limit: 3, ttl: 60_000 }], { breaker: { timeoutMs: TIMEOUT_MS } });
    expect((await app.get('/hello')).status).toBe(200); // the limiter is made, and Redis has answered it once
    redis.server.freeze();
    try {
      const got = await replies(app, '/hello', 3);
      expect(got.map((r) => r.status)).toEqual([200, 200, 429]);
      for (const r of got) expect(r.ms).toBeLessThan(BOUND_MS);
      expect(got[2]?.headers.get('retry-after')).toBe('60');
      expect(app.storage.limiters.get('3:60000:60000')?.stats().bySource.local).toBe(3);
    } finally {
      redis.server.thaw();
    }
  });

  it("answers 429 with the breaker's open period as Retry-After in fail-closed mode", async () => {
    const app = await serve([{ limit: 3, ttl: 60_000 }], { mode: 'fail-closed', breaker: { timeoutMs: 2_000, resetTimeoutMs: 2_200 } });
    expect((await app.get('/hello')).status).toBe(200);
    app.storage.limiters.get('3:60000:60000')?.forceOpen();
    const reply = await app.get('/hello');
    expect(reply.status).toBe(429);
    expect(reply.headers.get('retry-after')).toBe('3');
  });
});

describe('ResilimitThrottlerStorage refuses misuse', () => {
  it('fails the request, naming the value and the throttler, for a limit, ttl or blockDuration it cannot take', async () => {
    const cases: [ThrottlerOptions, string][] = [
      [{ limit: 0, ttl: 60_000 }, 'Expected `limit` of the throttler "default" to be an integer from 1 to 2147483647, got `0` (number)'],
      [{ limit: 3, ttl: 1.5 }, 'Expected `ttl` of the throttler "default" to be an integer from 1 to 2147483647 ms, got `1.5` (number)'],
      [
        { limit: 3, ttl: 60_000, blockDuration: -1 },
        'Expected `blockDuration` of the throttler "default" to be an integer from 0 to 2147483647 ms, got `-1` (number)',
      ],
    ];
    for (const [throttler, message] of cases) {
      const app = await serve([throttler]);
      const reply = await app.get('/hello');
      expect(reply.status).toBe(500);
      expect(JSON.parse(reply.body)).toEqual({ code: 'ERR_RESILIMIT_INVALID_OPTION', message });
      expect(app.storage.limiters.size).toBe(0);
    }
  });

  it('refuses a limiter past maxLimiters, and goes on deciding with those it has', async () => {
    const app = await serve([{ limit: 3, ttl: 60_000 }], { maxLimiters: 1 });
    expect((await app.get('/hello')).status).toBe(200);
    const reply = await app.get('/strict');
    expect(reply.status).toBe(500);
    expect(JSON.parse(reply.body)).toMatchObject({
      code: 'ERR_RESILIMIT_INVALID_OPTION',
      message: expect.stringContaining(
        'Expected at most `maxLimiters` (1) different (limit, ttl, blockDuration) among the throttlers, got one more: 1:60000:60000 of the throttler "default"',
      ),
    });
    expect((await app.get('/hello')).status).toBe(200);
  });

  it('refuses bad options at construction, before any request', async () => {
    const client = await redis.client();
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ limit: 5 }, /Expected `limit` to be absent: each throttler gives it, as its `limit`, got `5`/],
      [{ windowMs: 1_000 }, /`windowMs` to be absent: each throttler gives it, as its `ttl`/],
      [{ blockMs: 1_000 }, /`blockMs` to be absent: each throttler gives it, as its `blockDuration`/],
      [
        { maxLimiter: 2 },
        /Expected `maxLimiter` to be absent: ResilimitThrottlerStorage has no such option \(did you mean `maxLimiters`\?\)/,
      ],
      [{ maxLimiters: 0 }, /Expected `maxLimiters` to be an integer from 1 to 1024, got `0`/],
      [{ prefix: 'x'.repeat(96) }, /Expected `prefix` to be a string of at most 95 characters/],
      [{ breaker: { timeoutMs: 0 } }, /Expected `breaker.timeoutMs` to be an integer from 1 to 60000, got `0`/],
    ];
    for (const [options, message] of cases) {
      expect(() => new ResilimitThrottlerStorage({ redis: client, ...options })).toThrow(message);
    }
    expect(() => new ResilimitThrottlerStorage({} as never)).toThrow(/`redis`/);
  });
});
