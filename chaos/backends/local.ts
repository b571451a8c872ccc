/**
 * The local backend: a `redis-server` child process and the Toxiproxy stand-in (src/chaos/toxiproxy) as a
 * second child process, both on OS-assigned ports of 127.0.0.1. Needs `redis-server` on PATH; no Docker.
 */
import { execFileSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { Toxiproxy } from 'toxiproxy-node-client';
import { startRedisServer, withProbe, type RedisChild } from '../../test/support/redis.ts';
import { startToxiproxyServer, type ToxiproxyServer } from '../../src/chaos/toxiproxy/spawn.ts';
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
      async freeze() {
        redis.freeze();
      },
      async thaw() {
        redis.thaw();
      },
      async killAndRestart() {
        await redis.kill();
        await redis.restart(); // resolves once the new child answers INFO with its own pid
      },
      async failSave() {
        const conn = { host: redis.host, port: redis.port };
        // The save's child sleeps per key (rdb-key-save-delay, µs) so that it is there to be killed:
        // a save ended by a signal counts as failed.
        await withProbe(conn, async (c) => {
          await c.config('SET', 'save', '3600 1', 'stop-writes-on-bgsave-error', 'yes', 'rdb-key-save-delay', '200000');
          await c.set('resilimit:chaos:save', '1');
          await c.bgsave();
        });
        for (let i = 0; ; i++) {
          const children = execFileSync('pgrep', ['-P', String(redis.pid)], { encoding: 'utf8' }).trim();
          if (children !== '') {
            for (const pid of children.split('\n')) process.kill(Number(pid), 'SIGKILL');
            break;
          }
          if (i > 100) throw new Error('the background save did not start');
          await sleep(10);
        }
        for (let i = 0; ; i++) {
          const info = await redis.info('persistence');
          if (info['rdb_bgsave_in_progress'] === '0' && info['rdb_last_bgsave_status'] === 'err') return;
          if (i > 500) throw new Error('the killed save was not reported as failed');
          await sleep(10);
        }
      },
      async allowWrites() {
        await withProbe({ host: redis.host, port: redis.port }, async (c) => {
          await c.config('SET', 'stop-writes-on-bgsave-error', 'no', 'save', '', 'rdb-key-save-delay', '0');
        });
      },
    },
    async close() {
      const results = await Promise.allSettled([redis.close(), server.stop()]);
      const failed = results.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
  };
}
