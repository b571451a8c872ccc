/**
 * Where a chaos run gets Redis and the fault proxy: a `redis-server` child with the bundled
 * Toxiproxy-compatible server in a process of its own (local), or the user's own (external).
 */
import { ChaosUsageError } from './config.js';
import { startRedisServer } from './redisServer.js';
import { openResp, parseRedisUrl, type RespOptions } from './resp.js';
import type { ServerControl } from './scenarios.js';
import { ToxiproxyApi } from './toxiproxyClient.js';
import { startToxiproxyServer } from './toxiproxy/spawn.js';
import type { ChaosBackendKind, ChaosOptions } from './types.js';

export type Backend = {
  readonly kind: ChaosBackendKind;
  readonly detail: string;
  readonly api: ToxiproxyApi;
  /** Redis without the proxy. */
  readonly admin: RespOptions;
  /** Redis as the proxy reaches it, `host:port`. */
  readonly upstream: string;
  /** Present where the harness started the server. */
  readonly server: ServerControl | undefined;
  /** Destructive scenarios may run: the harness's own Redis, or an external one with `destructive: true`. */
  readonly destructive: boolean;
  /** Creates a proxy in front of Redis and gives where clients connect. */
  proxy(name: string): Promise<{ host: string; port: number }>;
  /** Deletes a proxy (and frees its port); never throws. */
  drop(name: string): Promise<void>;
  /** Empties Redis between scenarios (the harness's own Redis only). */
  clean(): Promise<void>;
  close(): Promise<void>;
};

/**
 * Starts the local backend, or connects to the external one and checks both answer.
 * @throws {ChaosUsageError} for an external URL that does not parse or a server that does not answer (naming the address and why).
 */
export async function startBackend(options: ChaosOptions, seed: number): Promise<Backend> {
  return options.external === undefined ? startLocal(seed) : connectExternal(options.external);
}

async function startLocal(seed: number): Promise<Backend> {
  const redis = await startRedisServer();
  let proxyServer: Awaited<ReturnType<typeof startToxiproxyServer>>;
  try {
    proxyServer = await startToxiproxyServer({ seed });
  } catch (error) {
    await redis.close();
    throw error;
  }
  const api = new ToxiproxyApi(proxyServer.url);
  const admin = { host: redis.host, port: redis.port };
  return {
    kind: 'local',
    detail: `redis-server pid ${redis.pid} on ${redis.host}:${redis.port}; the bundled Toxiproxy-compatible proxy, pid ${proxyServer.pid}`,
    api,
    admin,
    upstream: `${redis.host}:${redis.port}`,
    server: redis,
    destructive: true,
    proxy: (name) => createProxy(api, name, `${redis.host}:${redis.port}`),
    drop: (name) => api.deleteProxy(name).catch(() => undefined),
    clean: () => command(admin, 'FLUSHALL'),
    async close() {
      await Promise.allSettled([redis.close(), proxyServer.stop()]);
    },
  };
}

async function connectExternal(external: NonNullable<ChaosOptions['external']>): Promise<Backend> {
  let admin: RespOptions;
  try {
    admin = parseRedisUrl(external.redisUrl);
  } catch (error) {
    throw new ChaosUsageError(`--redis: ${(error as Error).message}`);
  }
  const api = new ToxiproxyApi(external.toxiproxyUrl);
  try {
    await api.version();
  } catch (error) {
    throw new ChaosUsageError(`--toxiproxy ${external.toxiproxyUrl}: no Toxiproxy answered: ${(error as Error).message}`);
  }
  try {
    await command(admin, 'PING');
  } catch (error) {
    throw new ChaosUsageError(`--redis ${admin.host}:${admin.port}: ${(error as Error).message}`);
  }
  const upstream = external.upstream ?? `${admin.host}:${admin.port}`;
  // A Toxiproxy in a container: proxies listen on its published ports, reached at the API's host.
  const free = [...(external.proxyPorts ?? [])];
  const taken = new Map<string, number>();
  const reachAt = new URL(external.toxiproxyUrl).hostname.replace(/^\[|\]$/g, '');
  const proxy = async (name: string): Promise<{ host: string; port: number }> => {
    if (free.length === 0 && taken.size === 0) return createProxy(api, name, upstream);
    const port = taken.get(name) ?? free.shift();
    if (port === undefined)
      throw new ChaosUsageError(`--proxy-ports: all ${taken.size} ports are in use; give at least one per instance, and one more`);
    taken.set(name, port);
    await api.createProxy({ name, listen: `${external.proxyHost ?? '0.0.0.0'}:${port}`, upstream, enabled: true });
    return { host: reachAt, port };
  };
  return {
    kind: 'external',
    detail: `your Redis at ${admin.host}:${admin.port} (upstream ${upstream}) and Toxiproxy at ${external.toxiproxyUrl}${external.destructive === true ? '; destructive scenarios allowed' : ''}`,
    api,
    admin,
    upstream,
    server: undefined,
    destructive: external.destructive === true,
    proxy,
    async drop(name) {
      await api.deleteProxy(name).catch(() => undefined);
      const port = taken.get(name);
      taken.delete(name);
      if (port !== undefined) free.push(port);
    },
    clean: async () => undefined,
    close: async () => undefined,
  };
}

async function createProxy(api: ToxiproxyApi, name: string, upstream: string): Promise<{ host: string; port: number }> {
  const { host, port } = await api.createProxy({ name, listen: '127.0.0.1:0', upstream, enabled: true });
  return { host: host === '' || host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host, port };
}

async function command(address: RespOptions, ...args: string[]): Promise<void> {
  const conn = await openResp({ ...address, timeoutMs: 2000 });
  try {
    await conn.command(...args);
  } finally {
    conn.close();
  }
}
