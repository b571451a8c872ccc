/**
 * Keys a client can neither multiply nor share, tried as an attacker would: raw request lines against
 * the four real frameworks (Express 5, Fastify 5, Hono 4 on @hono/node-server, Koa 3 with
 * @koa/router), each with a route `GET /orders` behind `combine(byIp, byRoute)` at a limit of 3.
 * Every spelling the router serves as `/orders` must count against one key: at most 3 handler runs
 * of 12 requests, whatever the spelling. And a proxy's address forms, through `byIpFrom`: every form
 * of one client counts against its key, two clients never share one.
 */
import type { IncomingMessage, Server } from 'node:http';
import { type HttpBindings, serve } from '@hono/node-server';
import Router from '@koa/router';
import express from 'express';
import fc from 'fast-check';
import Fastify from 'fastify';
import { Hono } from 'hono';
import Koa from 'koa';
import { afterEach, describe, expect, it } from 'vitest';
import * as honoEntry from '../../src/hono.js';
import * as httpEntry from '../../src/http.js';
import * as koaEntry from '../../src/koa.js';
import { type App, served } from '../support/httpReplies.js';
import { rawRequest } from '../support/rawHttp.js';
import { useLimiters } from '../support/limiters.js';

/** The limiter's clock, which replaces Redis's TIME too: the window never slides during a test. */
const NOW = Date.UTC(2026, 0, 1);
const LIMIT = 3;

const lim = useLimiters({
  limit: LIMIT,
  windowMs: 60_000,
  local: { instances: 1 },
  clock: () => NOW,
  // A generous deadline: these tests are about keys, so Redis must decide even on a loaded machine.
  breaker: { timeoutMs: 2000 },
});
const apps: App[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((a) => a.close()));
});

type Key = 'route' | 'template';
/** What each app records of a request, by its `x-n` header: the key the key function made before routing, and the route its handler served. */
type Seen = { key: Map<string, string>; route: Map<string, string> };
type Framework = {
  name: string;
  /** An app whose routes `/orders` and `/orders/:id` are limited by `combine(byIp, <key>)`; without a limiter, it records the byRoute key of every request. */
  start(key: Key | 'record', seen?: Seen): Promise<App>;
};

const ROUTES = ['/orders', '/orders/:id'];

function recordedAs(seen: Seen | undefined, n: unknown, what: 'key' | 'route', value: string): void {
  if (seen !== undefined && typeof n === 'string') seen[what].set(n, value);
}

