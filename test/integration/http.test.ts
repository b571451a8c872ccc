/**
 * resilimit/http on real servers: plain node:http, Express, Connect and Fastify, each listening on an
 * OS-assigned loopback port, sent real requests (fetch; node:http where the source address matters),
 * deciding on a real Redis.
 */
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';
import connect from 'connect';
import express, { type NextFunction, type Request, type Response } from 'express';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { Decision, ResilientLimiter, ResilientLimiterOptions } from '../../src/index.js';
import {
  byHeader,
  byIp,
  byRoute,
  combine,
  headerKey,
  rateLimit,
  rateLimitHook,
  type CommonHttpOptions,
  type RequestLike,
} from '../../src/http.js';
import { ROOT, importByName } from '../support/entryPoints.js';
import { remainingBecomes, useHttpLimiters, WINDOW_MS } from '../support/httpLimiters.js';
import {
  type App,
  errorBody,
  get,
  getFrom,
  item,
  items,
  outcomeOf,
  QUOTA_EXCEEDED,
  type Reply,
  sequence,
  served,
  TEMPORARY_REDUCED_CAPACITY,
} from '../support/httpReplies.js';

const { apps, limiter } = useHttpLimiters('http');

// ---------------------------------------------------------------------------------------------
// One app per framework: the limiter(s) in front of a handler that counts its runs, and an error
// handler that answers 500 with the error's code and message.

type Options = CommonHttpOptions<RequestLike> & {
  /** 'custom': onLimited answers 429 in text with a header of its own; 'rejects': onLimited rejects. */
  limited?: 'custom' | 'rejects';
};
type Stack = [ResilientLimiter, Options][];

type Framework = { name: string; start(stack: Stack): Promise<App> };

const LIMITED_TEXT = 'slow down';

/**
 * What the route handler of every app answers for a path: `/status/<code>` that status, `/hang`
 * nothing (the client gives up), anything else 200.
 */
/** The `onLimited` of the `(req, res, next)` frameworks, for `limited`. */
function nodeOnLimited(limited: Options['limited']) {
  if (limited === undefined) return {};
  return {
    onLimited: async (_req: IncomingMessage, res: ServerResponse, decision: Decision) => {
      if (limited === 'rejects') throw new Error('onLimited failed');
      res.setHeader('x-limited', String(decision.remaining));
      res.setHeader('content-type', 'text/plain');
      res.end(LIMITED_TEXT);
    },
  };
}

const frameworks: Framework[] = [
  {
    name: 'node:http',
    async start(stack) {
      const middleware = stack.map(([l, { limited, ...o }]) => rateLimit(l, { ...o, ...nodeOnLimited(limited) }));
      const app = { handled: 0 };
      const server = createServer((req, res) => {
        const fail = (error: unknown): void => {
          res.statusCode = 500;
          res.end(errorBody(error));
        };
        const run = (i: number): void => {
          const m = middleware[i];
          if (m === undefined) {
            app.handled += 1;
            const outcome = outcomeOf(req.url);
            if (outcome === 'hang') return;
            res.statusCode = outcome;
            res.end('ok');
            return;
          }
          m(req, res, (error) => (error === undefined ? run(i + 1) : fail(error)));
        };
        run(0);
      });
      server.listen(0, '127.0.0.1');
      return served(server, app);
    },
  },
  {
    name: 'express',
    async start(stack) {
      const app = { handled: 0 };
      const e = express();
      for (const [l, { limited, ...o }] of stack) {
        if (limited === undefined) e.use(rateLimit(l, o));
        else
          e.use(
            rateLimit(l, {
              ...o,
              // Express's own response API: onLimited is typed with the framework's request and response.
              onLimited: async (_req: Request, res: Response, decision) => {
                if (limited === 'rejects') throw new Error('onLimited failed');
                res.set('x-limited', String(decision.remaining)).type('text/plain').send(LIMITED_TEXT);
              },
            }),
          );
      }
      e.get('/{*path}', (req, res) => {
        app.handled += 1;
        const outcome = outcomeOf(req.originalUrl);
        if (outcome !== 'hang') res.status(outcome).send('ok');
      });
      e.use((error: unknown, _req: Request, res: Response, _next: NextFunction) => {
        res.status(500).send(errorBody(error));
      });
      return served(createServer(e).listen(0, '127.0.0.1'), app);
    },
  },
  {
    name: 'connect',
    async start(stack) {
      const app = { handled: 0 };
      const c = connect();
      for (const [l, { limited, ...o }] of stack) c.use(rateLimit(l, { ...o, ...nodeOnLimited(limited) }));
      c.use((req: IncomingMessage, res: ServerResponse) => {
        app.handled += 1;
        const outcome = outcomeOf(req.url);
        if (outcome === 'hang') return;
        res.statusCode = outcome;
        res.end('ok');
      });
      c.use((error: unknown, _req: IncomingMessage, res: ServerResponse, _next: connect.NextFunction) => {
        res.statusCode = 500;
        res.end(errorBody(error));
      });
      return served(createServer(c).listen(0, '127.0.0.1'), app);
    },
  },
  {
    name: 'fastify',
    async start(stack) {
      const app = { handled: 0 };
      const f = Fastify();
      for (const [l, { limited, ...o }] of stack) {
        f.addHook(
          'onRequest',
          rateLimitHook(l, {
            ...o,
            ...(limited === undefined
              ? {}
              : {
                  onLimited: async (_request: FastifyRequest, reply: FastifyReply, decision: Decision) => {
                    if (limited === 'rejects') throw new Error('onLimited failed');
                    await reply.header('x-limited', String(decision.remaining)).type('text/plain').send(LIMITED_TEXT);
                  },
                }),
          }),
        );
      }
      // An async onSend hook: the response has not ended when reply.send() returns, so a hook that
      // relied on `reply.sent` to stop the chain would let the handler run.
      f.addHook('onSend', async (_request, _reply, payload) => {
        await tick();
        return payload;
      });
      f.get('/*', async (request, reply) => {
        app.handled += 1;
        const outcome = outcomeOf(request.url);
        if (outcome === 'hang') {
          // Until the client gives up (Fastify's close() waits for the handlers that run), then no reply.
          await once(request.raw, 'close');
          return reply;
        }
        return reply.code(outcome).send('ok');
      });
      f.setErrorHandler((error, _request, reply) => {
        void reply.code(500).send(errorBody(error));
      });
      await f.listen({ port: 0, host: '127.0.0.1' });
      const { port } = f.server.address() as AddressInfo;
      return Object.assign(app, { url: `http://127.0.0.1:${port}`, close: () => f.close() });
    },
  },
];

