/**
 * resilimit/hono and resilimit/koa on real servers: Hono served by @hono/node-server and Koa, each
 * listening on an OS-assigned loopback port, sent real requests (fetch; node:http where the source
 * address matters), deciding on a real Redis; and Hono through `app.request()`, with no server.
 */
import { existsSync } from 'node:fs';
import type { IncomingMessage, Server } from 'node:http';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';
import { type HttpBindings, serve } from '@hono/node-server';
import { Hono, type Context as HonoContext } from 'hono';
import Koa, { type ParameterizedContext } from 'koa';
import { describe, expect, expectTypeOf, it } from 'vitest';
import * as honoEntry from '../../src/hono.js';
import * as koaEntry from '../../src/koa.js';
import {
  closeRedisClient,
  createRedisClient,
  type ResilientLimiter,
  type Decision,
  type ResilientLimiterOptions,
} from '../../src/index.js';
import { ROOT, importByName } from '../support/entryPoints.js';
import { remainingBecomes, useHttpLimiters } from '../support/httpLimiters.js';
import { freePort } from '../support/redis.js';
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

/** The limiter's clock: it replaces Redis's TIME too, so that waits are exact (no request moves it). */
const NOW = Date.UTC(2026, 0, 1);

const { apps, limiters, limiter } = useHttpLimiters('hk', { clock: () => NOW });

// ---------------------------------------------------------------------------------------------
// One app per framework, built from a framework-neutral description: the limiter(s) in front of a
// handler that counts its runs and answers with the decision it finds on the context, and an error
// handler that answers 500 with the error's code and message.

type Spec = {
  key?: 'ip' | 'user' | 'ip+route' | 'throws' | 'empty';
  /** 'custom': 429 in text with a header of its own; 'late': the same after a macrotask; 'rejects': onLimited rejects. */
  limited?: 'custom' | 'late' | 'rejects';
  /** Requests with `x-skip: 1` are skipped; 'promise': an async skip (a misuse). */
  skip?: 'header' | 'promise';
  policyName?: string;
  reducedCapacity?: honoEntry.ReducedCapacityAnswer;
  skipFailedRequests?: true;
  /** skipSuccessfulRequests, successful meaning `x-probe: 1`. */
  probesSucceed?: true;
};
type Stack = [ResilientLimiter, Spec][];

const LIMITED_TEXT = 'slow down';

/** What the handler answers: the decision it reads on the context (null if none) and whether both ways of reading agree. */
function seen(decision: Decision | undefined, same = true): string {
  const d = decision === undefined ? null : { allowed: decision.allowed, remaining: decision.remaining, source: decision.source };
  return JSON.stringify({ decision: d, same });
}

/**
 * Until the client gives up. Not `once(request, 'close')`, which rejects on the `'error'` of an aborted
 * request: the handler would fail, and a refund could not tell a cut connection from a 500.
 */
function closed(request: IncomingMessage): Promise<void> {
  return new Promise((resolve) => request.once('close', () => resolve()));
}

/** `/status/<code>` that status, `/hang` no answer until the client gives up, anything else 200. */
function honoOptions(spec: Spec): honoEntry.RateLimitOptions<{ Bindings: HttpBindings }> {
  const { byHeader, byIp, byRoute, combine } = honoEntry;
  type C = HonoContext<{ Bindings: HttpBindings }>;
  const keys = {
    ip: byIp,
    user: byHeader('x-user'),
    'ip+route': combine<C>(byIp, byRoute),
    throws: (c: C) => {
      if (c.req.header('x-bad') !== undefined) throw new Error('no key for this request');
      return 'k';
    },
    empty: (c: C) => (c.req.header('x-empty') === '1' ? '' : 'k'),
  };
  return {
    ...(spec.key === undefined ? {} : { key: keys[spec.key] }),
    ...(spec.policyName === undefined ? {} : { policyName: spec.policyName }),
    ...(spec.reducedCapacity === undefined ? {} : { reducedCapacity: spec.reducedCapacity }),
    ...(spec.skip === 'header' ? { skip: (c: C) => c.req.header('x-skip') === '1' } : {}),
    ...(spec.skip === 'promise' ? { skip: (async () => true) as unknown as () => boolean } : {}),
    ...(spec.skipFailedRequests ? { skipFailedRequests: true } : {}),
    ...(spec.probesSucceed ? { skipSuccessfulRequests: true, requestWasSuccessful: (c: C) => c.req.header('x-probe') === '1' } : {}),
    ...(spec.limited === undefined
      ? {}
      : {
          onLimited: async (c: C, decision: Decision) => {
            if (spec.limited === 'rejects') throw new Error('onLimited failed');
            if (spec.limited === 'late') await tick();
            c.header('x-limited', String(decision.remaining));
            c.header('x-seen', String(c.get('rateLimit')?.allowed));
            return c.text(LIMITED_TEXT); // 429 (or 503): the middleware called c.status()
          },
        }),
  };
}