const frameworks: Framework[] = [
  {
    name: 'express',
    async start(key, seen) {
      const app = { handled: 0 };
      const e = express();
      const { byIp, byRoute, byRouteTemplate, combine, rateLimit } = httpEntry;
      if (key === 'record')
        e.use((req, _res, next) => {
          recordedAs(seen, req.headers['x-n'], 'key', byRoute(req));
          return next();
        });
      if (key === 'route') e.use(rateLimit(await lim.limiter(), { key: combine(byIp, byRoute) }));
      // Express sets req.route only once a route matched: the template key's middleware is the route's own.
      const own = key === 'template' ? [rateLimit(await lim.limiter(), { key: combine(byIp, byRouteTemplate) })] : [];
      for (const route of ROUTES) {
        e.get(route, ...own, (req, res) => {
          app.handled += 1;
          recordedAs(seen, req.headers['x-n'], 'route', route);
          res.end('ok');
        });
      }
      return served(e.listen(0, '127.0.0.1'), app);
    },
  },
  {
    name: 'fastify',
    async start(key, seen) {
      const app = { handled: 0 };
      const f = Fastify();
      const { byIp, byRoute, byRouteTemplate, combine, rateLimitHook } = httpEntry;
      if (key === 'record') {
        f.addHook('onRequest', (request, _reply, done) => {
          recordedAs(seen, request.headers['x-n'], 'key', byRoute(request));
          done();
        });
      } else {
        f.addHook('onRequest', rateLimitHook(await lim.limiter(), { key: combine(byIp, key === 'route' ? byRoute : byRouteTemplate) }));
      }
      for (const route of ROUTES) {
        f.get(route, async (request) => {
          app.handled += 1;
          recordedAs(seen, request.headers['x-n'], 'route', route);
          return 'ok';
        });
      }
      await f.listen({ port: 0, host: '127.0.0.1' });
      return served(f.server, app);
    },
  },
  {
    name: 'hono',
    async start(key, seen) {
      const app = { handled: 0 };
      const h = new Hono<{ Bindings: HttpBindings }>();
      const { byIp, byRoute, byRouteTemplate, combine, rateLimit } = honoEntry;
      if (key === 'record')
        h.use(async (c, next) => {
          recordedAs(seen, c.req.header('x-n'), 'key', byRoute(c));
          return next();
        });
      else h.use(rateLimit(await lim.limiter(), { key: combine(byIp, key === 'route' ? byRoute : byRouteTemplate) }));
      for (const route of ROUTES) {
        h.get(route, (c) => {
          app.handled += 1;
          recordedAs(seen, c.req.header('x-n'), 'route', route);
          return c.text('ok');
        });
      }
      return served(serve({ fetch: h.fetch, port: 0, hostname: '127.0.0.1' }) as Server, app);
    },
  },
  {
    name: 'koa',
    async start(key, seen) {
      const app = { handled: 0 };
      const k = new Koa();
      const router = new Router();
      const { byIp, byRoute, byRouteTemplate, combine, rateLimit } = koaEntry;
      if (key === 'record')
        k.use((ctx, next) => {
          recordedAs(seen, ctx.get('x-n') || undefined, 'key', byRoute(ctx));
          return next();
        });
      if (key === 'route') k.use(rateLimit(await lim.limiter(), { key: combine(byIp, byRoute) }));
      // @koa/router sets ctx._matchedRoute once it matched: the template key's middleware is the route's own.
      const own = key === 'template' ? [rateLimit(await lim.limiter(), { key: combine(byIp, byRouteTemplate) })] : [];
      for (const route of ROUTES) {
        router.get(route, ...own, (ctx) => {
          app.handled += 1;
          recordedAs(seen, ctx.get('x-n') || undefined, 'route', route);
          ctx.body = 'ok';
        });
      }
      k.use(router.routes());
      return served(k.listen(0, '127.0.0.1') as Server, app);
    },
  },
];

/** Letters of `orders` percent-encoded as the bits of `n` say, the hex digits in either case. */
function encodedLetters(n: number): string {
  return `/${[...'orders'].map((c, i) => ((n >> i) & 1 ? `%${c.charCodeAt(0).toString(16)[i % 2 ? 'toUpperCase' : 'toLowerCase']()}` : c)).join('')}`;
}

/** Spellings of `GET /orders`, each with a fresh variant for every request `n` (1 … 12). */
const spellings: Record<string, (n: number) => [method: string, target: string]> = {
  'a fragment': (n) => ['GET', `/orders#${n}`],
  'an absolute form': (n) => ['GET', `http://h${n}/orders`],
  'percent-encoded letters': (n) => ['GET', encodedLetters(n)],
  'dot segments': (n) => ['GET', `/x${n}/../orders`],
  'encoded dot segments': (n) => ['GET', `/x${n}/%2e%2E/orders`],
  'case and slashes': (n) => ['GET', `/${n & 1 ? 'ORDERS' : 'Orders'}${'/'.repeat(n >> 1)}`],
  'HEAD and GET alternating': (n) => [n % 2 ? 'HEAD' : 'GET', '/orders'],
};

/** Spellings today's routers serve as `/orders`, by framework (the other spellings get a 404, which runs no handler). */
const SERVED: Record<string, string[]> = {
  express: ['a fragment', 'an absolute form', 'case and slashes', 'HEAD and GET alternating'],
  fastify: ['a fragment', 'an absolute form', 'percent-encoded letters', 'HEAD and GET alternating'],
  hono: ['a fragment', 'an absolute form', 'percent-encoded letters', 'dot segments', 'encoded dot segments', 'HEAD and GET alternating'],
  koa: ['a fragment', 'an absolute form', 'case and slashes', 'HEAD and GET alternating'],
};