// ---------------------------------------------------------------------------------------------
// Requests and fields

/**
 * The single item of a RateLimit field with a `pk` parameter (last, a Structured Fields Byte
 * Sequence): its other parameters and the key's bytes decoded as UTF-8.
 */
function withPk(field: string | null): { params: Record<string, number>; pk: string } {
  const match = /^(.*);pk=:([A-Za-z0-9+/]*={0,2}):$/.exec(field ?? '');
  expect(match, `an item with pk: ${field}`).not.toBeNull();
  const [, rest, base64] = match as RegExpExecArray;
  return { params: item(rest as string), pk: Buffer.from(base64 as string, 'base64').toString('utf8') };
}

// ---------------------------------------------------------------------------------------------

describe.each(frameworks)('$name', (framework) => {
  async function start(options: Options = {}, l = limiter()): Promise<App> {
    const app = await framework.start([[l, options]]);
    apps.push(app);
    return app;
  }

  it("reports each key's own limit in RateLimit and RateLimit-Policy with a per-key limit", async () => {
    const app = await start({ key: byHeader('x-api-key') }, limiter({ limit: (key) => (key.includes('gold') ? 5 : 2) }));
    const gold = await sequence(app, 3, '/', { 'x-api-key': 'gold-1' });
    const basic = await sequence(app, 3, '/', { 'x-api-key': 'basic-1' });
    expect(gold.map((r) => item(r.headers.get('ratelimit-policy'))['q'])).toEqual([5, 5, 5]);
    expect(gold.map((r) => item(r.headers.get('ratelimit'))['r'])).toEqual([4, 3, 2]);
    expect(basic.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(basic.map((r) => item(r.headers.get('ratelimit-policy'))['q'])).toEqual([2, 2, 2]);
  });

  it('gives a limit function the key byHeader made, which headerKey makes for a value: a VIP check on the value matches', async () => {
    const vips = new Set(['vip-1', 'a|b%c'].map((user) => headerKey('x-user', user)));
    const app = await start({ key: byHeader('x-user') }, limiter({ limit: (key) => (vips.has(key) ? 5 : 2) }));
    const vip = await sequence(app, 3, '/', { 'x-user': 'vip-1' });
    const escaped = await sequence(app, 3, '/', { 'x-user': 'a|b%c' });
    const plain = await sequence(app, 3, '/', { 'x-user': 'vip-2' });
    expect(vip.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(escaped.map((r) => item(r.headers.get('ratelimit-policy'))['q'])).toEqual([5, 5, 5]);
    expect(plain.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(headerKey('X-User', 'vip-1')).toBe('hdr:x-user:vip-1');
    expect(() => headerKey('bad name', 'x')).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION' }));
  });

  it('admits requests under the limit with the RateLimit fields counting down, then answers 429 without running the handler', async () => {
    const app = await start();
    const replies = await sequence(app, 4);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(app.handled).toBe(3);
    for (const reply of replies) expect(item(reply.headers.get('ratelimit-policy'))).toEqual({ q: 3, w: 60 });

    const states = replies.map((r) => item(r.headers.get('ratelimit')));
    expect(states.map((s) => s['r'])).toEqual([2, 1, 0, 0]);
    for (const s of states.slice(0, 3)) expect(s['t']).toBe(60); // an admitted permit leaves a full window later
    expect(replies[0]?.body).toBe('ok');

    const limited = replies[3] as Reply;
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(limited.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(retryAfter).toBeGreaterThanOrEqual(58);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(states[3]?.['t']).toBe(retryAfter); // Retry-After does not end before the effective window
    expect(limited.headers.get('content-type')).toBe('application/problem+json');
    const body = JSON.parse(limited.body) as Record<string, unknown> & { retryAfterMs: number };
    expect(body).toEqual({
      ...QUOTA_EXCEEDED,
      detail: `Retry after ${retryAfter} s`,
      'violated-policies': ['default'],
      retryAfterMs: body.retryAfterMs,
    });
    expect(body.retryAfterMs).toBeGreaterThan(55_000);
    expect(body.retryAfterMs).toBeLessThanOrEqual(WINDOW_MS);
    expect(Math.ceil(body.retryAfterMs / 1000)).toBe(retryAfter);
  });

  it('lets a request the limit refuses in shadow mode through to the handler: no 429, no Retry-After, the RateLimit fields of the refusal', async () => {
    const c = { t: Date.now(), now: () => c.t }; // the limiter's clock (it replaces Redis TIME): an exact wait
    const l = limiter({ shadow: true, clock: c.now });
    const app = await start({}, l);
    const replies = await sequence(app, 3);
    c.t += 30_000;
    replies.push(await get(app));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(app.handled).toBe(4);
    const shadowed = replies[3] as Reply;
    expect(shadowed.body).toBe('ok');
    expect(shadowed.headers.get('retry-after')).toBeNull();
    expect(item(shadowed.headers.get('ratelimit-policy'))).toEqual({ q: 3, w: 60 });
    // What the limit says: no quota left for 30 s (the first permits leave the window then).
    expect(item(shadowed.headers.get('ratelimit'))).toEqual({ r: 0, t: 30 });
    expect(l.stats()).toMatchObject({ decisions: 4, allowed: 4, shadowRejected: 1 });
  });

  it('keys by the TCP peer by default: another source address has its own limit, X-Forwarded-For is ignored', async () => {
    const app = await start();
    // Four addresses claimed in X-Forwarded-For, one peer: one limit.
    const claimed = [];
    for (let i = 1; i <= 4; i += 1) claimed.push(await get(app, '/', { 'x-forwarded-for': `198.51.100.${i}` }));
    expect(claimed.map((r) => r.status)).toEqual([200, 200, 200, 429]);

    const other = await getFrom(app, '127.0.0.2');
    expect(other.status).toBe(200);
    expect(item(other.headers.get('ratelimit'))['r']).toBe(2);
    expect((await getFrom(app, '127.0.0.1')).status).toBe(429);
    expect(app.handled).toBe(4);
  });

  it('keys by a header: two users do not share a limit, and a request without it counts against its address', async () => {
    const app = await start({ key: byHeader('x-user-id') });
    const alice = await sequence(app, 4, '/', { 'x-user-id': 'alice' });
    expect(alice.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    const bob = await get(app, '/', { 'x-user-id': 'bob' });
    expect(bob.status).toBe(200);
    expect(item(bob.headers.get('ratelimit'))['r']).toBe(2);
    const anonymous = await sequence(app, 4);
    expect(anonymous.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(app.handled).toBe(7);
  });

  it('keys by route with combine(): each path has its own limit, whatever its query or case', async () => {
    const app = await start({ key: combine(byIp, byRoute) });
    const orders = [
      await get(app, '/orders?page=1'),
      await get(app, '/Orders/?page=2'),
      await get(app, '/orders'),
      await get(app, '/orders?page=4'),
    ];
    expect(orders.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    const users = await get(app, '/users');
    expect(users.status).toBe(200);
    expect(item(users.headers.get('ratelimit'))['r']).toBe(2);
  });

  it('lets skipped requests through uncounted and without RateLimit fields', async () => {
    const app = await start({ skip: (req) => req.headers['x-health'] === '1' });
    const skipped = await sequence(app, 5, '/', { 'x-health': '1' });
    expect(skipped.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    for (const r of skipped) {
      expect(r.headers.get('ratelimit')).toBeNull();
      expect(r.headers.get('ratelimit-policy')).toBeNull();
    }
    const counted = await get(app);
    expect(item(counted.headers.get('ratelimit'))['r']).toBe(2);
    expect(app.handled).toBe(6);
  });

  it('takes the cost of each request; a cost above the limit reaches the error handler', async () => {
    const app = await start({ cost: (req) => Number(req.headers['x-cost'] ?? 1) });
    const first = await get(app, '/', { 'x-cost': '2' });
    expect(first.status).toBe(200);
    expect(item(first.headers.get('ratelimit'))['r']).toBe(1);
    const second = await get(app, '/', { 'x-cost': '2' });
    expect(second.status).toBe(429); // 1 left, 2 asked: a call is admitted whole or not at all
    expect(item(second.headers.get('ratelimit'))['r']).toBe(1);
    const third = await get(app);
    expect(third.status).toBe(200);
    expect(item(third.headers.get('ratelimit'))['r']).toBe(0);

    const tooDear = await get(app, '/', { 'x-cost': '4' });
    expect(tooDear.status).toBe(500);
    expect(JSON.parse(tooDear.body)).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_COST' });
    expect(app.handled).toBe(2);
  });

  it('answers a rejected request with onLimited, after setting Retry-After and the RateLimit fields', async () => {
    const app = await start({ limited: 'custom' });
    const replies = await sequence(app, 4);
    const limited = replies[3] as Reply;
    expect(limited.status).toBe(429);
    expect(limited.body).toBe(LIMITED_TEXT); // not the problem details body
    expect(limited.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(limited.headers.get('x-limited')).toBe('0');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(58);
    expect(item(limited.headers.get('ratelimit'))['r']).toBe(0);
    expect(item(limited.headers.get('ratelimit-policy'))).toEqual({ q: 3, w: 60 });
    expect(app.handled).toBe(3);
  });

  it('passes an error of onLimited to the error handler', async () => {
    const app = await start({ limited: 'rejects' });
    const replies = await sequence(app, 4);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 500]);
    expect(JSON.parse(replies[3]?.body as string)).toMatchObject({ message: 'onLimited failed' });
    expect(app.handled).toBe(3);
  });

  it('passes an error of the key function to the error handler, without counting the request', async () => {
    const app = await start({
      key: (req) => {
        if (req.headers['x-bad'] !== undefined) throw new Error('no key for this request');
        return 'k';
      },
    });
    const bad = await get(app, '/', { 'x-bad': '1' });
    expect(bad.status).toBe(500);
    expect(JSON.parse(bad.body)).toEqual({ code: null, message: 'no key for this request' });
    expect(app.handled).toBe(0);
    expect(item((await get(app)).headers.get('ratelimit'))['r']).toBe(2);
  });

  it("passes the limiter's misuse errors to the error handler: a key it refuses, a closed limiter", async () => {
    const l = limiter();
    const app = await start({ key: (req) => (req.headers['x-empty'] === '1' ? '' : 'k') }, l);
    const empty = await get(app, '/', { 'x-empty': '1' });
    expect(empty.status).toBe(500);
    expect(JSON.parse(empty.body)).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_KEY' });
    await l.close();
    const closed = await get(app);
    expect(closed.status).toBe(500);
    expect(JSON.parse(closed.body)).toMatchObject({ code: 'ERR_RESILIMIT_CLOSED' });
    expect(app.handled).toBe(0);
  });

  it('fails a request whose skip returns a promise instead of skipping it', async () => {
    const app = await start({ skip: (async () => true) as unknown as () => boolean });
    const reply = await get(app);
    expect(reply.status).toBe(500);
    expect(JSON.parse(reply.body)).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_OPTION' });
    expect(JSON.parse(reply.body).message).toContain('skip');
    expect(app.handled).toBe(0);
  });

  it('adds the partition key of the limiter key to RateLimit with partitionKey: true, on admissions and on the 429', async () => {
    const app = await start({ partitionKey: true });
    const replies = await sequence(app, 4);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    const states = replies.map((r) => withPk(r.headers.get('ratelimit')));
    for (const s of states) expect(s.pk).toBe('ip:127.0.0.1');
    expect(replies[0]?.headers.get('ratelimit')).toBe(`"default";r=2;t=60;pk=:${Buffer.from('ip:127.0.0.1').toString('base64')}:`);
    expect(states.map((s) => s.params['r'])).toEqual([2, 1, 0, 0]);
    expect(item(replies[3]?.headers.get('ratelimit-policy') ?? null)).toEqual({ q: 3, w: 60 }); // pk only in RateLimit
  });

  it("adds the partition key function's answer as UTF-8 bytes; one that fails fails the request uncounted", async () => {
    const app = await start({
      key: byHeader('x-user-id'),
      partitionKey: (req) =>
        req.headers['x-bad'] === '1' ? (42 as unknown as string) : `tenant:${String(req.headers['x-tenant'])}@Zürich`,
    });
    const reply = await get(app, '/', { 'x-user-id': 'alice', 'x-tenant': 'acme' });
    expect(reply.status).toBe(200);
    expect(withPk(reply.headers.get('ratelimit'))).toEqual({ params: { r: 2, t: 60 }, pk: 'tenant:acme@Zürich' });

    const bad = await get(app, '/', { 'x-user-id': 'alice', 'x-bad': '1' });
    expect(bad.status).toBe(500);
    expect(JSON.parse(bad.body)).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_OPTION' });
    expect(JSON.parse(bad.body).message).toContain('Expected `partitionKey` to return a string of 1 to 1024 characters, got `42` (number)');
    expect(withPk((await get(app, '/', { 'x-user-id': 'alice', 'x-tenant': 't' })).headers.get('ratelimit')).params['r']).toBe(1);
    expect(app.handled).toBe(2);
  });

  it('sends no partition key by default', async () => {
    const app = await start();
    const replies = await sequence(app, 4);
    for (const r of replies) expect(r.headers.get('ratelimit')).not.toContain('pk=');
  });

  it('sends no RateLimit fields with headers: false, but still Retry-After on a 429', async () => {
    const app = await start({ headers: false });
    const replies = await sequence(app, 4);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    for (const r of replies) {
      expect(r.headers.get('ratelimit')).toBeNull();
      expect(r.headers.get('ratelimit-policy')).toBeNull();
    }
    expect(Number(replies[3]?.headers.get('retry-after'))).toBeGreaterThanOrEqual(58);
    expect(JSON.parse(replies[3]?.body as string)).toMatchObject({ ...QUOTA_EXCEEDED, 'violated-policies': ['default'] });
  });

  it('with skipFailedRequests, counts only the requests that succeed: an error status or a cut connection is refunded', async () => {
    const l = limiter();
    const app = await start({ key: () => 'client', skipFailedRequests: true }, l);
    for (const status of [500, 404, 400, 503]) {
      expect((await get(app, `/status/${status}`)).status).toBe(status);
      await remainingBecomes(l, 3, 'client');
    }
    // The client gives up while the handler still runs: the response never finished.
    const aborted = new AbortController();
    const hung = fetch(`${app.url}/hang`, { signal: aborted.signal }).catch((error: unknown) => error);
    while (app.handled < 5) await sleep(5);
    expect((await l.peek('client')).remaining).toBe(2); // counted while it runs
    aborted.abort();
    await hung;
    await remainingBecomes(l, 3, 'client');
    const replies = await sequence(app, 4, '/status/201');
    expect(replies.map((r) => r.status)).toEqual([201, 201, 201, 429]);
    await sleep(50);
    expect((await l.peek('client')).remaining).toBe(0); // neither the successes nor the 429 came back
  });

  it('with skipSuccessfulRequests, counts only the failures: a lock-out of failed attempts', async () => {
    const l = limiter();
    const app = await start({ key: () => 'client', skipSuccessfulRequests: true }, l);
    for (let i = 0; i < 4; i += 1) {
      expect((await get(app)).status).toBe(200);
      await remainingBecomes(l, 3, 'client');
    }
    const replies = await sequence(app, 4, '/status/401');
    expect(replies.map((r) => r.status)).toEqual([401, 401, 401, 429]);
    expect((await get(app)).status).toBe(429); // locked out of successes too, until failures leave the window
    expect(app.handled).toBe(7);
  });

  it('asks requestWasSuccessful, when given, whether a finished response succeeded', async () => {
    const l = limiter();
    // A 404 of a probe is a success here: it does not count against the client.
    const app = await start(
      {
        key: () => 'client',
        skipSuccessfulRequests: true,
        requestWasSuccessful: (request) => request.headers['x-probe'] === '1',
      },
      l,
    );
    for (let i = 0; i < 4; i += 1) {
      expect((await get(app, '/status/404', { 'x-probe': '1' })).status).toBe(404);
      await remainingBecomes(l, 3, 'client');
    }
    const replies = await sequence(app, 4); // 200s, but not probes: they count
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
  });

  it('lists the items of two limiters on one route side by side, and stops at the first that rejects', async () => {
    const burst = limiter({ limit: 2, windowMs: 1_000 });
    const hourly = limiter({ limit: 5, windowMs: 3_600_000 });
    const app = await framework.start([
      [burst, { policyName: 'burst' }],
      [hourly, { policyName: 'hourly' }],
    ]);
    apps.push(app);
    const first = await get(app);
    expect(items(first.headers.get('ratelimit-policy'))).toEqual([
      { name: 'burst', params: { q: 2, w: 1 } },
      { name: 'hourly', params: { q: 5, w: 3600 } },
    ]);
    expect(items(first.headers.get('ratelimit')).map((i) => [i.name, i.params['r']])).toEqual([
      ['burst', 1],
      ['hourly', 4],
    ]);
    await get(app);
    const third = await get(app);
    expect(third.status).toBe(429);
    expect(items(third.headers.get('ratelimit')).map((i) => i.name)).toEqual(['burst']); // hourly never asked
    expect(JSON.parse(third.body)).toMatchObject({ 'violated-policies': ['burst'] });
    expect(third.headers.get('retry-after')).toBe('1');
    expect(app.handled).toBe(2);
  });
});

describe('decisions made without Redis', () => {
  it('answers from the local window while the breaker is open, with its share as the quota', async () => {
    const l = limiter({ limit: 4, local: { instances: 2 } });
    l.forceOpen();
    const app = await frameworks[0]!.start([[l, {}]]);
    apps.push(app);
    const replies = await sequence(app, 3);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(item(replies[0]?.headers.get('ratelimit-policy') ?? null)).toEqual({ q: 2, w: 60 });
    expect(replies.map((r) => item(r.headers.get('ratelimit'))['r'])).toEqual([1, 0, 0]);
    expect(l.stats().bySource.local).toBe(3);
  });

  it('admits with the full quota over the window in fail-open mode (never a t of 0)', async () => {
    const l = limiter({ mode: 'fail-open' });
    l.forceOpen();
    const app = await frameworks[3]!.start([[l, {}]]);
    apps.push(app);
    const replies = await sequence(app, 5);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(item(replies[4]?.headers.get('ratelimit') ?? null)).toEqual({ r: 3, t: 60 });
    expect(l.stats().bySource['fail-open']).toBe(5);
  });

  it("answers 429 with the breaker's open period as Retry-After in fail-closed mode", async () => {
    const l = limiter({ mode: 'fail-closed', breaker: { timeoutMs: 2000, resetTimeoutMs: 2200 } });
    l.forceOpen();
    const app = await frameworks[1]!.start([[l, {}]]);
    apps.push(app);
    const reply = await get(app);
    expect(reply.status).toBe(429);
    expect(reply.headers.get('retry-after')).toBe('3');
    expect(item(reply.headers.get('ratelimit'))).toEqual({ r: 0, t: 3 });
    expect(reply.headers.get('content-type')).toBe('application/problem+json');
    expect(JSON.parse(reply.body)).toEqual({
      ...QUOTA_EXCEEDED,
      detail: 'Retry after 3 s',
      'violated-policies': ['default'],
      retryAfterMs: 2200,
    });
    expect(app.handled).toBe(0);
  });
});

describe('refusals of reduced capacity (the reducedCapacity option)', () => {
  const T0 = 1_800_000_000_000;

  /**
   * A limiter of 4 shared by 2 instances (a local share of 2), in an outage (the breaker forced
   * open), on a clock that never moves: a refusal's wait is exactly the window, Retry-After 60.
   */
  function outage(options: Partial<ResilientLimiterOptions> = {}): ResilientLimiter {
    const l = limiter({ limit: 4, local: { instances: 2 }, clock: () => T0, ...options });
    l.forceOpen();
    return l;
  }

  async function start(framework: Framework, l: ResilientLimiter, options: Options): Promise<App> {
    const app = await framework.start([[l, options]]);
    apps.push(app);
    return app;
  }

  it.each(frameworks)('$name: by default answers a refusal of the local share like any other, 429 quota-exceeded', async (framework) => {
    const app = await start(framework, outage(), {});
    const replies = await sequence(app, 3);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 429]);
    const refused = replies[2] as Reply;
    expect(item(refused.headers.get('ratelimit-policy'))).toEqual({ q: 2, w: 60 });
    expect(refused.headers.get('retry-after')).toBe('60');
    expect(JSON.parse(refused.body)).toEqual({
      ...QUOTA_EXCEEDED,
      detail: 'Retry after 60 s',
      'violated-policies': ['default'],
      retryAfterMs: 60_000,
    });
  });

  it.each(frameworks)(
    "$name: with 'temporary-reduced-capacity' answers it 503 of that problem type, the share as the lowered quota, with Retry-After",
    async (framework) => {
      const app = await start(framework, outage(), { reducedCapacity: 'temporary-reduced-capacity', policyName: 'per-ip' });
      const replies = await sequence(app, 3);
      expect(replies.map((r) => r.status)).toEqual([200, 200, 503]);
      const refused = replies[2] as Reply;
      expect(item(refused.headers.get('ratelimit-policy'), 'per-ip')).toEqual({ q: 2, w: 60 }); // the limit is 4
      expect(item(refused.headers.get('ratelimit'), 'per-ip')).toEqual({ r: 0, t: 60 });
      expect(refused.headers.get('retry-after')).toBe('60');
      expect(refused.headers.get('content-type')).toBe('application/problem+json');
      expect(JSON.parse(refused.body)).toEqual({
        ...TEMPORARY_REDUCED_CAPACITY,
        detail: 'Retry after 60 s',
        'violated-policies': ['per-ip'],
        retryAfterMs: 60_000,
      });
      expect(app.handled).toBe(2);
    },
  );

  it.each(frameworks)("$name: with 'temporary-reduced-capacity' sets the 503 before onLimited runs", async (framework) => {
    const app = await start(framework, outage(), { reducedCapacity: 'temporary-reduced-capacity', limited: 'custom' });
    const replies = await sequence(app, 3);
    expect(replies.map((r) => [r.status, r.body])).toEqual([
      [200, 'ok'],
      [200, 'ok'],
      [503, LIMITED_TEXT],
    ]);
    expect(replies[2]?.headers.get('retry-after')).toBe('60');
  });

  it("keeps 429 quota-exceeded for refusals of the quota with 'temporary-reduced-capacity': Redis's, the deny cache's, the whole limit's", async () => {
    const options: Options = { reducedCapacity: 'temporary-reduced-capacity' };
    // Redis decides: the limit of 4 is the quota; the fifth request is Redis's refusal, the sixth the deny cache's.
    const redisDecides = await start(frameworks[0] as Framework, limiter({ limit: 4, local: { instances: 2 }, clock: () => T0 }), options);
    const replies = await sequence(redisDecides, 6);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 429, 429]);
    for (const refused of replies.slice(4)) {
      expect(JSON.parse(refused.body)).toMatchObject(QUOTA_EXCEEDED);
      expect(item(refused.headers.get('ratelimit-policy'))).toEqual({ q: 4, w: 60 });
    }
    // One instance: its share is the whole limit, so the local window refuses for the quota.
    const alone = await start(frameworks[3] as Framework, outage({ local: { instances: 1 } }), options);
    const local = await sequence(alone, 5);
    expect(local.map((r) => r.status)).toEqual([200, 200, 200, 200, 429]);
    expect(JSON.parse((local[4] as Reply).body)).toMatchObject(QUOTA_EXCEEDED);
  });

  it("answers mode 'fail-closed' 503 with a quota of 0 and the breaker's open period as Retry-After with 'temporary-reduced-capacity'", async () => {
    const closed = outage({ mode: 'fail-closed', breaker: { timeoutMs: 2000, resetTimeoutMs: 2200 } });
    const app = await start(frameworks[1] as Framework, closed, { reducedCapacity: 'temporary-reduced-capacity' });
    const reply = await get(app);
    expect(reply.status).toBe(503);
    expect(reply.headers.get('retry-after')).toBe('3');
    expect(item(reply.headers.get('ratelimit-policy'))).toEqual({ q: 0, w: 60 });
    expect(item(reply.headers.get('ratelimit'))).toEqual({ r: 0, t: 3 });
    expect(JSON.parse(reply.body)).toEqual({
      ...TEMPORARY_REDUCED_CAPACITY,
      detail: 'Retry after 3 s',
      'violated-policies': ['default'],
      retryAfterMs: 2200,
    });
    // In shadow mode the request goes on, and the fields are what the refusal's would be.
    const shadowed = outage({ mode: 'fail-closed', shadow: true });
    const through = await start(frameworks[2] as Framework, shadowed, { reducedCapacity: 'temporary-reduced-capacity' });
    const admitted = await get(through);
    expect(admitted.status).toBe(200);
    expect(item(admitted.headers.get('ratelimit-policy'))).toEqual({ q: 0, w: 60 });
    expect(admitted.headers.get('retry-after')).toBeNull();
  });
});

describe('skipFailedRequests and skipSuccessfulRequests', () => {
  it('refund failures while the breaker is open from the local window at once: only successes count', async () => {
    const l = limiter();
    l.forceOpen();
    const app = await frameworks[0]!.start([[l, { key: () => 'client', skipFailedRequests: true }]]);
    apps.push(app);
    for (let i = 0; i < 5; i += 1) {
      expect((await get(app, '/status/502')).status).toBe(502);
      await remainingBecomes(l, 3, 'client');
    }
    expect((await sequence(app, 4)).map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(l.stats().bySource.local).toBe(9);
    expect(l.stats().refunds.pending).toBe(0); // admitted locally, never sent: nothing for Redis to remove
  });

  it('never lets a refund that fails reach the application: the request counts', async () => {
    const l = limiter({ limit: 2 });
    let calls = 0;
    const throwing = {
      limit: (key: string) => l.limit(key),
      stats: () => l.stats(),
      refund: (): Promise<unknown> => {
        calls += 1;
        if (calls === 1) throw new Error('refund threw');
        return Promise.reject(new Error('refund rejected'));
      },
    };
    const app = await frameworks[2]!.start([[throwing as unknown as ResilientLimiter, { key: () => 'client', skipFailedRequests: true }]]);
    apps.push(app);
    expect((await sequence(app, 3, '/status/500')).map((r) => r.status)).toEqual([500, 500, 429]);
    expect(calls).toBe(2);
  });
});

describe('RateLimit-Policy follows the limiter', () => {
  it('shows a new limit at once and a new window within a second', async () => {
    const l = limiter({ limit: 10 });
    const app = await frameworks[2]!.start([[l, {}]]);
    apps.push(app);
    expect(item((await get(app)).headers.get('ratelimit-policy'))).toEqual({ q: 10, w: 60 });
    l.update({ limit: 20, windowMs: 2_500 });
    expect(item((await get(app)).headers.get('ratelimit-policy'))['q']).toBe(20);
    await sleep(1_100);
    const later = await get(app);
    expect(item(later.headers.get('ratelimit-policy'))).toEqual({ q: 20, w: 3 });
    expect(item(later.headers.get('ratelimit'))['t']).toBe(3);
  });
});

describe('key helpers', () => {
  const from = (remoteAddress: string | undefined, headers: Record<string, string> = {}, url = '/'): RequestLike => ({
    headers,
    method: 'GET',
    url,
    socket: { remoteAddress },
  });

  it('byIp keys IPv4 by address, IPv6 forms that carry an IPv4 client (mapped, NAT64) as IPv4, and IPv6 by its /64', () => {
    expect(byIp(from('203.0.113.7'))).toBe('ip:203.0.113.7');
    expect(byIp(from('::ffff:203.0.113.7'))).toBe('ip:203.0.113.7');
    expect(byIp(from('2001:db8:0:1:aaaa::1'))).toBe('ip:2001:db8:0:1::/64');
    expect(byIp(from('2001:DB8:0000:0001:bbbb:cccc:dddd:2'))).toBe('ip:2001:db8:0:1::/64');
    expect(byIp(from('2001:db8::1'))).toBe('ip:2001:db8:0:0::/64');
    expect(byIp(from('2001:db8:0:2::1'))).toBe('ip:2001:db8:0:2::/64');
    expect(byIp(from('::1'))).toBe('ip:0:0:0:0::/64');
    expect(byIp(from('fe80::1%eth0'))).toBe('ip:fe80:0:0:0::/64');
    expect(byIp(from('64:ff9b::192.0.2.1'))).toBe('ip:192.0.2.1');
  });

  it('byIp throws ERR_RESILIMIT_INVALID_KEY for a request without a peer address', () => {
    expect(() => byIp(from(undefined))).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_KEY' }));
  });

  it('byHeader, byRoute and combine keep keys within 1024 characters and apart from each other', () => {
    const long = 'x'.repeat(5000);
    const a = byHeader('X-Api-Key')(from('1.2.3.4', { 'x-api-key': long }));
    const b = byHeader('x-api-key')(from('1.2.3.4', { 'x-api-key': `${long}y` }));
    expect(a).toMatch(/^hdr:x-api-key:#[\w-]{43}$/);
    expect(b).not.toBe(a);
    expect(byHeader('x-api-key')(from('1.2.3.4', { 'x-api-key': 'k1' }))).toBe('hdr:x-api-key:k1');
    expect(byHeader('x-api-key')(from('1.2.3.4', { 'x-api-key': '' }))).toBe('ip:1.2.3.4');
    expect(byHeader('x-api-key', () => 'anonymous')(from('1.2.3.4'))).toBe('anonymous');
    expect(byRoute(from('1.2.3.4', {}, '//Orders//42/?q=1'))).toBe('route:GET /orders/42');
    expect(byRoute({ ...from('1.2.3.4', {}, '/42'), originalUrl: '/api/orders/42' } as RequestLike)).toBe('route:GET /api/orders/42');
    expect(byRoute(from('1.2.3.4', {}, `/${long}`))).toMatch(/^route:GET #[\w-]{43}$/);
    const many = combine(...Array.from({ length: 6 }, (_, i) => byHeader(`x-h${i}`)));
    const key = many(from('1.2.3.4', Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`x-h${i}`, 'v'.repeat(199)]))));
    expect(key).toMatch(/^#[\w-]{43}$/);
    expect(combine(byIp, byRoute)(from('1.2.3.4', {}, '/a'))).toBe('ip:1.2.3.4|route:GET /a');
  });

  it('never gives two different requests one key: separators and hashes cannot be spelled by a client', () => {
    const key = combine(byHeader('x-org'), byHeader('x-user'));
    const a = key(from('1.2.3.4', { 'x-org': 'evil', 'x-user': 'x|hdr:x-user:y' }));
    const b = key(from('1.2.3.4', { 'x-org': 'evil|hdr:x-user:x', 'x-user': 'y' }));
    expect(a).not.toBe(b);
    const long = 'v'.repeat(500);
    const hashed = byHeader('x-api-key')(from('1.2.3.4', { 'x-api-key': long }));
    const spelled = byHeader('x-api-key')(from('1.2.3.4', { 'x-api-key': hashed.slice('hdr:x-api-key:'.length) }));
    expect(spelled).not.toBe(hashed);
    const header = (value: string): string => byHeader('x-api-key')(from('1.2.3.4', { 'x-api-key': value }));
    expect(header('%23')).not.toBe(header('#'));
  });
});

describe('option validation', () => {
  const cases: [string, () => unknown, string][] = [
    [
      'a limiter that is not one',
      () => rateLimit({} as never),
      'Expected the limiter of rateLimit() to be a ResilientLimiter, got an object',
    ],
    [
      'options that are not an object',
      () => rateLimit(limiter(), 'ip' as never),
      'Expected `options` to be an object, got `"ip"` (string of length 2)',
    ],
    [
      'a key that is not a function',
      () => rateLimit(limiter(), { key: 'ip' as never }),
      'Expected `key` to be a function, got `"ip"` (string of length 2)',
    ],
    [
      'a cost that is not a function',
      () => rateLimitHook(limiter(), { cost: 2 as never }),
      'Expected `cost` to be a function, got `2` (number)',
    ],
    [
      'a skip that is not a function',
      () => rateLimit(limiter(), { skip: true as never }),
      'Expected `skip` to be a function, got `true` (boolean)',
    ],
    [
      'an onLimited that is not a function',
      () => rateLimitHook(limiter(), { onLimited: {} as never }),
      'Expected `onLimited` to be a function, got an object',
    ],
    [
      'an unknown headers format',
      () => rateLimit(limiter(), { headers: 'draft-7' as never }),
      'Expected `headers` to be \'draft-8\' or false, got `"draft-7"` (string of length 7)',
    ],
    [
      'a policy name with a quote',
      () => rateLimit(limiter(), { policyName: 'a"b' }),
      'Expected `policyName` to be 1 to 64 printable ASCII characters without `"` or `\\`, got `"a\\"b"` (string of length 3)',
    ],
    [
      'an option of another library',
      () => rateLimit(limiter(), { trustProxy: true } as never),
      'Expected `trustProxy` to be absent: rateLimit() has no such option (it has `key`, `cost`, `skip`, `onLimited`, `headers`, `policyName`, `reducedCapacity`, `partitionKey`, `skipFailedRequests`, `skipSuccessfulRequests`, `requestWasSuccessful`), got `true` (boolean)',
    ],
    [
      'a reducedCapacity that is neither problem type',
      () => rateLimitHook(limiter(), { reducedCapacity: 503 as never }),
      "Expected `reducedCapacity` to be 'quota-exceeded' or 'temporary-reduced-capacity', got `503` (number)",
    ],
    [
      'a partitionKey that is neither a boolean nor a function',
      () => rateLimit(limiter(), { partitionKey: 'ip' as never }),
      'Expected `partitionKey` to be a boolean or a function, got `"ip"` (string of length 2)',
    ],
    [
      'a partitionKey without the fields',
      () => rateLimitHook(limiter(), { headers: false, partitionKey: true }),
      'Expected `partitionKey` to be false or absent with `headers: false`, got `true` (boolean)',
    ],
    [
      'a misspelt option',
      () => rateLimit(limiter(), { policyname: 'x' } as never),
      'Expected `policyname` to be absent: rateLimit() has no such option (did you mean `policyName`?), got `"x"` (string of length 1)',
    ],
    [
      'skipFailedRequests that is not a boolean',
      () => rateLimit(limiter(), { skipFailedRequests: 'yes' as never }),
      'Expected `skipFailedRequests` to be a boolean, got `"yes"` (string of length 3)',
    ],
    [
      'a misspelt skipFailedRequests',
      () => rateLimit(limiter(), { skipFailedRequest: true } as never),
      'Expected `skipFailedRequest` to be absent: rateLimit() has no such option (did you mean `skipFailedRequests`?), got `true` (boolean)',
    ],
    [
      'requestWasSuccessful without a skip option',
      () => rateLimitHook(limiter(), { requestWasSuccessful: () => true }),
      'Expected `requestWasSuccessful` to be absent unless `skipFailedRequests` or `skipSuccessfulRequests` is true, got a function',
    ],
    [
      'the skip options with a limiter that cannot refund',
      () => rateLimit({ limit: async () => ({}), stats: () => ({ windowMs: 1 }) } as never, { skipSuccessfulRequests: true }),
      'Expected the limiter of rateLimit() to have refund() (a ResilientLimiter) for skipFailedRequests or skipSuccessfulRequests, got an object',
    ],
    ['a header name with a space', () => byHeader('x user'), 'Expected `name` to be a header field name'],
    ['combine() of nothing', () => combine(), 'Expected `parts` to be one key function or more'],
    ['combine() of a string', () => combine(byIp, 'x' as never), 'Expected `parts[1]` to be a key function'],
  ];
  it.each(cases)('rejects %s with ERR_RESILIMIT_INVALID_OPTION', (_, make, message) => {
    let thrown: unknown;
    try {
      make();
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toMatchObject({ name: 'ResilimitError', code: 'ERR_RESILIMIT_INVALID_OPTION' });
    expect((thrown as Error).message.startsWith(message)).toBe(true);
  });
});

describe('the package entry point', () => {
  it('exports resilimit/http from the build, with its types, loading neither the limiter nor a framework', async () => {
    if (!existsSync(`${ROOT}dist/http.js`)) throw new Error('Run `npm run build` first (`npm test` does).');
    expect(existsSync(`${ROOT}dist/http.d.ts`)).toBe(true);
    const {
      exports: [exports],
      files,
    } = await importByName('resilimit/http');
    expect(exports).toEqual([
      'byHeader',
      'byIp',
      'byIpFrom',
      'byRoute',
      'byRouteTemplate',
      'byRouteWith',
      'combine',
      'concurrencyLimit',
      'concurrencyLimitHook',
      'headerKey',
      'rateLimit',
      'rateLimitHook',
      'slotOf',
    ]);
    expect(files).toContain('dist/http.js');
    expect(files.every((f) => f.startsWith('dist/'))).toBe(true); // no dependency, no framework
    expect(files).not.toContain('dist/limiter/ResilientLimiter.js');
    expect(files).not.toContain('dist/limiter/ConcurrencyLimiter.js');
  });
});
