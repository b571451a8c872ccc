/**
 * resilimit/express-rate-limit: ResilimitStore behind the real express-rate-limit 8 middleware, in a
 * real Express 5 app on an OS-assigned loopback port, sent real requests (fetch), deciding on a real
 * Redis (a redis-server child of this file, which the outage tests freeze).
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import { rateLimit, type Options, type RateLimitRequestHandler } from 'express-rate-limit';
import { afterEach, describe, expect, it } from 'vitest';
import { ResilimitStore, type StoreLimiter } from '../../src/express-rate-limit.js';
import type { RefundResult, ResilientLimiter, ResilientLimiterOptions } from '../../src/index.js';
import { useLimiters } from '../support/limiters.js';

const WINDOW_MS = 60_000;
// A generous deadline: these tests are about express-rate-limit, so Redis must decide even on a loaded
// machine (the outage tests set their own).
const limiters = useLimiters({ limit: 3, windowMs: WINDOW_MS, local: { instances: 1 }, breaker: { timeoutMs: 2_000 } });

type App = {
  middleware: RateLimitRequestHandler;
  /** What express-rate-limit logged (`logger.error`). */
  logged: unknown[];
  get(path: string, client?: string): Promise<Reply>;
  close(): Promise<void>;
};
type Reply = { status: number; headers: Headers; body: string; ms: number };

const apps: App[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((a) => a.close()));
});

/** Resolvers of the requests to `/held/:status` waiting for the test to answer them; `entered` resolves as one waits. */
const held: { release: (() => void)[]; entered: (() => void) | undefined } = { release: [], entered: undefined };

/**
 * An Express app with express-rate-limit in front: `/status/:code` answers that status, `/held/:code`
 * waits for `held.release` first. Keys are the `x-client` header. Errors answer 500 with their code.
 */