describe.each(frameworks)('$name: every spelling of GET /orders counts against one key', (framework) => {
  it.each(Object.keys(spellings))('%s: at most the limit of 12 requests run the handler', async (spelling) => {
    const app = await framework.start('route');
    apps.push(app);
    const statuses: number[] = [];
    for (let n = 1; n <= 12; n += 1) {
      const [method, target] = (spellings[spelling] as (n: number) => [string, string])(n);
      statuses.push(await rawRequest(app.url, method, target));
    }
    // Served: the limit's 3 ran, then 429s; not served: 404s only (the limiter counts them under one key, and no handler runs).
    const served = SERVED[framework.name]?.includes(spelling) === true;
    expect({ handled: app.handled, statuses }).toEqual({
      handled: served ? LIMIT : 0,
      statuses: statuses.map((_, i) => (i < LIMIT ? (served ? 200 : 404) : 429)),
    });
  });

  it('byRouteTemplate: every order counts against the route /orders/:id', async () => {
    const app = await framework.start('template');
    apps.push(app);
    for (let n = 1; n <= 12; n += 1) await rawRequest(app.url, n % 2 ? 'HEAD' : 'GET', `/orders/${n}`);
    expect(app.handled).toBe(LIMIT);
  });
});

/** A spelling of `path` (lower-case letters and slashes): any letter upper-cased or percent-encoded, any slash doubled, a dot segment, a trailing slash, an absolute form, a query, a fragment. */
function spellingOf(path: string): fc.Arbitrary<string> {
  // Mostly as is: a spelling with many changes is one Express and Koa do not serve, and says nothing.
  const likely = <T>(as: T, ...changed: T[]) =>
    fc.oneof({ arbitrary: fc.constant(as), weight: 3 * changed.length }, fc.constantFrom(...changed));
  const chars = [...path].map((c) => {
    const hex = c.charCodeAt(0).toString(16);
    return c === '/' ? likely('/', '//', '/./', '/x/../', '/%2e/') : likely(c, c.toUpperCase(), `%${hex}`, `%${hex.toUpperCase()}`);
  });
  const host = fc.stringMatching(/^[a-z][a-z0-9]{0,8}(:[1-9]\d{0,3})?$/);
  return fc
    .tuple(
      fc.tuple(...chars),
      fc.boolean(),
      fc.option(host),
      fc.option(fc.stringMatching(/^[a-z0-9=&]{0,8}$/)),
      fc.option(fc.stringMatching(/^[a-z0-9/]{0,8}$/)),
    )
    .map(([parts, trailing, authority, query, fragment]) => {
      let target = parts.join('') + (trailing ? '/' : '');
      if (authority !== null) target = `http://${authority}${target}`;
      if (query !== null) target += `?${query}`;
      if (fragment !== null) target += `#${fragment}`;
      return target;
    });
}

describe.each(frameworks)('$name: a property over request lines', (framework) => {
  it('gives every spelling the router serves as one route the key of that route, and two routes two keys', async () => {
    const seen: Seen = { key: new Map(), route: new Map() };
    const app = await framework.start('record', seen);
    apps.push(app);
    const path = fc.constantFrom('/orders', '/orders/all-items');
    let n = 0;
    let servedCount = 0;
    await fc.assert(
      fc.asyncProperty(
        path.chain((p) => fc.tuple(fc.constant(p), spellingOf(p), fc.constantFrom('GET', 'HEAD'))),
        async ([p, target, method]) => {
          n += 1;
          const id = String(n);
          const status = await rawRequest(app.url, method, target, { 'x-n': id });
          const route = seen.route.get(id);
          if (route === undefined) return; // not served by a route: no handler ran (404, or 400 for a target the server refuses)
          servedCount += 1;
          expect({ status, route }).toEqual({ status: 200, route: route === '/orders' ? '/orders' : '/orders/:id' });
          expect(seen.key.get(id)).toBe(`route:GET ${p}`);
        },
      ),
      { numRuns: 80 },
    );
    // The property said something: the router served some of the spellings.
    expect(servedCount).toBeGreaterThan(0);
  });
});

