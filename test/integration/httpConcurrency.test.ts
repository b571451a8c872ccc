/**
 * resilimit/http's concurrency middleware on real servers (node:http, Express, Fastify, each on an
 * OS-assigned loopback port) and a real Redis: how many requests run at once, the slot given back
 * exactly once (response sent, client gone mid-response, handler error), a client gone while its
 * request waits, and the options checked when the middleware is made.
 *
 * Waits are `until(…, EVENTS_MS)`: a bound on how long this machine, often loaded, may take to deliver
 * a few local events; never a claim about speed.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, request as httpRequest, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import Fastify from 'fastify';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/base/errors.js';
import { type ConcurrencyLimitOptions, concurrencyLimit, concurrencyLimitHook, type HttpSlotLimiter, slotOf } from '../../src/http.js';
import { ConcurrencyLimiter, type HeldSlot, ResilientLimiter } from '../../src/index.js';
import { RedisSlots } from '../../src/redis/RedisSlots.js';
import { QUOTA_EXCEEDED } from '../support/httpReplies.js';
import { type RedisHandle, useRedis, waitReady } from '../support/redis.js';
import { until } from '../support/wait.js';

/** How long a few local events may take to arrive here: generous, the machine is often loaded. */
const EVENTS_MS = 15_000;
/** The key every test's requests take slots of. */
const KEY = 'jobs';

let server: RedisHandle;
let redis: Redis;
const limiters: ConcurrencyLimiter[] = [];
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  server = await useRedis();
  redis = server.client();
  await waitReady(redis);
});
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  await Promise.all(limiters.splice(0).map((l) => l.close()));
});
afterAll(async () => {
  redis.disconnect();
  await server?.close();
});

function limiterOf(max: number): ConcurrencyLimiter {
  const limiter = new ConcurrencyLimiter({ redis, max, prefix: `hc:${randomUUID()}:`, instances: 1 });
  limiters.push(limiter);
  return limiter;
}

/** Members of the key's sorted set in Redis: the slots Redis holds. */
function heldInRedis(limiter: ConcurrencyLimiter): Promise<number> {
  const { max, ttlMs, prefix } = limiter.options;
  return redis.zcard(new RedisSlots({ redis, max, ttlMs, prefix }).keyOf(KEY));
}

/** `limiter`, counting each slot's `release()` calls and the acquires that rejected (a wait aborted). */
function counted(limiter: ConcurrencyLimiter) {
  const releases = new Map<string, number>();
  const tally = { releases, rejected: 0 };
  const wrapped: HttpSlotLimiter = {
    options: limiter.options,
    async acquire(key, options) {
      let slot: HeldSlot | undefined;
      try {
        slot = await limiter.acquire(key, options);
      } catch (error) {
        tally.rejected += 1;
        throw error;
      }
      if (slot === undefined) return undefined;
      const held = slot;
      releases.set(held.id, 0);
      return {
        ...held,
        release: () => {
          releases.set(held.id, (releases.get(held.id) ?? 0) + 1);
          return held.release();
        },
      };
    },
  };
  return { wrapped, tally };
}

/** Handlers that wait until the test lets them answer. */
class Gates {
  readonly #waiting: (() => void)[] = [];
  entered = 0;
  running = 0;
  peak = 0;

  /** Counts a handler in, and resolves when the test opens its gate. */
  async pass(): Promise<void> {
    this.entered += 1;
    this.running += 1;
    this.peak = Math.max(this.peak, this.running);
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
    this.running -= 1;
  }

  get waiting(): number {
    return this.#waiting.length;
  }

  openOne(): void {
    this.#waiting.shift()?.();
  }

  openAll(): void {
    for (const open of this.#waiting.splice(0)) open();
  }
}

async function listen(s: Server): Promise<string> {
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  closers.push(async () => {
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  });
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

/**
 * A node:http server: `concurrencyLimit(limiter, options)` in front of a handler that waits at a gate
 * (`/partial`: sends its head and a first chunk before it waits), then answers 200 with its slot's
 * source; `next(error)` answers 500.
 */
async function nodeApp(limiter: HttpSlotLimiter, options: ConcurrencyLimitOptions = {}) {
  const gates = new Gates();
  const app = { gates, arrived: 0, url: '' };
  const limit = concurrencyLimit(limiter, { key: () => KEY, ...options });
  const s = createServer((req: IncomingMessage, res: ServerResponse) => {
    app.arrived += 1;
    limit(req, res, (error) => {
      if (error !== undefined) {
        res.statusCode = 500;
        res.end(String((error as Error).message));
        return;
      }
      if (req.url === '/partial') res.write('partial');
      void gates.pass().then(() => res.end(slotOf(req)?.source ?? 'no slot'));
    });
  });
  app.url = await listen(s);
  return app;
}

type Sent = { status: number; body: string };

/** A GET on a connection of its own: the request (to destroy its socket), its response's head, its whole reply. */
function send(url: string, path = '/') {
  const { promise: head, resolve, reject } = Promise.withResolvers<IncomingMessage>();
  const request = httpRequest(`${url}${path}`, { agent: false }, resolve);
  request.on('error', reject);
  request.end();
  const reply = head.then(
    (res) =>
      new Promise<Sent>((done, fail) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => done({ status: res.statusCode ?? 0, body }));
        res.on('error', fail);
      }),
  );
  head.catch(() => {}); // a destroyed request: its reply is not read
  reply.catch(() => {});
  return { request, head, reply };
}