function koaOptions(spec: Spec): koaEntry.RateLimitOptions {
  const { byHeader, byIp, byRoute, combine } = koaEntry;
  type C = ParameterizedContext;
  const keys = {
    ip: byIp,
    user: byHeader('x-user'),
    'ip+route': combine(byIp, byRoute),
    throws: (ctx: C) => {
      if (ctx.get('x-bad') !== '') throw new Error('no key for this request');
      return 'k';
    },
    empty: (ctx: C) => (ctx.get('x-empty') === '1' ? '' : 'k'),
  };
  return {
    ...(spec.key === undefined ? {} : { key: keys[spec.key] }),
    ...(spec.policyName === undefined ? {} : { policyName: spec.policyName }),
    ...(spec.reducedCapacity === undefined ? {} : { reducedCapacity: spec.reducedCapacity }),
    ...(spec.skip === 'header' ? { skip: (ctx: C) => ctx.get('x-skip') === '1' } : {}),
    ...(spec.skip === 'promise' ? { skip: (async () => true) as unknown as () => boolean } : {}),
    ...(spec.skipFailedRequests ? { skipFailedRequests: true } : {}),
    ...(spec.probesSucceed ? { skipSuccessfulRequests: true, requestWasSuccessful: (ctx: C) => ctx.get('x-probe') === '1' } : {}),
    ...(spec.limited === undefined
      ? {}
      : {
          onLimited: async (ctx: C, decision: Decision) => {
            if (spec.limited === 'rejects') throw new Error('onLimited failed');
            if (spec.limited === 'late') await tick(); // Koa would have answered by now without waiting for us
            ctx.set('x-limited', String(decision.remaining));
            ctx.set('x-seen', String((ctx.state as koaEntry.RateLimitState).rateLimit?.allowed));
            ctx.type = 'text/plain';
            ctx.body = LIMITED_TEXT;
          },
        }),
  };
}

/** The Hono app of a stack (served by @hono/node-server below, or asked with `app.request()`). */
function honoApp(stack: Stack, app: { handled: number }): Hono<{ Bindings: HttpBindings }> {
  const h = new Hono<{ Bindings: HttpBindings }>();
  for (const [l, spec] of stack) h.use(honoEntry.rateLimit(l, honoOptions(spec)));
  h.get('/raw', (c) => {
    app.handled += 1;
    return new Response(seen(c.get('rateLimit'))); // built by hand, not through c: the fields must stay
  });
  h.get('*', async (c) => {
    app.handled += 1;
    const outcome = outcomeOf(c.req.path);
    if (outcome === 'hang') await closed(c.env.incoming); // then a 200 that cannot be sent whole
    if (outcome === 500) throw new Error('handler failed');
    return c.text(seen(c.get('rateLimit'), c.var.rateLimit === c.get('rateLimit')), outcome === 'hang' ? 200 : (outcome as 200));
  });
  h.onError((error, c) => c.text(errorBody(error), 500));
  return h;
}

type Framework = { name: string; start(stack: Stack): Promise<App> };

