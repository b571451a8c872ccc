// Run by test/integration/oldNode.test.ts under an old Node (no type stripping there: plain JS).
// Imports every entry of the built package by name, as a user does, calls each function or
// constructor a user calls first with the arguments of a quick start, and prints one line of JSON:
// for each call, the code and message of what it threw or rejected with ("none" when it did not
// fail within a second). It exits then: what a call started on success is not closed.
import { Redis } from 'ioredis';

const client = new Redis({ lazyConnect: true, enableOfflineQueue: false });
const limiterLike = { limit: async () => ({}), refund: async () => ({}), windowMs: 60_000, on() {}, off() {} };

const calls = {
  resilimit: {
    waitForRedis: (m) => m.waitForRedis(client, { timeoutMs: 100 }),
    createRedisClient: (m) => m.createRedisClient('redis://127.0.0.1:6379'),
    closeRedisClient: (m) => m.closeRedisClient(client),
    ResilientLimiter: (m) => new m.ResilientLimiter({ redis: client, limit: 10, windowMs: 60_000 }),
    ConcurrencyLimiter: (m) => new m.ConcurrencyLimiter({ redis: client, max: 10 }),
    Budget: (m) => new m.Budget(limiterLike),
    LocalWindow: (m) => new m.LocalWindow({ limit: 10, windowMs: 60_000 }),
    RedisWindow: (m) => new m.RedisWindow({ redis: client, limit: 10, windowMs: 60_000 }),
    adaptiveLimit: (m) => m.adaptiveLimit({ min: 1, max: 10, signal: () => 0 }),
    wrap: (m) => m.wrap(limiterLike, async () => 1, { key: () => 'k' }),
    rateLimited: (m) => m.rateLimited(limiterLike, { key: () => 'k' }),
  },
  'resilimit/http': {
    rateLimit: (m) => m.rateLimit(limiterLike),
    rateLimitHook: (m) => m.rateLimitHook(limiterLike),
    concurrencyLimit: (m) => m.concurrencyLimit(limiterLike),
    concurrencyLimitHook: (m) => m.concurrencyLimitHook(limiterLike),
  },
  'resilimit/hono': { rateLimit: (m) => m.rateLimit(limiterLike) },
  'resilimit/koa': { rateLimit: (m) => m.rateLimit(limiterLike) },
  'resilimit/metrics': {
    instrumentLimiter: (m) => m.instrumentLimiter(limiterLike),
    instrumentConcurrencyLimiter: (m) => m.instrumentConcurrencyLimiter(limiterLike),
  },
  'resilimit/express-rate-limit': { ResilimitStore: (m) => new m.ResilimitStore(limiterLike) },
  'resilimit/nestjs': { ResilimitThrottlerStorage: (m) => new m.ResilimitThrottlerStorage({ limiters: {} }) },
  'resilimit/chaos': {
    runChaos: (m) => m.runChaos({ config: './chaos.config.mjs' }),
    runDoctor: (m) => m.runDoctor({ redisUrl: 'redis://127.0.0.1:6379' }),
    loadChaosConfig: (m) => m.loadChaosConfig('./chaos.config.mjs'),
  },
};

const PENDING = Symbol('pending');
const results = {};
for (const [entry, fns] of Object.entries(calls)) {
  const m = await import(entry);
  for (const [name, call] of Object.entries(fns)) {
    let outcome = 'none';
    try {
      const settled = await Promise.race([Promise.resolve().then(() => call(m)), new Promise((r) => setTimeout(r, 1000, PENDING))]);
      if (settled === PENDING) outcome = 'pending';
    } catch (error) {
      outcome = `${error?.code ?? error?.name}: ${error?.message}`;
    }
    results[`${entry} ${name}`] = outcome;
  }
}
console.log(JSON.stringify(results));
process.exit(0);