describe('byRoute on a request object', () => {
  it('keys the path a router serves, whatever its spelling', () => {
    const of = (method: string, url: string) => httpEntry.byRoute({ method, url, headers: {}, socket: {} } as IncomingMessage);
    expect(of('GET', '/orders#x')).toBe('route:GET /orders');
    expect(of('GET', 'http://h:8080/orders?q=1#y')).toBe('route:GET /orders');
    expect(of('GET', 'https://u@h')).toBe('route:GET /');
    expect(of('GET', '/%6F%72ders')).toBe('route:GET /orders');
    expect(of('GET', '/a/./b/../c/')).toBe('route:GET /a/c');
    expect(of('GET', '/caf%C3%A9')).toBe(of('GET', '/CAFÉ'));
    expect(of('HEAD', '/orders')).toBe('route:GET /orders');
    // What would change the segments, or allow a second decoding, stays encoded; bad octets too.
    expect(of('GET', '/a%2Fb')).toBe('route:GET /a%252fb');
    expect(of('GET', '/a%2F%2E%2E')).toBe('route:GET /a%252f..');
    expect(of('GET', '/%256f')).toBe('route:GET /%25256f');
    expect(of('GET', '/%ff%6f%zz')).toBe('route:GET /%25ffo%25zz');
    expect(of('OPTIONS', '*')).toBe('route:OPTIONS *');
  });

  it('keeps HEAD apart with headAsGet: false, and refuses bad options by name', () => {
    const head = { method: 'HEAD', url: '/a', headers: {}, socket: {} } as IncomingMessage;
    expect(httpEntry.byRouteWith({ headAsGet: false })(head)).toBe('route:HEAD /a');
    expect(() => httpEntry.byRouteWith({ from: 'pattern' as never })).toThrow("Expected `from` to be 'path' or 'template', got");
    expect(() => httpEntry.byRouteWith({ headAsGet: 'no' as never })).toThrow('Expected `headAsGet` to be a boolean, got');
    expect(() => httpEntry.byRouteWith({ head: true } as never)).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION' }));
  });
});

describe('byIpFrom behind a proxy (Express, trust proxy)', () => {
  async function start(): Promise<App> {
    const app = { handled: 0 };
    const e = express();
    e.set('trust proxy', 'loopback');
    e.use(httpEntry.rateLimit(await lim.limiter(), { key: httpEntry.byIpFrom((req: express.Request) => req.ip) }));
    e.get('/', (_req, res) => {
      app.handled += 1;
      res.end('ok');
    });
    e.use((error: { code?: string }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).end(error.code);
    });
    return served(e.listen(0, '127.0.0.1'), app);
  }

  it('counts every form of one IPv4 client against its key, and ::1 apart', async () => {
    const app = await start();
    apps.push(app);
    const forms = [
      '203.0.113.7',
      '::FFFF:203.0.113.7',
      '0:0:0:0:0:ffff:cb00:7107',
      '::203.0.113.7',
      '64:ff9b::cb00:7107',
      '::ffff:0:203.0.113.7',
    ];
    for (let n = 0; n < 12; n += 1) await rawRequest(app.url, 'GET', '/', { 'x-forwarded-for': forms[n % forms.length] as string });
    expect(app.handled).toBe(LIMIT);
    expect(await rawRequest(app.url, 'GET', '/', { 'x-forwarded-for': '::1' })).toBe(200);
    expect(app.handled).toBe(LIMIT + 1);
  });

  it('refuses an address with a port (a key fresh per port) through the error handler, without running the handler', async () => {
    const app = await start();
    apps.push(app);
    expect(await rawRequest(app.url, 'GET', '/', { 'x-forwarded-for': '203.0.113.7:1111' })).toBe(500);
    expect(app.handled).toBe(0);
  });
});