const frameworks: Framework[] = [
  {
    name: 'hono',
    async start(stack) {
      const app = { handled: 0 };
      const h = honoApp(stack, app);
      return served(serve({ fetch: h.fetch, port: 0, hostname: '127.0.0.1' }) as Server, app);
    },
  },
  {
    name: 'koa',
    async start(stack) {
      const app = { handled: 0 };
      const k = new Koa();
      k.use(async (ctx, next) => {
        try {
          await next();
        } catch (error) {
          ctx.status = 500;
          ctx.body = errorBody(error);
        }
      });
      for (const [l, spec] of stack) k.use(koaEntry.rateLimit(l, koaOptions(spec)));
      k.use(async (ctx) => {
        app.handled += 1;
        const outcome = outcomeOf(ctx.path);
        if (outcome === 'hang') {
          await closed(ctx.req); // then a 200 that cannot be sent whole
          ctx.body = 'late';
          return;
        }
        if (outcome === 500) throw new Error('handler failed');
        ctx.status = outcome;
        ctx.body = seen((ctx.state as koaEntry.RateLimitState).rateLimit);
      });
      return served(k.listen(0, '127.0.0.1'), app);
    },
  },
];

// ---------------------------------------------------------------------------------------------
// Requests and fields

/** The decision the handler found on the context. */
function decisionOf(reply: Reply): { decision: { allowed: boolean; remaining: number; source: string } | null; same: boolean } {
  return JSON.parse(reply.body);
}

/**
 * A limiter of 4 shared by 2 instances (a local share of 2), in an outage (the breaker forced open),
 * on the clock that never moves: a refusal's wait is exactly the window, Retry-After 60.
 */
function outage(options: Partial<ResilientLimiterOptions> = {}): ResilientLimiter {
  const l = limiter({ limit: 4, local: { instances: 2 }, ...options });
  l.forceOpen();
  return l;
}

// ---------------------------------------------------------------------------------------------