describe('concurrencyLimit: how many at once', () => {
  it('runs max requests at once and refuses the others with a 429 when maxWaitMs is 0', async () => {
    const limiter = limiterOf(2);
    const { wrapped, tally } = counted(limiter);
    const app = await nodeApp(wrapped);
    const sent = Array.from({ length: 5 }, () => send(app.url));
    const done: Sent[] = [];
    for (const s of sent) void s.reply.then((r) => done.push(r));
    await until(() => done.length === 3 && app.gates.entered === 2, EVENTS_MS, '3 refused, 2 running');
    for (const refused of done) {
      expect(refused.status).toBe(429);
      expect(JSON.parse(refused.body)).toMatchObject({ ...QUOTA_EXCEEDED, 'violated-policies': ['default'] });
    }
    expect(limiter.stats().held).toBe(2);
    expect(await heldInRedis(limiter)).toBe(2);
    app.gates.openAll();
    const replies = await Promise.all(sent.map((s) => s.reply));
    expect(replies.filter((r) => r.status === 200).map((r) => r.body)).toEqual(['redis', 'redis']);
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'both slots given back');
    expect(await heldInRedis(limiter)).toBe(0);
    expect([...tally.releases.values()]).toEqual([1, 1]); // each once, though 'finish' and 'close' both came
    expect(app.gates.peak).toBe(2);
  });

  it('with maxWaitMs, lets the others in as slots come back, never more than max at once', async () => {
    const limiter = limiterOf(2);
    const { wrapped, tally } = counted(limiter);
    const app = await nodeApp(wrapped, { maxWaitMs: 60_000 });
    const sent = Array.from({ length: 5 }, () => send(app.url));
    for (let running = 2; running <= 5; running += 1) {
      await until(() => app.gates.entered === running, EVENTS_MS, `request ${running} in`);
      expect(app.gates.running).toBe(2);
      app.gates.openOne();
    }
    app.gates.openAll();
    expect((await Promise.all(sent.map((s) => s.reply))).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(app.gates.peak).toBe(2);
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'every slot given back');
    expect(await heldInRedis(limiter)).toBe(0);
    expect([...tally.releases.values()]).toEqual([1, 1, 1, 1, 1]);
  });
});

describe('concurrencyLimit: the slot given back once', () => {
  it('gives the slot back when the client goes away mid-response, and lets the next request in', async () => {
    const limiter = limiterOf(1);
    const { wrapped, tally } = counted(limiter);
    const app = await nodeApp(wrapped);
    const first = send(app.url, '/partial');
    await first.head; // the handler runs, holding the slot, and has sent part of its response
    expect(limiter.stats().held).toBe(1);
    expect((await send(app.url).reply).status).toBe(429);
    first.request.destroy();
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'the slot given back as the client went away');
    expect(await heldInRedis(limiter)).toBe(0);
    const next = send(app.url);
    await until(() => app.gates.entered === 2, EVENTS_MS, 'the next request in');
    app.gates.openAll(); // the first handler ends too, on a closed response: nothing more to give back
    expect(await next.reply).toEqual({ status: 200, body: 'redis' });
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'the second slot given back');
    expect([...tally.releases.values()]).toEqual([1, 1]);
  });

  it('leaves nothing held when a client goes away while its request waits', async () => {
    const limiter = limiterOf(1);
    const { wrapped, tally } = counted(limiter);
    const app = await nodeApp(wrapped, { maxWaitMs: 60_000 });
    const holder = send(app.url);
    await until(() => app.gates.entered === 1, EVENTS_MS, 'the first request in');
    const waiter = send(app.url);
    await until(() => app.arrived === 2, EVENTS_MS, 'the second request waiting');
    waiter.request.destroy();
    // The wait is aborted at once, while the first still holds the slot: not served later to nobody.
    await until(() => tally.rejected === 1, EVENTS_MS, 'the wait aborted');
    expect(limiter.stats().held).toBe(1);
    app.gates.openAll();
    expect((await holder.reply).status).toBe(200);
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'the slot given back');
    expect(await heldInRedis(limiter)).toBe(0);
    expect(app.gates.entered).toBe(1); // the handler never ran for the client that left
    expect(tally.releases.size).toBe(1);
  });

  it('gives the slot back when the handler fails through next(error) or throws (Express)', async () => {
    const limiter = limiterOf(1);
    const { wrapped, tally } = counted(limiter);
    const gates = new Gates();
    const e = express();
    e.use(concurrencyLimit(wrapped, { key: () => KEY }));
    e.get('/throws', () => {
      throw new Error('handler threw');
    });
    e.get('/next-error', (_req, _res, next) => void setImmediate(() => next(new Error('handler failed'))));
    e.get('/slow', (req, res) => void gates.pass().then(() => res.send(slotOf(req)?.source)));
    e.use((error: Error, _req: Request, res: Response, _next: NextFunction) => void res.status(500).send(error.message));
    const url = await listen(createServer(e));
    for (const path of ['/throws', '/next-error', '/throws']) {
      expect((await send(url, path).reply).status).toBe(500);
      await until(() => limiter.stats().held === 0, EVENTS_MS, `the slot of ${path} given back`);
    }
    const slow = send(url, '/slow');
    await until(() => gates.entered === 1, EVENTS_MS, 'the slow request in');
    const refused = await send(url, '/slow').reply;
    expect(refused.status).toBe(429);
    expect(refused.body).toContain('quota-exceeded');
    gates.openAll();
    expect(await slow.reply).toEqual({ status: 200, body: 'redis' });
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'the slow slot given back');
    expect(await heldInRedis(limiter)).toBe(0);
    expect([...tally.releases.values()]).toEqual([1, 1, 1, 1]);
  });

  it('goes on holding a local slot while Redis is not asked, never a 500', async () => {
    const limiter = limiterOf(2);
    limiter.forceOpen();
    const app = await nodeApp(limiter);
    const one = send(app.url);
    await until(() => app.gates.entered === 1, EVENTS_MS, 'the request in');
    app.gates.openAll();
    expect(await one.reply).toEqual({ status: 200, body: 'local' });
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'the local slot given back');
  });
});