async function serve(store: ResilimitStore, options: Partial<Options> = {}): Promise<App> {
  const logged: unknown[] = [];
  const middleware = rateLimit({
    windowMs: WINDOW_MS,
    limit: 3,
    store,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    keyGenerator: (req) => String(req.headers['x-client'] ?? 'anonymous'),
    logger: { error: (error) => logged.push(error), warn: () => undefined },
    ...options,
  });
  const app = express();
  app.use(middleware);
  app.get('/status/:code', (req, res) => void res.status(Number(req.params['code'])).send('done'));
  app.get('/held/:code', (req, res) => {
    held.release.push(() => void res.status(Number(req.params['code'])).send('done'));
    held.entered?.();
  });
  app.use((error: { code?: string; message: string }, _req: Request, res: Response, _next: NextFunction) => {
    res.status(500).json({ code: error.code, message: error.message });
  });
  const server: Server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const served: App = {
    middleware,
    logged,
    async get(path, client = 'ada') {
      const started = performance.now();
      const response = await fetch(`http://127.0.0.1:${port}${path}`, { headers: { 'x-client': client } });
      const body = await response.text();
      return { status: response.status, headers: response.headers, body, ms: performance.now() - started };
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
  apps.push(served);
  return served;
}

/** `n` requests to `path`, one after another. */
async function statuses(app: App, path: string, n: number, client?: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i += 1) out.push((await app.get(path, client)).status);
  return out;
}

/** `r` of a draft-8 `RateLimit` field: `"<name>"; r=<remaining>; t=<seconds>`. */
function remaining(reply: Reply): number {
  return Number(/r=(\d+)/.exec(reply.headers.get('ratelimit') ?? '')?.[1]);
}

/** A limiter that records the ids it admitted and the refunds asked of it. */
function recording(l: ResilientLimiter) {
  const admitted: string[] = [];
  const refunds: { id: string; result: Promise<RefundResult> }[] = [];
  const limiter: StoreLimiter = {
    limit: async (key, options) => {
      const d = await l.limit(key, options);
      if (d.id !== undefined) admitted.push(d.id);
      return d;
    },
    refund: (key, id, options) => {
      const result = l.refund(key, id, options);
      refunds.push({ id, result });
      return result;
    },
    reset: (key) => l.reset(key),
    peek: (key) => l.peek(key),
    stats: () => l.stats(),
  };
  return {
    limiter,
    admitted,
    refunds,
    /**
     * Resolves once `n` refunds were asked and answered. express-rate-limit asks in the microtasks
     * after a response's `finish`, so at once; the 2 s cap only turns a refund never asked into a failure.
     */
    async settled(n: number): Promise<RefundResult[]> {
      for (let i = 0; refunds.length < n; i += 1) {
        if (i > 200) throw new Error(`${refunds.length} refunds asked, not ${n}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return Promise.all(refunds.map((r) => r.result));
    },
  };
}

describe('ResilimitStore behind express-rate-limit', () => {
  it("holds the limiter's limit: express-rate-limit admits what Redis admits and answers its own 429 with its headers", async () => {
    const l = await limiters.limiter();
    const app = await serve(new ResilimitStore(l));
    const replies = [];
    for (let i = 0; i < 4; i += 1) replies.push(await app.get('/status/200'));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(replies.map(remaining)).toEqual([2, 1, 0, 0]);
    expect(replies[0]?.headers.get('ratelimit-policy')).toMatch(/^"3-in-1min"; q=3; w=60; pk=:/);
    expect(replies[3]?.body).toBe('Too many requests, please try again later.');
    // The first call leaves the window 60 s after it was admitted: a little less than 60 s from now,
    // rounded up (59 when the machine took over a second between the first request and the last).
    const retryAfter = Number(replies[3]?.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(59);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(l.stats().bySource.redis).toBe(4);
    expect((await l.peek('ada')).remaining).toBe(0); // the refused request took nothing, the others are in Redis
    expect(app.logged).toEqual([]);
  });

  it('says when the next permit comes back in Retry-After, not when the whole window is empty', async () => {
    // One clock for both tiers (it replaces Redis TIME): the test moves it, nothing sleeps.
    let now = Date.now();
    const app = await serve(new ResilimitStore(await limiters.limiter({ clock: () => now })));
    for (let i = 0; i < 3; i += 1) {
      expect((await app.get('/status/200')).status).toBe(200);
      now += 10_000;
    }
    const refused = await app.get('/status/200');
    expect(refused.status).toBe(429);
    // The first call (30 s ago) leaves in 30 s; the window is empty only in 50 s.
    expect(refused.headers.get('retry-after')).toBe('30');
  });

  it('shares the count through Redis: two services, each with its own limiter of one prefix, admit the limit between them', async () => {
    const prefix = `shared:${crypto.randomUUID()}:`;
    const one = await serve(new ResilimitStore(await limiters.limiter({ prefix })));
    const two = await serve(new ResilimitStore(await limiters.limiter({ prefix })));
    const got = [];
    for (const app of [one, two, one, two]) got.push((await app.get('/status/200')).status);
    expect(got).toEqual([200, 200, 200, 429]);
  });

  it("refunds failed requests with skipFailedRequests, and a 429's decrement gives back nothing", async () => {
    const r = recording(await limiters.limiter({ limit: 2 }));
    const app = await serve(new ResilimitStore(r.limiter), { limit: 2, skipFailedRequests: true });
    expect(await statuses(app, '/status/500', 3)).toEqual([500, 500, 500]);
    expect(await r.settled(3)).toEqual(Array(3).fill({ refunded: true, permits: 1, pending: false }));
    // Failures never counted: both permits are there. The 429s fail too, and express-rate-limit
    // decrements them; they took nothing, so no refund is asked (one would free an admitted call).
    expect(await statuses(app, '/status/200', 5)).toEqual([200, 200, 429, 429, 429]);
    // A wrong refund would be asked in the microtasks after the 429's finish, long before 50 ms.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(r.refunds).toHaveLength(3);
    expect(await statuses(app, '/status/200', 1)).toEqual([429]);
  });

  it("refunds each failed request's own call, by its id, whatever the order its responses end in", async () => {
    const r = recording(await limiters.limiter({ limit: 5 }));
    const app = await serve(new ResilimitStore(r.limiter), { limit: 5, skipFailedRequests: true });
    const entered = new Promise<void>((resolve) => {
      held.entered = resolve;
    });
    const slow = app.get('/held/500'); // admitted first, fails last
    await entered;
    held.entered = undefined;
    expect((await app.get('/status/200')).status).toBe(200); // admitted second, counts
    expect((await app.get('/status/503')).status).toBe(503); // admitted third, fails first
    await r.settled(1);
    held.release.splice(0).forEach((release) => void release());
    expect((await slow).status).toBe(500);
    await r.settled(2);
    expect(r.refunds.map((x) => r.admitted.indexOf(x.id))).toEqual([2, 0]);
    expect((await r.limiter.peek('ada')).remaining).toBe(4);
  });

  it('counts only failures with skipSuccessfulRequests', async () => {
    const r = recording(await limiters.limiter({ limit: 2 }));
    const app = await serve(new ResilimitStore(r.limiter), { limit: 2, skipSuccessfulRequests: true });
    expect(await statuses(app, '/status/204', 3)).toEqual([204, 204, 204]);
    await r.settled(3);
    expect(await statuses(app, '/status/401', 3)).toEqual([401, 401, 429]);
    expect(await statuses(app, '/status/204', 1)).toEqual([429]);
    expect(r.refunds).toHaveLength(3);
  });

  it("forgets a key with the middleware's resetKey() and tells what it used with getKey()", async () => {
    const l = await limiters.limiter();
    const app = await serve(new ResilimitStore(l));
    expect(await statuses(app, '/status/200', 2)).toEqual([200, 200]);
    const info = await app.middleware.getKey('ada');
    expect(info?.totalHits).toBe(2);
    // The window is empty 60 s after the last call, a few ms ago at most (bounded by the test's own timeout).
    expect(info?.resetTime?.getTime()).toBeGreaterThan(Date.now() + WINDOW_MS - 30_000);
    expect(info?.resetTime?.getTime()).toBeLessThanOrEqual(Date.now() + WINDOW_MS);
    expect(await app.middleware.getKey('nobody')).toBeUndefined();
    expect(await statuses(app, '/status/200', 2)).toEqual([200, 429]);
    await app.middleware.resetKey('ada');
    expect(await statuses(app, '/status/200', 1)).toEqual([200]);
    expect((await l.peek('ada')).remaining).toBe(2);
  });
});

describe('ResilimitStore while Redis cannot answer', () => {
  // The breaker's deadline for a frozen Redis. The bound on a request adds a loaded machine's loopback
  // HTTP round trip and event-loop delays; a store without a deadline would hang until the test's timeout.
  const TIMEOUT_MS = 100;
  const BOUND_MS = TIMEOUT_MS + 900;

  it('answers from the local window within the deadline while Redis is frozen, and express-rate-limit still refuses past it', async () => {
    const l = await limiters.limiter({ breaker: { timeoutMs: TIMEOUT_MS } });
    await l.limit('warm'); // Redis has answered once: the freeze below is an outage, not a client never ready
    const app = await serve(new ResilimitStore(l));
    limiters.server.freeze();
    try {
      const replies = [];
      for (let i = 0; i < 4; i += 1) replies.push(await app.get('/status/200'));
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
      for (const r of replies) expect(r.ms).toBeLessThan(BOUND_MS);
      expect(replies[3]?.headers.get('retry-after')).toMatch(/^(59|60)$/);
      expect(l.stats().bySource.local).toBe(4);
      await app.middleware.resetKey('ada'); // resolves: the local tiers forgot the key, Redis could not
      expect(await statuses(app, '/status/200', 1)).toEqual([200]);
    } finally {
      limiters.server.thaw();
    }
  });

  it("answers 429 with the breaker's open period as Retry-After in fail-closed mode", async () => {
    const l = await limiters.limiter({ mode: 'fail-closed', breaker: { timeoutMs: 2_000, resetTimeoutMs: 2_200 } });
    l.forceOpen();
    const app = await serve(new ResilimitStore(l));
    const reply = await app.get('/status/200');
    expect(reply.status).toBe(429);
    expect(reply.headers.get('retry-after')).toBe('3');
    expect(l.stats().bySource['fail-closed']).toBe(1);
  });

  it('refunds failed requests from the local window at once while the breaker is open', async () => {
    const l = await limiters.limiter({ limit: 2 });
    l.forceOpen();
    const r = recording(l);
    const app = await serve(new ResilimitStore(r.limiter), { limit: 2, skipFailedRequests: true });
    expect(await statuses(app, '/status/500', 3)).toEqual([500, 500, 500]);
    // Admitted locally, never sent to Redis: given back exactly, with nothing left for Redis to remove.
    expect(await r.settled(3)).toEqual(Array(3).fill({ refunded: true, permits: 1, pending: false }));
    expect(await statuses(app, '/status/200', 3)).toEqual([200, 200, 429]);
    expect(l.stats().bySource.local).toBe(6);
  });
});

describe('ResilimitStore refuses misuse', () => {
  // Each failed on the code before issue 39: init() threw, express-rate-limit only logged it, the app
  // was built, and every request answered 500 with the error.
  const misconfigured: [string, Partial<ResilientLimiterOptions>, { [K in keyof Options]?: Options[K] | undefined }, RegExp][] = [
    [
      "a limit other than the limiter's",
      {},
      { limit: 5 },
      /Expected express-rate-limit's `limit` to be the limiter's, `3`, got `5` \(number\)/,
    ],
    ['a limit function', {}, { limit: () => 3 }, /`limit` to be the limiter's, `3`, got a function/],
    [
      "a window other than the limiter's",
      {},
      { windowMs: 1_000 },
      /Expected express-rate-limit's `windowMs` to be the limiter's, `60000`, got `1000` \(number\)/,
    ],
    [
      "express-rate-limit's defaults (no limit given)",
      {},
      { limit: undefined, windowMs: undefined },
      /`limit` to be the limiter's, `3`, got `5` \(number\) \(also express-rate-limit's default, taken when `limit` is not given\)/,
    ],
    [
      'a limiter whose limit is a function of the key',
      { limit: () => 3 },
      {},
      /Expected `limiter` to be a ResilientLimiter whose `limit` is a number/,
    ],
  ];
  it.each(misconfigured)(
    'refuses %s when the app is built: rateLimit() throws what init() threw (and express-rate-limit logged)',
    async (_, limiterOptions, options, message) => {
      const l = await limiters.limiter(limiterOptions);
      const logged: unknown[] = [];
      const refused = expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION', message: expect.stringMatching(message) });
      const build = () =>
        rateLimit({
          windowMs: WINDOW_MS,
          limit: 3,
          store: new ResilimitStore(l),
          logger: { error: (e) => logged.push(e), warn: () => undefined },
          ...(options as Partial<Options>),
        });
      expect(build).toThrow(refused);
      expect(logged).toEqual([refused]);
      expect(l.stats().decisions).toBe(0);
    },
  );

  it('fails every call with the error when init() is called outside rateLimit(), and resetKey is the method again', async () => {
    const l = await limiters.limiter();
    const store = new ResilimitStore(l);
    const refused = expect.objectContaining({
      code: 'ERR_RESILIMIT_INVALID_OPTION',
      message: expect.stringMatching(/`limit` to be the limiter's, `3`, got `4`/),
    });
    expect(() => store.init({ limit: 4, windowMs: WINDOW_MS } as Options)).toThrow(refused);
    await Promise.resolve();
    expect(store.resetKey).toBe(ResilimitStore.prototype.resetKey);
    await expect(store.increment('ada')).rejects.toThrow(refused);
    await expect(store.get('ada')).rejects.toThrow(refused);
    expect(l.stats().decisions).toBe(0);
  });

  it('refuses anything but a limiter', () => {
    for (const bad of [undefined, {}, { limit: () => undefined }]) {
      expect(() => new ResilimitStore(bad as never)).toThrow(expect.objectContaining({ code: 'ERR_RESILIMIT_INVALID_OPTION' }));
    }
  });

  it("passes the limiter's misuse errors to Express: a key over 1024 characters fails the request", async () => {
    const app = await serve(new ResilimitStore(await limiters.limiter()));
    const reply = await app.get('/status/200', 'x'.repeat(1025));
    expect(reply.status).toBe(500);
    expect(JSON.parse(reply.body)).toMatchObject({ code: 'ERR_RESILIMIT_INVALID_KEY' });
  });
});
