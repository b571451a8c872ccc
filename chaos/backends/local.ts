/**
 * The local backend: a `redis-server` child process and the Toxiproxy stand-in (chaos/toxiproxy) as a
 * second child process, both on OS-assigned ports of 127.0.0.1. Needs `redis-server` on PATH; no Docker.
 */
import { Toxiproxy } from 'toxiproxy-node-client';
import { startRedisServer, type RedisChild } from '../../test/support/redis.ts';
import { startToxiproxyServer, type ToxiproxyServer } from '../toxiproxy/spawn.ts';
import type { ChaosBackend, ProxiedRedis } from '../types.ts';
import { listenAddress, replaceProxy } from './proxies.ts';
import { verifyBackend } from './verify.ts';

/** A {@link ChaosBackend} whose Redis is a child process this backend controls. */
export type LocalBackend = ChaosBackend & { readonly kind: 'local'; readonly process: NonNullable<ChaosBackend['process']> };

/**
 * Starts Redis and the Toxiproxy stand-in, then checks the wiring (see `verifyBackend`).
 * `process.freeze()` is SIGSTOP, `thaw()` SIGCONT, `killAndRestart()` SIGKILL and a new
 * `redis-server` on the same port (empty: persistence is off). Proxies listen on `127.0.0.1:0`.
 * @param why recorded as the backend's `why`.
 * @throws Error if either server does not start or the check fails; whatever started is stopped first.
 * @example
 * const backend = await startLocalBackend('local: CHAOS_BACKEND=local');
 * const { host, port, proxy } = await backend.createRedisProxy('redis');
 * await backend.close();
 */
export async function startLocalBackend(why: string): Promise<LocalBackend> {
  const redis = await startRedisServer();
  let server: ToxiproxyServer;
  try {
    server = await startToxiproxyServer();
  } catch (error) {
    await redis.close();
    throw error;
  }
  const backend = makeLocalBackend(why, redis, server);
  try {
    await verifyBackend(backend, `Redis: pid ${redis.pid} on port ${redis.port}; Toxiproxy stand-in: pid ${server.pid}.`);
  } catch (error) {
    await backend.close();
    throw error;
  }
  return backend;
}

function makeLocalBackend(why: string, redis: RedisChild, server: ToxiproxyServer): LocalBackend {
  const toxiproxy = new Toxiproxy(server.url);
  return {
    kind: 'local',
    why,
    toxiproxyUrl: server.url,
    toxiproxy,
    redis: { host: redis.host, port: redis.port },
    async createRedisProxy(name: string): Promise<ProxiedRedis> {
      const proxy = await replaceProxy(toxiproxy, { name, listen: '127.0.0.1:0', upstream: `${redis.host}:${redis.port}` });
      return { proxy, ...listenAddress(proxy) };
    },
    process: {
      async freeze() { redis.freeze(); },
      async thaw() { redis.thaw(); },
      async killAndRestart() {
        await redis.kill();
        await redis.restart(); // resolves once the new child answers INFO with its own pid
      },
    },
    async close() {
      const results = await Promise.allSettled([redis.close(), server.stop()]);
      const failed = results.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
  };
}
