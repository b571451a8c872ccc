/**
 * The contract every client adapter keeps (src/client/port.ts), run against a real redis-server for
 * ioredis, node-redis and Valkey GLIDE: scripts by SHA and their reload on NOSCRIPT, the classes of
 * Redis's errors, readiness and its return after a restart, closing. Then the limiter on each client
 * through the core faults: Redis decides; a frozen server is answered locally within the deadline; a
 * killed one too; after a restart without the data, Redis decides again and holds the calls admitted
 * locally meanwhile (the journal's write-back).
 */
import { createHash, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { GlideClient, Logger } from '@valkey/valkey-glide';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { portOf } from '../../src/client/portOf.js';
import { closeRedisClient, createRedisClient, ResilientLimiter, type RedisClient, waitForRedis } from '../../src/index.js';
import { redisCallError } from '../../src/redis/failures.js';
import { redisKey } from '../../src/redis/redisKey.js';
import type { Script } from '../../src/redis/scripts/script.js';
import { freePort, startRedisServer, type RedisChild, withProbe } from '../support/redis.js';
import { until, whileFrozen } from '../support/wait.js';

// GLIDE logs each failed request (a server's error reply included) as a warning on stderr.
Logger.setLoggerConfig('off');

let server: RedisChild;

beforeAll(async () => {
  server = await startRedisServer();
});

afterAll(async () => {
  await server?.stop();
});

/** A client of each library to `server`, made as its docs (and ours) advise for a request path. */
const CLIENTS: Record<string, () => Promise<RedisClient>> = {
  ioredis: async () => createRedisClient({ host: server.host, port: server.port }),
  'node-redis': async () => {
    const client = createClient({
      socket: {
        host: server.host,
        port: server.port,
        connectTimeout: 1_000,
        reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 500),
      },
      disableOfflineQueue: true,
    });
    client.on('error', () => {});
    client.connect().catch(() => {});
    return client as unknown as RedisClient;
  },
  'valkey-glide': async () =>
    (await GlideClient.createClient({
      addresses: [{ host: server.host, port: server.port }],
      requestTimeout: 500,
      lazyConnect: true,
    })) as unknown as RedisClient,
};