describe.each(frameworks)('$name', (framework) => {
  async function start(spec: Spec = {}, l = limiter()): Promise<App> {
    const app = await framework.start([[l, spec]]);
    apps.push(app);
    return app;
  }

  it('admits requests under the limit with the RateLimit fields counting down, then answers 429 with Retry-After and a problem details body', async () => {
    const app = await start();
    const replies = await sequence(app, 4);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(app.handled).toBe(3);
    for (const reply of replies) expect(item(reply.headers.get('ratelimit-policy'))).toEqual({ q: 3, w: 60 });
    expect(replies.map((r) => item(r.headers.get('ratelimit')))).toEqual([
      { r: 2, t: 60 },
      { r: 1, t: 60 },
      { r: 0, t: 60 },
      { r: 0, t: 60 }, // t: Retry-After, a full window on this clock
    ]);
    for (const reply of replies.slice(0, 3)) expect(reply.headers.get('retry-after')).toBeNull();
    const limited = replies[3]!;
    expect(limited.headers.get('retry-after')).toBe('60');
    expect(limited.headers.get('content-type')).toBe('application/problem+json');
    expect(JSON.parse(limited.body)).toEqual({
      ...QUOTA_EXCEEDED,
      detail: 'Retry after 60 s',
      'violated-policies': ['default'],
      retryAfterMs: 60_000,
    });
  });

  it('puts the decision on the context, where the handler reads it', async () => {
    const app = await start();
    const replies = await sequence(app, 2);
    expect(replies.map(decisionOf)).toEqual([
      { decision: { allowed: true, remaining: 2, source: 'redis' }, same: true },
      { decision: { allowed: true, remaining: 1, source: 'redis' }, same: true },
    ]);
  });

  it('answers a rejected request with onLimited, given the decision on the context, after the status, Retry-After and the fields are set', async () => {
    const app = await start({ limited: 'custom' });
    const limited = (await sequence(app, 4))[3]!;
    expect(limited.status).toBe(429);
    expect(limited.body).toBe(LIMITED_TEXT);
    expect(limited.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(limited.headers.get('x-limited')).toBe('0');
    expect(limited.headers.get('x-seen')).toBe('false');
    expect(limited.headers.get('retry-after')).toBe('60');
    expect(item(limited.headers.get('ratelimit'))).toEqual({ r: 0, t: 60 });
    expect(app.handled).toBe(3);
  });

  it('waits for an onLimited that answers after a macrotask', async () => {
    const app = await start({ limited: 'late' });
    const limited = (await sequence(app, 4))[3]!;
    expect([limited.status, limited.body, limited.headers.get('x-limited')]).toEqual([429, LIMITED_TEXT, '0']);
    expect(app.handled).toBe(3);
  });

  it('passes an error of onLimited to the error handling', async () => {
    const app = await start({ limited: 'rejects' });
    const replies = await sequence(app, 4);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 500]);
    expect(JSON.parse(replies[3]!.body)).toMatchObject({ message: 'onLimited failed' });
    expect(app.handled).toBe(3);
  });

  it('lets skipped requests through uncounted, without RateLimit fields or a decision', async () => {
    const app = await start({ skip: 'header' });
    const skipped = await sequence(app, 4, '/', { 'x-skip': '1' });
    expect(skipped.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    for (const r of skipped) {
      expect(r.headers.get('ratelimit')).toBeNull();
      expect(decisionOf(r).decision).toBeNull();
    }
    expect(item((await get(app)).headers.get('ratelimit'))['r']).toBe(2);
    expect(app.handled).toBe(5);
  });

  it('fails a request whose skip returns a promise instead of skipping it', async () => {
    const app = await start({ skip: 'promise' });
    const reply = await get(app);
    expect(reply.status).toBe(500);
    expect(JSON.parse(reply.body)).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_OPTION' });
    expect(app.handled).toBe(0);
  });

  it('keys by the TCP peer by default: another source address has its own limit, X-Forwarded-For is ignored', async () => {
    const app = await start();
    const claimed = [];
    for (let i = 1; i <= 4; i += 1) claimed.push(await getFrom(app, '127.0.0.1', { 'x-forwarded-for': `198.51.100.${i}` }));
    expect(claimed.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    const other = await getFrom(app, '127.0.0.2');
    expect(other.status).toBe(200);
    expect(item(other.headers.get('ratelimit'))['r']).toBe(2);
  });

  it("keys by a header with the entry's byHeader, a request without it by its address", async () => {
    const app = await start({ key: 'user' });
    expect((await sequence(app, 4, '/', { 'x-user': 'alice' })).map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(item((await get(app, '/', { 'x-user': 'bob' })).headers.get('ratelimit'))['r']).toBe(2);
    expect(item((await get(app)).headers.get('ratelimit'))['r']).toBe(2);
  });

  it('keys by route with combine(byIp, byRoute): each path its own limit, whatever its query, case or trailing slash', async () => {
    const app = await start({ key: 'ip+route' });
    const orders = [
      await get(app, '/orders?page=1'),
      await get(app, '/Orders/?page=2'),
      await get(app, '/orders'),
      await get(app, '/orders'),
    ];
    expect(orders.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(item((await get(app, '/users')).headers.get('ratelimit'))['r']).toBe(2);
  });

  it("passes an error of the key function and the limiter's misuse errors to the error handling, without counting the request", async () => {
    const app = await start({ key: 'throws' });
    const bad = await get(app, '/', { 'x-bad': '1' });
    expect([bad.status, JSON.parse(bad.body)]).toEqual([500, { code: null, message: 'no key for this request' }]);
    expect(item((await get(app)).headers.get('ratelimit'))['r']).toBe(2);

    const l = limiter();
    const other = await start({ key: 'empty' }, l);
    expect(JSON.parse((await get(other, '/', { 'x-empty': '1' })).body)).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_KEY' });
    await l.close();
    expect(JSON.parse((await get(other)).body)).toMatchObject({ code: 'ERR_RESILIMIT_CLOSED' });
    expect(app.handled + other.handled).toBe(1);
  });

  it('lists the items of two limiters side by side, and stops at the first that rejects', async () => {
    const app = await framework.start([
      [limiter({ limit: 2 }), { policyName: 'burst' }],
      [limiter({ limit: 5, windowMs: 3_600_000 }), { policyName: 'hourly' }],
    ]);
    apps.push(app);
    const replies = await sequence(app, 3);
    expect(items(replies[0]!.headers.get('ratelimit-policy'))).toEqual([
      { name: 'burst', params: { q: 2, w: 60 } },
      { name: 'hourly', params: { q: 5, w: 3600 } },
    ]);
    expect(items(replies[1]!.headers.get('ratelimit')).map((i) => [i.name, i.params['r']])).toEqual([
      ['burst', 0],
      ['hourly', 3],
    ]);
    expect(replies[2]!.status).toBe(429);
    expect(items(replies[2]!.headers.get('ratelimit')).map((i) => i.name)).toEqual(['burst']); // hourly never asked
    expect(JSON.parse(replies[2]!.body)).toMatchObject({ 'violated-policies': ['burst'] });
  });

  it('with skipFailedRequests, counts only the requests that succeed: an error status, a thrown error or a cut connection is refunded', async () => {
    const l = limiter();
    const app = await start({ key: 'empty', skipFailedRequests: true }, l);
    for (const path of ['/status/503', '/status/404', '/status/500']) {
      expect((await get(app, path)).status).toBe(Number(path.slice('/status/'.length)));
      await remainingBecomes(l, 3, 'k');
    }
    const aborted = new AbortController();
    const hung = fetch(`${app.url}/hang`, { signal: aborted.signal }).catch((error: unknown) => error);
    while (app.handled < 4) await sleep(5);
    expect((await l.peek('k')).remaining).toBe(2); // counted while it runs
    aborted.abort();
    await hung;
    await remainingBecomes(l, 3, 'k');
    expect((await sequence(app, 4, '/status/201')).map((r) => r.status)).toEqual([201, 201, 201, 429]);
    expect((await l.peek('k')).remaining).toBe(0); // neither the successes nor the 429 came back
  });

  it('with skipSuccessfulRequests, asks requestWasSuccessful with the context: only the others count', async () => {
    const l = limiter();
    const app = await start({ key: 'empty', probesSucceed: true }, l);
    for (let i = 0; i < 4; i += 1) {
      expect((await get(app, '/status/404', { 'x-probe': '1' })).status).toBe(404);
      await remainingBecomes(l, 3, 'k');
    }
    expect((await sequence(app, 4)).map((r) => r.status)).toEqual([200, 200, 200, 429]);
  });

  it('answers from the local window while Redis is down: the fields, the 429 and the decision say so', async () => {
    const down = createRedisClient(`redis://127.0.0.1:${await freePort()}`); // nothing listens there
    try {
      const app = await start({}, limiter({ redis: down }));
      const replies = await sequence(app, 4);
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
      expect(decisionOf(replies[0]!).decision).toEqual({ allowed: true, remaining: 2, source: 'local' });
      expect(replies.map((r) => item(r.headers.get('ratelimit'))['r'])).toEqual([2, 1, 0, 0]);
      expect(replies[3]!.headers.get('retry-after')).toBe('60');
      expect(JSON.parse(replies[3]!.body)).toMatchObject({ ...QUOTA_EXCEEDED, retryAfterMs: 60_000 });
    } finally {
      await Promise.all(limiters.splice(0).map((l) => l.close()));
      await closeRedisClient(down);
    }
  });

  // The same tests as http.test.ts's of the option, on Hono and Koa: the shared core answers alike.
  describe('refusals of reduced capacity (the reducedCapacity option)', () => {
    it('by default answers a refusal of the local share like any other, 429 quota-exceeded', async () => {
      const app = await start({}, outage());
      const replies = await sequence(app, 3);
      expect(replies.map((r) => r.status)).toEqual([200, 200, 429]);
      const refused = replies[2]!;
      expect(item(refused.headers.get('ratelimit-policy'))).toEqual({ q: 2, w: 60 });
      expect(refused.headers.get('retry-after')).toBe('60');
      expect(JSON.parse(refused.body)).toEqual({
        ...QUOTA_EXCEEDED,
        detail: 'Retry after 60 s',
        'violated-policies': ['default'],
        retryAfterMs: 60_000,
      });
    });

    it("with 'temporary-reduced-capacity' answers it 503 of that problem type, the share as the lowered quota, with Retry-After", async () => {
      const app = await start({ reducedCapacity: 'temporary-reduced-capacity', policyName: 'per-ip' }, outage());
      const replies = await sequence(app, 3);
      expect(replies.map((r) => r.status)).toEqual([200, 200, 503]);
      const refused = replies[2]!;
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
    });

    it("with 'temporary-reduced-capacity' sets the 503 before onLimited runs", async () => {
      const app = await start({ reducedCapacity: 'temporary-reduced-capacity', limited: 'custom' }, outage());
      const replies = await sequence(app, 3);
      expect(replies.map((r) => r.status)).toEqual([200, 200, 503]);
      const refused = replies[2]!;
      expect([refused.body, refused.headers.get('x-limited'), refused.headers.get('retry-after')]).toEqual([LIMITED_TEXT, '0', '60']);
      expect(item(refused.headers.get('ratelimit-policy'))).toEqual({ q: 2, w: 60 });
    });

    it("keeps 429 quota-exceeded for refusals of the quota with 'temporary-reduced-capacity': Redis's, the deny cache's, the whole limit's", async () => {
      // Redis decides: the limit of 4 is the quota; the fifth request is Redis's refusal, the sixth the deny cache's.
      const redisDecides = await start({ reducedCapacity: 'temporary-reduced-capacity' }, limiter({ limit: 4, local: { instances: 2 } }));
      const replies = await sequence(redisDecides, 6);
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 429, 429]);
      for (const refused of replies.slice(4)) {
        expect(JSON.parse(refused.body)).toMatchObject(QUOTA_EXCEEDED);
        expect(item(refused.headers.get('ratelimit-policy'))).toEqual({ q: 4, w: 60 });
      }
      // One instance: its share is the whole limit, so the local window refuses for the quota.
      const alone = await start({ reducedCapacity: 'temporary-reduced-capacity' }, outage({ local: { instances: 1 } }));
      const local = await sequence(alone, 5);
      expect(local.map((r) => r.status)).toEqual([200, 200, 200, 200, 429]);
      expect(JSON.parse(local[4]!.body)).toMatchObject(QUOTA_EXCEEDED);
    });

    it("answers mode 'fail-closed' 503 with a quota of 0 and the breaker's open period as Retry-After with 'temporary-reduced-capacity'", async () => {
      const closed = outage({ mode: 'fail-closed', breaker: { timeoutMs: 2000, resetTimeoutMs: 2200 } });
      const app = await start({ reducedCapacity: 'temporary-reduced-capacity' }, closed);
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
      const through = await start({ reducedCapacity: 'temporary-reduced-capacity' }, outage({ mode: 'fail-closed', shadow: true }));
      const admitted = await get(through);
      expect(admitted.status).toBe(200);
      expect(item(admitted.headers.get('ratelimit-policy'))).toEqual({ q: 0, w: 60 });
      expect(admitted.headers.get('retry-after')).toBeNull();
      expect(through.handled).toBe(1);
    });
  });
});

describe('hono', () => {
  it('keeps the fields on a response the handler builds itself', async () => {
    const app = await frameworks[0]!.start([[limiter(), {}]]);
    apps.push(app);
    const reply = await get(app, '/raw');
    expect([reply.status, item(reply.headers.get('ratelimit'))]).toEqual([200, { r: 2, t: 60 }]);
    expect(decisionOf(reply).decision).toEqual({ allowed: true, remaining: 2, source: 'redis' });
  });

  it("answers app.request() with a key of the app's own; byIp there fails the request, naming byIpFrom", async () => {
    const app = { handled: 0 };
    const asked = honoApp([[limiter(), { key: 'user' }]], app);
    const replies = [];
    for (let i = 0; i < 4; i += 1) replies.push(await asked.request('/', { headers: { 'x-user': 'alice' } }));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(replies[3]!.headers.get('retry-after')).toBe('60');
    const anonymous = await asked.request('/'); // byHeader's otherwise: byIp, which has no address here
    expect(anonymous.status).toBe(500);
    const error = JSON.parse(await anonymous.text()) as { code: string; message: string };
    expect(error.code).toBe('ERR_RESILIMIT_INVALID_KEY');
    expect(error.message).toContain('byIpFrom');
    expect(app.handled).toBe(3);
  });

  it("answers app.request() 503 temporary-reduced-capacity with 'temporary-reduced-capacity', without a server", async () => {
    const app = { handled: 0 };
    const asked = honoApp([[outage(), { key: 'user', reducedCapacity: 'temporary-reduced-capacity' }]], app);
    const replies = [];
    for (let i = 0; i < 3; i += 1) replies.push(await asked.request('/', { headers: { 'x-user': 'alice' } }));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 503]);
    const refused = replies[2]!;
    expect([refused.headers.get('content-type'), refused.headers.get('retry-after')]).toEqual(['application/problem+json', '60']);
    expect(item(refused.headers.get('ratelimit-policy'))).toEqual({ q: 2, w: 60 });
    expect(await refused.json()).toMatchObject(TEMPORARY_REDUCED_CAPACITY);
    expect(app.handled).toBe(2);
  });

  it('keys by the address a runtime gives with byIpFrom: an IPv6 client by its /64', async () => {
    const l = limiter({ limit: 2 });
    const h = new Hono();
    h.use(honoEntry.rateLimit(l, { key: honoEntry.byIpFrom((c) => c.req.header('x-test-address')) }));
    h.get('/', (c) => c.text('ok'));
    h.onError((error, c) => c.text(errorBody(error), 500));
    const from = async (address: string) => (await h.request('/', { headers: { 'x-test-address': address } })).status;
    expect([await from('2001:db8:0:1::1'), await from('2001:db8:0:1::2'), await from('2001:db8:0:1:ffff::3')]).toEqual([200, 200, 429]);
    expect(await from('2001:db8:0:2::1')).toBe(200);
    expect(await from('::ffff:203.0.113.7')).toBe(200);
    expect((await l.peek('ip:203.0.113.7')).remaining).toBe(1);
    expect(await (await h.request('/')).json()).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_KEY' });
  });

  it('with skipFailedRequests under app.request(), refunds once the handlers have returned, by the status of c.res', async () => {
    const l = limiter();
    const app = { handled: 0 };
    const asked = honoApp([[l, { key: 'empty', skipFailedRequests: true }]], app);
    for (const path of ['/status/503', '/status/500', '/status/404']) await asked.request(path);
    expect((await l.peek('k')).remaining).toBe(3); // refunded before app.request() resolved: no wait
    const ok = [];
    for (let i = 0; i < 4; i += 1) ok.push((await asked.request('/status/201')).status);
    expect(ok).toEqual([201, 201, 201, 429]);
    expect(app.handled).toBe(6);
  });

  it('types the decision as c.get("rateLimit") and c.var.rateLimit, and gives the options Hono\'s context', () => {
    type AppEnv = { Variables: { user: string } };
    const app = new Hono<AppEnv>();
    app.use(
      honoEntry.rateLimit<AppEnv>(limiter(), {
        key: (c) => {
          expectTypeOf(c.get('user')).toEqualTypeOf<string>(); // the app's Env, not Hono's untyped context
          return `user:${c.get('user')}`;
        },
        onLimited: (c, decision) => c.json({ retryAfterMs: decision.retryAfterMs }),
      }),
    );
    app.get('/', (c) => {
      expectTypeOf(c.get('rateLimit')).toEqualTypeOf<Decision | undefined>();
      expectTypeOf(c.var.rateLimit).toEqualTypeOf<Decision | undefined>();
      // @ts-expect-error: a decision has no such field
      void c.get('rateLimit')?.remainingMs;
      return c.text('ok');
    });
    // On one route, and in an untyped app.
    new Hono().get('/', honoEntry.rateLimit(limiter()), (c) => c.text(String(c.var.rateLimit?.remaining)));
    // @ts-expect-error: onLimited must return the response
    honoEntry.rateLimit(limiter(), { onLimited: () => undefined });
    expect(app.routes.length).toBe(2);
  });
});

