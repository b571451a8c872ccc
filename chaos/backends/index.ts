/**
 * Where the chaos suite and the demo get their Redis and Toxiproxy: `startChaosBackend()` picks one
 * of three backends from `CHAOS_BACKEND` and says why in `backend.why`.
 */
import type { ChaosBackend } from '../types.ts';
import { probeContainerRuntime, startContainerBackend } from './container.ts';
import { startExternalBackend } from './external.ts';
import { startLocalBackend } from './local.ts';
import { resolveBackendSettings, type Env } from './settings.ts';

/** Neither the backend asked for nor the local one it fell back to could start: there is no backend at all. */
export class NoChaosBackendError extends Error {
  override readonly name = 'NoChaosBackendError';
}

/**
 * Starts the backend `CHAOS_BACKEND` asks for, checked end to end (Toxiproxy answers `GET /version`,
 * a PING through a proxy reaches Redis) before it is returned.
 *
 * - `auto` (default): the container backend if a container runtime answers, else the local one.
 * - `container`: Redis and Toxiproxy in Docker (testcontainers).
 * - `local`: a `redis-server` child and the Toxiproxy stand-in as a child process.
 * - `external`: the user's servers at `TOXIPROXY_URL` and `REDIS_URL`.
 *
 * When `auto` ends on local, or a requested `container`/`external` backend cannot start, the local
 * backend is used instead and `why` says what happened, e.g.
 * "auto: no container runtime (Could not find a working container runtime strategy); using local".
 * With `CHAOS_STRICT=1` each of those fall-backs throws instead.
 * @param env where the variables are read; tests pass a plain object rather than mutate `process.env`.
 * @throws Error for an invalid `CHAOS_BACKEND` or `CHAOS_STRICT` (naming the variable, the values
 * allowed and the value given); under `CHAOS_STRICT=1` for any fall-back, saying why; with
 * `CHAOS_BACKEND=local`, when it cannot start. NoChaosBackendError when the local backend cannot
 * start as a fall-back either.
 * @example
 * const backend = await startChaosBackend();
 * console.log(`chaos backend: ${backend.kind} (${backend.why})`);
 * const { host, port, proxy } = await backend.createRedisProxy('redis');
 * // … faults through `proxy`, `backend.process` …
 * await backend.close();
 */
export async function startChaosBackend(env: Env = process.env): Promise<ChaosBackend> {
  const { choice, strict } = resolveBackendSettings(env);

  const fallBack = async (reason: string, cause?: unknown): Promise<ChaosBackend> => {
    if (strict) throw new Error(`CHAOS_STRICT=1 forbids falling back to the local chaos backend: ${reason}`, { cause });
    try {
      return await startLocalBackend(`${reason}; using local`);
    } catch (error) {
      throw new NoChaosBackendError(`${reason}; and the local chaos backend could not start either: ${message(error)}`, { cause: error });
    }
  };

  switch (choice) {
    case 'local':
      return startLocalBackend('local: CHAOS_BACKEND=local');
    case 'container':
      try {
        return await startContainerBackend('container: CHAOS_BACKEND=container');
      } catch (error) {
        return fallBack(`container: requested, but it could not start (${message(error)})`, error);
      }
    case 'external':
      try {
        return await startExternalBackend(
          env,
          `external: CHAOS_BACKEND=external (Toxiproxy at ${env['TOXIPROXY_URL']}, Redis at ${env['REDIS_URL']})`,
        );
      } catch (error) {
        return fallBack(`external: requested, but it could not start (${message(error)})`, error);
      }
    case 'auto': {
      const probe = await probeContainerRuntime();
      if (!probe.ok) return fallBack(`auto: no container runtime (${probe.reason})`);
      try {
        return await startContainerBackend(`auto: a container runtime answered (${probe.runtime})`);
      } catch (error) {
        return fallBack(
          `auto: a container runtime answered (${probe.runtime}), but the container backend could not start (${message(error)})`,
          error,
        );
      }
    }
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export { startContainerBackend, probeContainerRuntime, REDIS_IMAGE, TOXIPROXY_IMAGE } from './container.ts';
export type { ContainerBackend, RuntimeProbe } from './container.ts';
export { startExternalBackend } from './external.ts';
export type { ExternalBackend } from './external.ts';
export { resolveExternalSettings } from './externalSettings.ts';
export type { ExternalSettings } from './externalSettings.ts';
export { startLocalBackend } from './local.ts';
export type { LocalBackend } from './local.ts';
export { BACKEND_CHOICES, resolveBackendSettings } from './settings.ts';
export type { BackendChoice, BackendSettings, Env } from './settings.ts';