describe('concurrencyLimitHook (Fastify)', () => {
  it('holds a slot per request until the reply is sent, and refuses past max', async () => {
    const limiter = limiterOf(1);
    const { wrapped, tally } = counted(limiter);
    const gates = new Gates();
    const f = Fastify();
    f.addHook('onRequest', concurrencyLimitHook(wrapped, { key: () => KEY }));
    f.get('/', async (request) => {
      await gates.pass();
      return slotOf(request)?.source;
    });
    await f.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => f.close());
    const url = `http://127.0.0.1:${(f.server.address() as AddressInfo).port}`;
    const first = send(url);
    await until(() => gates.entered === 1, EVENTS_MS, 'the first request in');
    const refused = await send(url).reply;
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body)).toMatchObject(QUOTA_EXCEEDED);
    gates.openAll();
    expect(await first.reply).toEqual({ status: 200, body: 'redis' });
    await until(() => limiter.stats().held === 0, EVENTS_MS, 'the slot given back');
    expect([...tally.releases.values()]).toEqual([1]);
  });
});

describe('concurrencyLimit: options checked when it is made', () => {
  it('names the option, what was expected and what was given', async () => {
    const limiter = limiterOf(2);
    const invalid = (message: RegExp) =>
      expect.objectContaining({ code: ErrorCode.INVALID_OPTION, message: expect.stringMatching(message) });
    const build = (l: unknown, options?: unknown) => () => concurrencyLimit(l as HttpSlotLimiter, options as ConcurrencyLimitOptions);
    expect(build(undefined)).toThrow(invalid(/limiter of concurrencyLimit\(\) to be a ConcurrencyLimiter.*got `undefined`/));
    const rate = new ResilientLimiter({ redis, limit: 1, windowMs: 1000, prefix: `hc:${randomUUID()}:`, local: { instances: 1 } });
    try {
      expect(build(rate)).toThrow(invalid(/to be a ConcurrencyLimiter.*got an object/));
    } finally {
      await rate.close();
    }
    expect(build(limiter, { maxWaitMs: -1 })).toThrow(invalid(/Expected `maxWaitMs` to be an integer from 0 .*got `-1`/));
    expect(build(limiter, { maxWaitMs: 1.5 })).toThrow(invalid(/`maxWaitMs`.*got `1.5`/));
    expect(build(limiter, { maxWaitMs: '100' })).toThrow(invalid(/`maxWaitMs`.*got `"100"`/));
    expect(build(limiter, { cost: 3 })).toThrow(invalid(/Expected `cost` to be an integer from 1 to 2, got `3`/));
    expect(build(limiter, { cost: 0 })).toThrow(invalid(/`cost`.*got `0`/));
    expect(build(limiter, { cost: '1' })).toThrow(invalid(/Expected `cost` to be an integer from 1 to max \(2\) or a function, got `"1"`/));
    expect(build(limiter, { key: 'tenant' })).toThrow(invalid(/Expected `key` to be a function/));
    expect(build(limiter, { max: 3 })).toThrow(/max/);
    expect(() => concurrencyLimitHook(limiter, { maxWaitMs: -5 })).toThrow(invalid(/`maxWaitMs`.*got `-5`/));
    expect(build(limiter, { cost: 2, maxWaitMs: 0 })).not.toThrow();
  });
});