describe('koa', () => {
  it("gives the option functions Koa's ctx: keyed by ctx.ip, following app.proxy", async () => {
    const l = limiter({ limit: 1 });
    const k = new Koa({ proxy: true });
    k.use(koaEntry.rateLimit(l, { key: (ctx) => `ip:${ctx.ip}` }));
    k.use((ctx) => {
      ctx.body = 'ok';
    });
    const app = await served(k.listen(0, '127.0.0.1'), { handled: 0 });
    apps.push(app);
    const from = async (address: string) => (await get(app, '/', { 'x-forwarded-for': address })).status;
    expect([await from('198.51.100.1'), await from('198.51.100.1'), await from('198.51.100.2')]).toEqual([200, 429, 200]);
  });

  it("types the decision on ctx.state and gives the options Koa's context", () => {
    type State = { user: string };
    const k = new Koa<State>();
    k.use(
      koaEntry.rateLimit<State>(limiter(), {
        key: (ctx) => {
          expectTypeOf(ctx.state.user).toEqualTypeOf<string>(); // the app's state, not Koa's untyped one
          return `user:${ctx.state.user}`;
        },
        onLimited: (ctx, decision) => {
          ctx.body = { retryAfterMs: decision.retryAfterMs };
        },
      }),
    ).use((ctx) => {
      expectTypeOf(ctx.state.rateLimit).toEqualTypeOf<Decision | undefined>();
      expectTypeOf(ctx.state.user).toEqualTypeOf<string>();
      ctx.body = 'ok';
    });
    // @ts-expect-error: onLimited is given the context and the decision, not Node's request and response
    koaEntry.rateLimit(limiter(), { onLimited: (_req: unknown, res: { end(): void }) => res.end() });
    expect(k.middleware.length).toBe(2);
  });
});

