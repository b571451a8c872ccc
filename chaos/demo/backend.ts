/**
 * Where the demo gets its Redis and its Toxiproxy, and why: the user's own servers when given, else a
 * `redis-server` child with our Toxiproxy stand-in (the chaos suite's `local` backend), else Redis
 * and the real Toxiproxy in containers, else a clear refusal.
 */
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { probeContainerRuntime, startContainerBackend, startExternalBackend, startLocalBackend } from '../backends/index.ts';
import type { Env } from '../backends/settings.ts';
import type { ChaosBackend } from '../types.ts';
import type { ExternalServers } from './options.ts';

/** No backend could be had: the message says how to get one. */
export class NoBackendError extends Error {
  override readonly name = 'NoBackendError';
}

/**
 * Starts the backend, checked end to end (see the chaos suite's `verifyBackend`).
 * @param env read for `PATH`, `CHAOS_PROXY_PORTS` and `CHAOS_PROXY_LISTEN_HOST` only.
 * @throws NoBackendError when there is neither `redis-server` on PATH nor a container runtime;
 * Error when the chosen backend does not start (the user's servers unreachable, …).
 */
export async function startDemoBackend(external: ExternalServers | undefined, env: Env): Promise<ChaosBackend> {
  if (external !== undefined) {
    // A plain object: the backend reads its settings from it, and process.env stays as it was.
    const settings: Env = {
      TOXIPROXY_URL: external.toxiproxyUrl,
      REDIS_URL: external.redisUrl,
      CHAOS_REDIS_UPSTREAM: external.redisUpstream,
      CHAOS_PROXY_PORTS: env['CHAOS_PROXY_PORTS'],
      CHAOS_PROXY_LISTEN_HOST: env['CHAOS_PROXY_LISTEN_HOST'],
    };
    const named = external.from === 'flags' ? '--redis and --toxiproxy' : 'REDIS_URL and TOXIPROXY_URL';
    return startExternalBackend(
      settings,
      `external: your servers (${named}): Redis at ${external.redisUrl}, Toxiproxy at ${external.toxiproxyUrl}, ` +
        `dialling Redis at ${external.redisUpstream}`,
    );
  }
  const redisServer = findOnPath('redis-server', env['PATH'] ?? '');
  if (redisServer !== undefined) {
    return startLocalBackend(`local: redis-server found at ${redisServer}; our Toxiproxy stand-in (chaos/toxiproxy), both child processes on 127.0.0.1`);
  }
  const probe = await probeContainerRuntime();
  if (probe.ok) {
    return startContainerBackend(`container: no redis-server on PATH, but a container runtime answered (${probe.runtime})`);
  }
  throw new NoBackendError(
    'no Redis to run the demo against: redis-server is not on PATH and no container runtime answered ' +
      `(${probe.reason}). Any one of these will do:\n` +
      '  - install Redis: apt-get install redis-server (or brew install redis), then npm run demo\n' +
      '  - start a Docker engine: the demo then runs Redis and Toxiproxy in containers\n' +
      '  - use your own servers: docker compose up -d, then\n' +
      '      CHAOS_PROXY_PORTS=26379-26390 npm run demo -- --redis redis://127.0.0.1:6379 \\\n' +
      '        --toxiproxy http://127.0.0.1:8474 --redis-upstream redis:6379',
  );
}

/** The first executable `name` on `path`, or undefined. */
function findOnPath(name: string, path: string): string | undefined {
  for (const dir of path.split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch { /* not here */ }
  }
  return undefined;
}