/** A script as `loadScript` makes one, from its source. */
function script(name: string, source: string): Script {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

const echo = script('echo', 'return ARGV[1]');
const fail = script('fail', 'return redis.error_reply(ARGV[1])');
const wrongType = script('wrong-type', "redis.call('SET', KEYS[1], 'x'); return redis.call('ZADD', KEYS[1], 1, 'a')");

describe('a Valkey GLIDE client that cannot connect', () => {
  it('fails its calls as Redis unavailable, not as a reply about the request', async () => {
    const dead = await freePort();
    const client = await GlideClient.createClient({
      addresses: [{ host: '127.0.0.1', port: dead }],
      lazyConnect: true,
      requestTimeout: 500,
      advancedConfiguration: { connectionTimeout: 250 },
    });
    try {
      const error = await portOf(client)
        .ping()
        .catch((e: unknown) => e);
      // GLIDE gives its connect failure the class of a server's reply (RequestError): "Standalone connect failed - IoError: …".
      expect((error as Error).name).not.toBe('ReplyError');
      expect(redisCallError(error).code).toBe('ERR_RESILIMIT_REDIS_UNAVAILABLE');
    } finally {
      client.close();
    }
  });
});

describe.each(Object.keys(CLIENTS))('the %s adapter', (library) => {
  it('keeps the port contract: scripts and their reload, replies, errors, readiness after a restart, closing', async () => {
    const client = await CLIENTS[library]!();
    const port = portOf(client);
    try {
      expect(port.library).toBe(library);
      expect(port.isCluster).toBe(false);
      expect(await waitForRedis(client)).toBe(true);
      expect(port.ready).toBe(true);
      // The server knows no script (SCRIPT FLUSH): run() sends EVALSHA, gets NOSCRIPT, sends the source.
      await withProbe({ host: server.host, port: server.port }, (probe) => probe.script('FLUSH'));
      expect(await port.run(echo, ['k'], ['12,3'])).toBe('12,3');
      expect(await port.run(echo, ['k'], [7])).toBe('7');
      expect(await port.eval(echo, ['k'], ['x'])).toBe('x');
      const [seconds, micros] = await port.time();
      expect(Math.abs(Number(seconds) * 1000 + Number(micros) / 1000 - Date.now())).toBeLessThan(60_000);
      expect(String(await port.ping())).toBe('PONG');
      const [info] = await port.info('memory', 'stats');
      expect(info).toMatch(/^maxmemory_policy:/m);
      expect(info).toMatch(/^evicted_keys:/m);
      expect(await port.del('nothing-here')).toBe(0);

      // A server's error reply: the port's ReplyError, starting with Redis's code, classed as the rule says.
      const wrong = await port.run(wrongType, ['str'], []).catch((e: unknown) => e);
      expect((wrong as Error).name).toBe('ReplyError');
      expect((wrong as Error).message).toMatch(/^WRONGTYPE/);
      expect(redisCallError(wrong).code).toBe('ERR_RESILIMIT_REDIS_REPLY');
      const busy = await port.run(fail, [], ['BUSY Redis is busy running a script']).catch((e: unknown) => e);
      expect((busy as Error).name).toBe('ReplyError');
      expect((busy as Error).message).toMatch(/^BUSY/);
      expect(redisCallError(busy).code).toBe('ERR_RESILIMIT_REDIS_UNAVAILABLE');
      const err = await port.run(fail, [], ['ERR bad argument']).catch((e: unknown) => e);
      expect((err as Error).message).toMatch(/^ERR/);
      expect(redisCallError(err).code).toBe('ERR_RESILIMIT_REDIS_REPLY');

      // Killed: a call fails with the client's error (Redis cannot answer), never a reply error.
      let readyAgain = 0;
      const stop = port.on('ready', () => (readyAgain += 1));
      await server.kill();
      const down = await Promise.race([port.ping().catch((e: unknown) => e), sleep(2_000).then(() => 'no answer')]);
      if (down !== 'no answer') {
        expect((down as Error).name).not.toBe('ReplyError');
        expect(redisCallError(down).code).toBe('ERR_RESILIMIT_REDIS_UNAVAILABLE');
      }
      await server.restart();
      // Reconnecting takes the client's back-off (at most 1 s here) and a loaded machine's slack.
      await until(async () => String(await port.ping().catch(() => '')) === 'PONG', 10_000, 'the client answers again');
      await until(() => readyAgain > 0, 2_000, "the port's 'ready' after the restart");
      stop();
      // Closing: ended, not ready, and closeRedisClient() again is a no-op.
      await closeRedisClient(client);
      // ioredis ends the socket right after QUIT's answer (2 s: a loaded machine's slack, far above it).
      await until(() => port.ended, 2_000, 'the client ended');
      expect(port.ready).toBe(false);
      await closeRedisClient(client);
    } finally {
      await closeRedisClient(client, { timeoutMs: 0 });
    }
  });

  it('closes within its timeout against a frozen server, and the command waiting on it settles', async () => {
    const client = await CLIENTS[library]!();
    const port = portOf(client);
    expect(await waitForRedis(client)).toBe(true);
    server.freeze();
    try {
      const pending = port.ping().then(
        () => 'answered',
        () => 'rejected',
      );
      const started = performance.now();
      await closeRedisClient(client, { timeoutMs: 100 });
      // The timeout (100 ms) and a loaded machine's slack: the close never waits on the frozen server past it.
      expect(performance.now() - started).toBeLessThan(100 + 900);
      // Its connection is gone: the command sent before fails (1 s: the slack of a loaded machine).
      expect(await Promise.race([pending, sleep(1_000).then(() => 'still waiting')])).toBe('rejected');
      expect(port.ended).toBe(true);
    } finally {
      server.thaw();
      await closeRedisClient(client, { timeoutMs: 0 });
    }
  });

  it('serves the limiter through the core faults: freeze, kill, restart empty', async () => {
    const client = await CLIENTS[library]!();
    expect(await waitForRedis(client)).toBe(true);
    const prefix = `a:${randomUUID()}:`;
    const limiter = new ResilientLimiter({
      redis: client,
      prefix,
      limit: 3,
      windowMs: 60_000,
      local: { instances: 1 },
      breaker: { timeoutMs: 100, resetTimeoutMs: 200 },
    });
    const reconciled: number[] = [];
    limiter.on('reconciled', (r) => reconciled.push(r.written));
    try {
      const first = await Promise.all(Array.from({ length: 4 }, () => limiter.limit('k')));
      expect(first.map((d) => [d.allowed, d.source])).toEqual([
        [true, 'redis'],
        [true, 'redis'],
        [true, 'redis'],
        [false, 'redis'],
      ]);

      const frozen = await whileFrozen(server, () => limiter.limit('frozen'));
      expect(frozen.result.source).toBe('local');
      // The deadline (100 ms) plus a loaded machine's timer slack: the call never waits on Redis past it.
      expect(frozen.ms).toBeLessThan(100 + 400);
      await until(async () => (await limiter.limit('thawed')).source === 'redis', 10_000, 'Redis decides after the thaw');

      await server.kill();
      const local = [];
      for (let i = 0; i < 2; i++) local.push(await limiter.limit('journalled'));
      expect(local.map((d) => [d.allowed, d.source])).toEqual([
        [true, 'local'],
        [true, 'local'],
      ]);
      await server.restart();
      await until(async () => (await limiter.limit('probe')).source === 'redis', 10_000, 'Redis decides after the restart');
      // The calls admitted while Redis was dead were written back to the new, empty server.
      await until(() => reconciled.length > 0, 5_000, 'the write-back');
      const held = await limiter.peek('journalled');
      expect(held.source).toBe('redis');
      expect(held.remaining).toBe(3 - 2);
      expect(redisKey(prefix, 'journalled')).toContain(prefix);
    } finally {
      await limiter.close();
      await closeRedisClient(client);
    }
  });
});
