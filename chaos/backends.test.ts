/**
 * The chaos backends: how `startChaosBackend()` chooses, and that each backend's proxies and process
 * faults do what the scenarios rely on. Runs the local and external backends here; the container
 * backend needs Docker and is only checked to be refused or fallen back from when none answers.
 *
 *   npx vitest run --root chaos backends
 */
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  probeContainerRuntime,
  resolveExternalSettings,
  startChaosBackend,
  startExternalBackend,
  startLocalBackend,
  type LocalBackend,
} from './backends/index.ts';
import { parsePortList } from './backends/portList.ts';
import { ping } from './backends/ping.ts';
import type { ClientOptions } from '../test/support/redis.ts';
import type { ChaosBackend } from './types.ts';

const runtime = await probeContainerRuntime();
const NO_RUNTIME = /Could not find a working container runtime strategy/;

/** Backends started by a test, closed after it even when it fails. */
const started: ChaosBackend[] = [];
const clients = new Set<Redis>();

afterEach(async () => {
  for (const client of clients) client.disconnect();
  clients.clear();
  await Promise.all(started.splice(0).map((backend) => backend.close()));
});

/** An ioredis client that fails fast: no retries, no offline queue. */
async function connect(host: string, port: number, options: ClientOptions = {}): Promise<Redis> {
  const client = new Redis({
    host,
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    connectTimeout: 2_000,
    ...options,
  });
  client.on('error', () => {});
  clients.add(client);
  await client.connect();
  return client;
}

/** A port nothing listens on (bound, then released). */
function unusedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

function envWithout(...names: string[]): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env };
  for (const name of names) delete env[name];
  return env;
}

