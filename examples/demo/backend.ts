/**
 * Where the demo gets its Redis and its Toxiproxy: from the chaos suite's own selection
 * (`startChaosBackend`, `CHAOS_BACKEND=auto|container|local|external`), so that the demo and the suite
 * pick the same way. The user's servers (`--redis` and `--toxiproxy`, or `REDIS_URL` with
 * `TOXIPROXY_URL`) stand for `CHAOS_BACKEND=external`.
 */
import { NoChaosBackendError, startChaosBackend } from '../../chaos/backends/index.ts';
import type { Env } from '../../chaos/backends/settings.ts';
import type { BackendKind, ChaosBackend } from '../../chaos/types.ts';
import type { ExternalServers } from './options.ts';

/** No backend could be had: the message says how to get one. */
export class NoBackendError extends Error {
  override readonly name = 'NoBackendError';
}

/** What each backend is, in the demo's words. */
const WHAT: Readonly<Record<BackendKind, string>> = {
  local: 'a redis-server child and our Toxiproxy stand-in (src/chaos/toxiproxy), both child processes on 127.0.0.1',
  container: 'Redis and the real Toxiproxy in containers',
  external: 'your Redis and Toxiproxy',
};

/**
 * Starts the backend, checked end to end (see the chaos suite's `verifyBackend`).
 * @param env read as by the chaos suite: `CHAOS_BACKEND`, `CHAOS_STRICT`, `CHAOS_PROXY_PORTS`, …
 * @throws NoBackendError when no backend could start (no container runtime, no `redis-server`);
 * Error when the backend asked for does not start (the user's servers unreachable, …).
 */
export async function startDemoBackend(external: ExternalServers | undefined, env: Env): Promise<ChaosBackend> {
  if (external !== undefined) {
    try {
      return await startChaosBackend(externalEnv(external, env));
    } catch (error) {
      // The error of the user's servers, rather than that CHAOS_STRICT forbade the fall-back the demo itself forbids.
      throw error instanceof Error && error.cause instanceof Error ? error.cause : error;
    }
  }
  try {
    return await startChaosBackend(env);
  } catch (error) {
    if (error instanceof NoChaosBackendError) throw new NoBackendError(noBackendMessage(error.message), { cause: error });
    throw error;
  }
}

/** The line the demo prints about its backend: what it is, then why it was chosen. */
export function backendLine(backend: Pick<ChaosBackend, 'kind' | 'why'>): string {
  return `${backend.kind}: ${WHAT[backend.kind]} — ${backend.why}`;
}

/**
 * The environment that makes the suite's selection take the user's servers, and only them: a run
 * against other servers than those named would mislead.
 */
function externalEnv(external: ExternalServers, env: Env): Env {
  // A new object: process.env stays as it was.
  return {
    ...env,
    CHAOS_BACKEND: 'external',
    CHAOS_STRICT: '1',
    TOXIPROXY_URL: external.toxiproxyUrl,
    REDIS_URL: external.redisUrl,
    CHAOS_REDIS_UPSTREAM: external.redisUpstream,
  };
}

function noBackendMessage(why: string): string {
  return (
    `no Redis to run the demo against: ${why.replace(/\.$/, '')}. Any one of these will do:\n` +
    '  - install Redis: apt-get install redis-server (or brew install redis), then npm run demo\n' +
    '  - start a Docker engine: the demo then runs Redis and Toxiproxy in containers\n' +
    '  - use your own servers: docker compose up -d, then\n' +
    '      CHAOS_PROXY_PORTS=26379-26390 npm run demo -- --redis redis://127.0.0.1:6379 \\\n' +
    '        --toxiproxy http://127.0.0.1:8474 --redis-upstream redis:6379'
  );
}
