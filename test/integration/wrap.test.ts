/**
 * limiter.wrap(), wrap() and the @rateLimited decorator, on a real Redis (ResilientLimiter) and on
 * the local tier. The decorator is compiled by TypeScript itself (standard decorators, as a user's
 * build would emit them) and run.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Redis } from 'ioredis';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedisClient,
  isResilimitError,
  LocalWindow,
  rateLimited,
  RateLimitedError,
  ResilientLimiter,
  wrap,
  type LimiterDecision,
} from '../../src/index.js';
import { useRedis, waitReady, type RedisHandle } from '../support/redis.js';

let server: RedisHandle;
let redis: Redis;
const limiters: ResilientLimiter[] = [];

beforeAll(async () => {
  server = await useRedis();
  redis = createRedisClient(server.url);
  await waitReady(redis);
});
afterAll(async () => {
  await Promise.all(limiters.map((l) => l.close()));
  await redis?.quit();
  await server?.close();
});

function limiter(limit: number): ResilientLimiter {
  const l = new ResilientLimiter({ redis, limit, windowMs: 60_000, prefix: `wrap:${randomUUID()}:`, local: { instances: 1 } });
  limiters.push(l);
  return l;
}

describe('limiter.wrap()', () => {
  it('runs the function while the key is under its limit, then rejects with RateLimitedError without running it', async () => {
    const l = limiter(2);
    const ran: string[] = [];
    const search = l.wrap(
      async (userId: string, query: string) => {
        ran.push(`${userId}:${query}`);
        return query.length;
      },
      { key: (userId) => `search:${userId}` },
    );
    expect(await search('u1', 'abc')).toBe(3);
    expect(await search('u1', 'hello')).toBe(5);
    const error = await search('u1', 'late').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimitedError);
    const limited = error as RateLimitedError<LimiterDecision>;
    expect(isResilimitError(limited)).toBe(true);
    expect(limited.code).toBe('ERR_RESILIMIT_RATE_LIMITED');
    expect(limited.key).toBe('search:u1');
    expect(limited.decision).toMatchObject({ allowed: false, limit: 2, remaining: 0, source: 'redis', reason: 'decided' });
    expect(limited.retryAfterMs).toBe(limited.decision.retryAfterMs);
    expect(limited.retryAfterMs).toBeGreaterThan(59_000);
    expect(limited.message).not.toContain('u1'); // keys may be personal: not in messages
    // Another key has its own limit; the rejected call never ran.
    expect(await search('u2', 'x')).toBe(1);
    expect(ran).toEqual(['u1:abc', 'u1:hello', 'u2:x']);
  });

  it('returns onLimited(decision, ...args) instead of rejecting, and passes this, cost and id through', async () => {
    const l = limiter(3);
    const service = {
      name: 'svc',
      upload: l.wrap(
        function (this: { name: string }, user: string, size: number) {
          return `${this.name}:${user}:${size}`;
        },
        {
          key(user) {
            return `${this.name}:${user}`;
          },
          cost: (_user, size) => size,
          id: (user, size) => `${user}-${size}`,
          onLimited(decision, user) {
            return `limited ${this.name}:${user} remaining ${decision.remaining}`;
          },
        },
      ),
    };
    expect(await service.upload('a', 2)).toBe('svc:a:2');
    // The same id again is a retry: admitted, not counted twice.
    expect(await service.upload('a', 2)).toBe('svc:a:2');
    expect(await service.upload('a', 1)).toBe('svc:a:1');
    expect(await service.upload('a', 3)).toBe('limited svc:a remaining 0');
  });

  it('rejects the call, without running the function, when the key function throws or the cost is invalid', async () => {
    const l = limiter(5);
    let ran = 0;
    const f = l.wrap(() => (ran += 1), {
      key: () => {
        throw new Error('no user');
      },
    });
    await expect(f()).rejects.toThrow('no user');
    const g = l.wrap(() => (ran += 1), { key: () => 'k', cost: () => 6 });
    await expect(g()).rejects.toMatchObject({ code: 'ERR_RESILIMIT_INVALID_COST' });
    expect(ran).toBe(0);
  });

  it('checks its arguments when the wrapper is made', () => {
    const l = limiter(1);
    expect(() => l.wrap(undefined as unknown as () => void, { key: () => 'k' })).toThrow(
      /Expected `fn` to be a function to wrap, got `undefined`/,
    );
    expect(() => l.wrap(() => 1, {} as never)).toThrow(/Expected `key` to be a function, got `undefined`/);
    expect(() => l.wrap(() => 1, { key: () => 'k', onLimited: 'x' as never })).toThrow(/Expected `onLimited` to be a function, got `"x"`/);
    expect(() => l.wrap(() => 1, null as never)).toThrow(/options of wrap\(\) to be an object with a `key` function, got `null`/);
  });
});

describe('wrap() on the local tier', () => {
  it('works with a LocalWindow, whose decisions are synchronous', async () => {
    const local = new LocalWindow({ limit: 1, windowMs: 60_000, maxKeys: 100 });
    const f = wrap(local, (n: number) => n * 2, { key: () => 'k' });
    expect(await f(21)).toBe(42);
    await expect(f(1)).rejects.toBeInstanceOf(RateLimitedError);
  });
});

describe('@rateLimited', () => {
  const root = fileURLToPath(new URL('../../', import.meta.url));
  const dir = `${root}.scratch/decorator-test/`;

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('limits a method as compiled by TypeScript (standard decorators), with the instance as this', async () => {
    const source = `
      import { rateLimited } from '${pathToFileURL(`${root}src/limiter/wrap.ts`).href.replace(/\.ts$/, '.js')}';
      export function make(limiter) {
        class Mailer {
          sent = [];
          constructor(tenant) { this.tenant = tenant; }
          @rateLimited(limiter, { key(to) { return this.tenant + ':' + to; } })
          async send(to, body) { this.sent.push(to + ':' + body); return this.sent.length; }
        }
        return Mailer;
      }
    `;
    const { outputText, diagnostics } = ts.transpileModule(source, {
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, experimentalDecorators: false },
      reportDiagnostics: true,
    });
    expect(diagnostics ?? []).toEqual([]);
    expect(outputText).toContain('__esDecorate'); // TypeScript's emit of standard decorators
    // The compiled module imports the built wrap.js: point it at the one vitest compiles from src.
    mkdirSync(dir, { recursive: true });
    const file = `${dir}mailer-${randomUUID()}.mjs`;
    writeFileSync(file, outputText.replace(/from '[^']*wrap\.js'/, `from '${pathToFileURL(`${root}dist/limiter/wrap.js`).href}'`));
    const { make } = (await import(pathToFileURL(file).href)) as {
      make: (l: ResilientLimiter) => new (tenant: string) => { send(to: string, body: string): Promise<number>; sent: string[] };
    };
    const l = limiter(2);
    const Mailer = make(l);
    const acme = new Mailer('acme');
    const other = new Mailer('other');
    expect(await acme.send('bob', 'hi')).toBe(1);
    expect(await acme.send('bob', 'again')).toBe(2);
    await expect(acme.send('bob', 'third')).rejects.toMatchObject({ code: 'ERR_RESILIMIT_RATE_LIMITED', key: 'acme:bob' });
    expect(await other.send('bob', 'hi')).toBe(1); // another tenant, another key
    expect(acme.sent).toEqual(['bob:hi', 'bob:again']);
  });

  it('checks its options when applied, before any class uses it', () => {
    const l = limiter(1);
    expect(() => rateLimited(l, { key: 1 as never })).toThrow(/Expected `key` to be a function, got `1` \(number\)/);
    // (The README's decorator example is type-checked by readme.examples.test.ts.)
  });
});