describe('option validation', () => {
  it.each([
    ['hono', () => honoEntry.rateLimit(limiter(), { trustProxy: true } as never)],
    ['koa', () => koaEntry.rateLimit(limiter(), { max: 5 } as never)],
  ])('refuses an option %s does not have, naming it', (_, make) => {
    expect(make).toThrow(
      expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION', message: expect.stringMatching(/rateLimit\(\) has no such option/) }),
    );
  });

  it.each([
    ['hono', () => honoEntry.rateLimit(limiter(), { reducedCapacity: 503 as never })],
    ['koa', () => koaEntry.rateLimit(limiter(), { reducedCapacity: 'service-unavailable' as never })],
  ])('%s: refuses a reducedCapacity that is neither problem type', (_, make) => {
    expect(make).toThrow(
      expect.objectContaining({
        code: 'ERR_RESILIMIT_INVALID_OPTION',
        message: expect.stringMatching(/^Expected `reducedCapacity` to be 'quota-exceeded' or 'temporary-reduced-capacity', got /),
      }),
    );
  });

  it('refuses a limiter that is not one, and a byIpFrom without a function', () => {
    expect(() => koaEntry.rateLimit({} as never)).toThrow('Expected the limiter of rateLimit() to be a ResilientLimiter, got an object');
    expect(() => honoEntry.byIpFrom('x-real-ip' as never)).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION' }));
  });
});

describe('the package entry points', () => {
  it('exports resilimit/hono and resilimit/koa from the build, loading neither a framework nor the limiter', async () => {
    if (!existsSync(`${ROOT}dist/hono.js`) || !existsSync(`${ROOT}dist/koa.d.ts`))
      throw new Error('Run `npm run build` first (`npm test` does).');
    const {
      exports: [hono, koa],
      files,
    } = await importByName('resilimit/hono', 'resilimit/koa');
    const keys = ['byHeader', 'byIp', 'byIpFrom', 'byRoute', 'byRouteTemplate', 'byRouteWith', 'combine', 'headerKey'];
    expect(hono).toEqual([...keys, 'rateLimit']);
    expect(koa).toEqual([...keys, 'rateLimit']);
    expect(files).toEqual(expect.arrayContaining(['dist/hono.js', 'dist/koa.js']));
    expect(files.every((f) => f.startsWith('dist/'))).toBe(true); // no dependency, no framework
    expect(files).not.toContain('dist/limiter/ResilientLimiter.js');
  });
});