describe('choosing a backend', () => {
  it('refuses an unknown CHAOS_BACKEND, naming the variable, the values allowed and the value given', async () => {
    await expect(startChaosBackend({ CHAOS_BACKEND: 'bogus' })).rejects.toThrow(
      'Expected `CHAOS_BACKEND` to be one of auto, container, local, external (or unset for auto), got `bogus`',
    );
  });

  it('refuses an unknown CHAOS_STRICT, naming the variable', async () => {
    await expect(startChaosBackend({ CHAOS_STRICT: 'yes' })).rejects.toThrow(
      'Expected `CHAOS_STRICT` to be 1, true, 0, false or unset, got `yes`',
    );
  });

  describe.skipIf(runtime.ok)('without a container runtime', () => {
    it('falls back from auto to local and says why', async () => {
      const backend = await startChaosBackend(envWithout('CHAOS_BACKEND', 'CHAOS_STRICT'));
      started.push(backend);
      expect(backend.kind).toBe('local');
      expect(backend.why).toBe('auto: no container runtime (Could not find a working container runtime strategy); using local');
      expect(backend.process).toBeDefined();
    }, 20_000);

    it('throws instead of falling back from auto under CHAOS_STRICT=1, saying why', async () => {
      const env = { ...envWithout('CHAOS_BACKEND'), CHAOS_STRICT: '1' };
      await expect(startChaosBackend(env)).rejects.toThrow(
        'CHAOS_STRICT=1 forbids falling back to the local chaos backend: auto: no container runtime (Could not find a working container runtime strategy)',
      );
    });

    it('throws when CHAOS_BACKEND=container cannot start under CHAOS_STRICT=1', async () => {
      const env = { ...process.env, CHAOS_BACKEND: 'container', CHAOS_STRICT: '1' };
      const error = await startChaosBackend(env).then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(error?.message).toMatch(
        /^CHAOS_STRICT=1 forbids falling back to the local chaos backend: container: requested, but it could not start \(/,
      );
      expect(error?.message).toMatch(NO_RUNTIME);
    });
  });

  it('says which variables the external backend misses and how to run it', async () => {
    await expect(startExternalBackend({}, 'test')).rejects.toThrow(
      'The external chaos backend needs `TOXIPROXY_URL` and `REDIS_URL`, which are not set. ' +
        'Start the servers and point the suite at them: `docker compose up -d`, then ' +
        '`CHAOS_BACKEND=external TOXIPROXY_URL=http://127.0.0.1:8474 REDIS_URL=redis://127.0.0.1:6379 ' +
        'CHAOS_REDIS_UPSTREAM=redis:6379 CHAOS_PROXY_PORTS=26379-26390 npm run chaos`.',
    );
    await expect(startExternalBackend({ REDIS_URL: 'redis://127.0.0.1:6379' }, 'test')).rejects.toThrow(
      /^The external chaos backend needs `TOXIPROXY_URL`, which is not set\. .*docker compose up -d/,
    );
  });

  it('throws for a requested external backend without its variables under CHAOS_STRICT=1', async () => {
    await expect(startChaosBackend({ CHAOS_BACKEND: 'external', CHAOS_STRICT: '1' })).rejects.toThrow(
      /^CHAOS_STRICT=1 forbids .*: external: requested, but it could not start \(The external chaos backend needs `TOXIPROXY_URL` and `REDIS_URL`/,
    );
  });
});

describe('the external settings', () => {
  it('reads CHAOS_PROXY_PORTS as a list and ranges, in order, without duplicates', () => {
    expect(parsePortList('26379-26381, 26400,26380')).toEqual([26379, 26380, 26381, 26400]);
    expect(() => parsePortList('26390-26379')).toThrow('but the range `26390-26379` runs backwards, got `26390-26379`');
    expect(() => parsePortList('6379,redis')).toThrow('Expected `CHAOS_PROXY_PORTS` to be ports from 1 to 65535');
    expect(() => parsePortList('0-3')).toThrow('out of range');
  });

  it('listens on 127.0.0.1 for a loopback Toxiproxy, else on 0.0.0.0, and dials REDIS_URL unless told otherwise', () => {
    const local = resolveExternalSettings({ TOXIPROXY_URL: 'http://127.0.0.1:8474/', REDIS_URL: 'redis://127.0.0.1:6379' });
    expect(local).toEqual({
      toxiproxyUrl: 'http://127.0.0.1:8474',
      proxyHost: '127.0.0.1',
      redis: { host: '127.0.0.1', port: 6379 },
      upstream: '127.0.0.1:6379',
      listenHost: '127.0.0.1',
      ports: [],
    });
    const remote = resolveExternalSettings({
      TOXIPROXY_URL: 'http://toxiproxy:8474',
      REDIS_URL: 'redis://redis',
      CHAOS_REDIS_UPSTREAM: 'redis:6379',
    });
    expect(remote).toMatchObject({
      proxyHost: 'toxiproxy',
      upstream: 'redis:6379',
      listenHost: '0.0.0.0',
      redis: { host: 'redis', port: 6379 },
    });
    // Published ports of a container reach only its own addresses, never its 127.0.0.1.
    const published = resolveExternalSettings({
      TOXIPROXY_URL: 'http://localhost:8474',
      REDIS_URL: 'redis://localhost:6379',
      CHAOS_PROXY_PORTS: '26379-26380',
    });
    expect(published).toMatchObject({ listenHost: '0.0.0.0', ports: [26379, 26380] });
  });

  it('refuses a REDIS_URL with credentials, and an upstream without a port', () => {
    expect(() => resolveExternalSettings({ TOXIPROXY_URL: 'http://127.0.0.1:8474', REDIS_URL: 'redis://:secret@127.0.0.1:6379' })).toThrow(
      'Expected `REDIS_URL` to be redis://host:port without credentials or a database',
    );
    expect(() =>
      resolveExternalSettings({ TOXIPROXY_URL: 'http://127.0.0.1:8474', REDIS_URL: 'redis://127.0.0.1', CHAOS_REDIS_UPSTREAM: 'redis' }),
    ).toThrow('Expected `CHAOS_REDIS_UPSTREAM` to be host:port with a port (e.g. redis:6379), got `redis`');
  });
});

describe('the local backend', () => {
  let local: LocalBackend;

  beforeAll(async () => {
    local = await startLocalBackend('test');
  }, 30_000);

  afterAll(async () => {
    await local?.close();
  });

  it("reaches the backend's Redis through a proxy", async () => {
    const { host, port, proxy } = await local.createRedisProxy('reach');
    expect(proxy.upstream).toBe(`127.0.0.1:${local.redis.port}`);
    expect(port).not.toBe(local.redis.port);
    const proxied = await connect(host, port);
    expect(await proxied.ping()).toBe('PONG');
    await proxied.set('through-proxy', 'yes');
    const direct = await connect(local.redis.host, local.redis.port);
    expect(await direct.get('through-proxy')).toBe('yes');
  });

  it('replaces a proxy of the same name', async () => {
    const first = await local.createRedisProxy('twice');
    const second = await local.createRedisProxy('twice');
    const all = await local.toxiproxy.getAll();
    expect(all['twice']?.listen).toBe(second.proxy.listen);
    await expect(ping(first.host, first.port, 500)).rejects.toThrow();
    await ping(second.host, second.port);
  });

  it('refuses new connections while the proxy is disabled, and serves them again once re-enabled', async () => {
    const { host, port, proxy } = await local.createRedisProxy('toggle');
    await ping(host, port);
    await proxy.update({ enabled: false, listen: proxy.listen, upstream: proxy.upstream });
    await expect(ping(host, port, 500)).rejects.toThrow();
    await proxy.update({ enabled: true, listen: proxy.listen, upstream: proxy.upstream });
    await ping(host, port);
  });

  it('makes a command time out while Redis is frozen, and answers again once thawed', async () => {
    const { host, port } = await local.createRedisProxy('freeze');
    const client = await connect(host, port, { commandTimeout: 200 });
    expect(await client.ping()).toBe('PONG');
    await local.process.freeze();
    try {
      const startedAt = performance.now();
      await expect(client.get('frozen')).rejects.toThrow('Command timed out');
      const elapsed = performance.now() - startedAt;
      expect(elapsed).toBeGreaterThanOrEqual(190);
      expect(elapsed).toBeLessThan(2_000);
    } finally {
      await local.process.thaw();
    }
    expect(await client.ping()).toBe('PONG');
  });

  it('loses the data on killAndRestart, and the proxy reaches the restarted Redis', async () => {
    const { host, port } = await local.createRedisProxy('restart');
    const before = await connect(local.redis.host, local.redis.port);
    await before.set('survives', 'no');
    expect(await before.get('survives')).toBe('no');
    await local.process.killAndRestart();
    const direct = await connect(local.redis.host, local.redis.port);
    expect(await direct.get('survives')).toBeNull();
    const proxied = await connect(host, port);
    expect(await proxied.ping()).toBe('PONG');
    expect(await proxied.get('survives')).toBeNull();
  }, 20_000);

  describe('seen as an external backend', () => {
    const externalEnv = (extra: Record<string, string> = {}): Record<string, string> => ({
      TOXIPROXY_URL: local.toxiproxyUrl,
      REDIS_URL: `redis://127.0.0.1:${local.redis.port}`,
      ...extra,
    });

    it('works through CHAOS_BACKEND=external, without process faults, and deletes its proxies on close', async () => {
      const backend = await startChaosBackend({ CHAOS_BACKEND: 'external', CHAOS_STRICT: '1', ...externalEnv() });
      expect(backend.kind).toBe('external');
      expect(backend.process).toBeUndefined();
      expect(backend.toxiproxyUrl).toBe(local.toxiproxyUrl);
      expect(backend.redis).toEqual({ host: '127.0.0.1', port: local.redis.port });
      const { host, port, proxy } = await backend.createRedisProxy('external-reach');
      expect(host).toBe('127.0.0.1');
      expect(proxy.listen).toMatch(/^127\.0\.0\.1:\d+$/);
      const client = await connect(host, port);
      expect(await client.ping()).toBe('PONG');
      await backend.close();
      expect(Object.keys(await local.toxiproxy.getAll())).not.toContain('external-reach');
    });

    it('listens on the ports of CHAOS_PROXY_PORTS, and says when they are all taken', async () => {
      const proxyPort = await unusedPort();
      const backend = await startExternalBackend(externalEnv({ CHAOS_PROXY_PORTS: String(proxyPort) }), 'test');
      started.push(backend);
      const { host, port, proxy } = await backend.createRedisProxy('external-fixed');
      expect(port).toBe(proxyPort);
      expect(proxy.listen).toMatch(new RegExp(`:${proxyPort}$`));
      await ping(host, port);
      await expect(backend.createRedisProxy('external-second')).rejects.toThrow(
        /^All 1 ports of `CHAOS_PROXY_PORTS` are taken by proxies \(external-fixed on .*\): delete some proxies or list more ports\.$/,
      );
    });

    it('fails early, saying so, when proxies cannot reach Redis', async () => {
      const nowhere = await unusedPort();
      await expect(startExternalBackend(externalEnv({ CHAOS_REDIS_UPSTREAM: `127.0.0.1:${nowhere}` }), 'test')).rejects.toThrow(
        new RegExp(
          `^The external chaos backend is mis-wired: a PING through the proxy chaos-check-\\d+ .*dials 127\\.0\\.0\\.1:${nowhere}\\) did not reach Redis`,
        ),
      );
      expect(Object.keys(await local.toxiproxy.getAll()).filter((name) => name.startsWith('chaos-check-'))).toEqual([]);
    });

    it('fails early, saying so, when Toxiproxy does not answer', async () => {
      const nowhere = await unusedPort();
      await expect(startExternalBackend(externalEnv({ TOXIPROXY_URL: `http://127.0.0.1:${nowhere}` }), 'test')).rejects.toThrow(
        `The external chaos backend is mis-wired: Toxiproxy at http://127.0.0.1:${nowhere} did not answer GET /version`,
      );
    });
  });
});
