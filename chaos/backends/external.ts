/**
 * The external backend: a Toxiproxy and a Redis that the user runs (e.g. `docker compose up -d`),
 * named by `TOXIPROXY_URL` and `REDIS_URL`. It cannot touch the Redis process (`process` is undefined)
 * and leaves both servers running; `close()` deletes the proxies it created.
 */
import { Toxiproxy, type Proxy } from 'toxiproxy-node-client';
import { joinHostPort, splitHostPort } from '../../src/chaos/toxiproxy/address.ts';
import type { ChaosBackend, ProxiedRedis } from '../types.ts';
import { resolveExternalSettings, type ExternalSettings } from './externalSettings.ts';
import { listenAddress, removeProxyIfPresent } from './proxies.ts';
import type { Env } from './settings.ts';
import { verifyBackend } from './verify.ts';

/** A {@link ChaosBackend} over servers this process did not start. */
export type ExternalBackend = ChaosBackend & { readonly kind: 'external'; readonly process: undefined };

/**
 * Connects to the user's servers and checks the wiring (see `verifyBackend`). Proxies dial
 * `CHAOS_REDIS_UPSTREAM` (else `REDIS_URL`'s host:port) and listen on `CHAOS_PROXY_LISTEN_HOST`
 * at the first port of `CHAOS_PROXY_PORTS` no other proxy holds (or port 0 without it); clients
 * dial `TOXIPROXY_URL`'s host at that port, so a containerised Toxiproxy must publish those ports
 * under the same numbers. See `resolveExternalSettings` for the defaults.
 * @param why recorded as the backend's `why`.
 * @throws Error naming a missing or malformed variable (with the command that runs the suite), or
 * saying which check failed.
 * @example
 * // docker compose up -d
 * const backend = await startExternalBackend({ TOXIPROXY_URL: 'http://127.0.0.1:8474', REDIS_URL: 'redis://127.0.0.1:6379' }, 'external');
 */
export async function startExternalBackend(env: Env, why: string): Promise<ExternalBackend> {
  const settings = resolveExternalSettings(env);
  const backend = makeExternalBackend(why, settings);
  try {
    await verifyBackend(
      backend,
      `Proxies dial ${settings.upstream} from inside Toxiproxy (set CHAOS_REDIS_UPSTREAM if Toxiproxy sees Redis under another name) ` +
        `and listen on ${settings.listenHost}${settings.ports.length > 0 ? ` at CHAOS_PROXY_PORTS` : ''}, dialled at ${settings.proxyHost} ` +
        '(set CHAOS_PROXY_LISTEN_HOST / CHAOS_PROXY_PORTS for a Toxiproxy in a container with published ports).',
    );
  } catch (error) {
    await backend.close().catch(() => {});
    throw error;
  }
  return backend;
}

function makeExternalBackend(why: string, settings: ExternalSettings): ExternalBackend {
  const toxiproxy = new Toxiproxy(settings.toxiproxyUrl);
  const created = new Set<string>();
  return {
    kind: 'external',
    why,
    toxiproxyUrl: settings.toxiproxyUrl,
    toxiproxy,
    redis: settings.redis,
    async createRedisProxy(name: string): Promise<ProxiedRedis> {
      const others = await removeProxyIfPresent(toxiproxy, name);
      const port = pickPort(settings.ports, Object.values(others));
      const proxy = await toxiproxy.createProxy({ name, listen: joinHostPort(settings.listenHost, port), upstream: settings.upstream });
      created.add(name);
      return { proxy, host: settings.proxyHost, port: listenAddress(proxy).port };
    },
    process: undefined,
    async close() {
      // Only proxies this backend made, and only if they are still there: the servers are the user's.
      const names = [...created];
      created.clear();
      const all = await toxiproxy.getAll();
      await Promise.all(names.map((name) => all[name]?.remove()));
    },
  };
}

/** The first of `ports` no other proxy listens on; 0 when `ports` is empty. */
function pickPort(ports: readonly number[], others: readonly Proxy[]): number {
  if (ports.length === 0) return 0;
  const used = new Set(others.map((p) => portOf(p.listen)));
  const free = ports.find((port) => !used.has(port));
  if (free === undefined) {
    throw new Error(
      `All ${ports.length} ports of \`CHAOS_PROXY_PORTS\` are taken by proxies (${others.map((p) => `${p.name} on ${p.listen}`).join(', ')}): ` +
        'delete some proxies or list more ports.',
    );
  }
  return free;
}

function portOf(listen: string): number | undefined {
  try {
    return splitHostPort(listen).port;
  } catch {
    return undefined;
  }
}
