/**
 * The container backend: Redis and Toxiproxy as testcontainers on one Docker network, Toxiproxy
 * reaching Redis by its network alias (`redis:6379`). testcontainers is loaded only here, and only
 * through `await import(...)`, so the other backends never pay for it (nor crash on it).
 *
 * Exercised only where a Docker engine answers: on machines without one this file is typechecked
 * but never run (the suite falls back to the local backend, or throws with `CHAOS_STRICT=1`).
 */
import type { StartedRedisContainer } from '@testcontainers/redis';
import type { StartedToxiProxyContainer } from '@testcontainers/toxiproxy';
import type { ContainerRuntimeClient, StartedNetwork } from 'testcontainers';
import type { ChaosBackend, ProxiedRedis } from '../types.ts';
import { waitForPing } from './ping.ts';
import { removeProxyIfPresent } from './proxies.ts';
import { verifyBackend } from './verify.ts';

/** The images, pinned: the same Redis as the local backend's, and the Toxiproxy the stand-in mimics. */
export const REDIS_IMAGE = 'redis:7.0.15';
export const TOXIPROXY_IMAGE = 'ghcr.io/shopify/toxiproxy:2.12.0';
/** Redis's name on the containers' network, and the address Toxiproxy dials. */
const REDIS_ALIAS = 'redis';
const REDIS_UPSTREAM = `${REDIS_ALIAS}:6379`;
const TOXIPROXY_API_PORT = 8474;
/** Persistence off, so a restart loses the data as a killed process does; DEBUG allowed as locally. */
const REDIS_COMMAND = ['redis-server', '--save', '', '--appendonly', 'no', '--enable-debug-command', 'local'];

/** Whether a container runtime answered, and if not, testcontainers' reason. */
export type RuntimeProbe = { readonly ok: true; readonly runtime: string } | { readonly ok: false; readonly reason: string };

/** A {@link ChaosBackend} whose Redis is a container this backend controls. */
export type ContainerBackend = ChaosBackend & { readonly kind: 'container'; readonly process: NonNullable<ChaosBackend['process']> };

/**
 * Asks testcontainers for a container runtime, once. Without one it fails in a few ms with
 * "Could not find a working container runtime strategy" (not cached: call this once and keep the answer).
 */
export async function probeContainerRuntime(): Promise<RuntimeProbe> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    const { containerRuntime } = (await getContainerRuntimeClient()).info;
    return { ok: true, runtime: `${containerRuntime.operatingSystem} at ${containerRuntime.host}` };
  } catch (error) {
    return { ok: false, reason: error instanceof Error ? error.message : String(error) };
  }
}

/**
 * Starts a network, Redis (`redis:7.0.15`, alias `redis`) and Toxiproxy
 * (`ghcr.io/shopify/toxiproxy:2.12.0`), then checks the wiring (see `verifyBackend`).
 * Ryuk is off unless `TESTCONTAINERS_RYUK_DISABLED` says otherwise (it needs its own image);
 * `close()` removes what was started.
 *
 * Proxies listen on the 32 ports ToxiProxyContainer publishes (8666–8697): at most 32 proxies at once.
 * `process.freeze()`/`thaw()` pause and unpause the Redis container (the cgroup freezer: like SIGSTOP,
 * connects through Toxiproxy succeed and commands hang). `killAndRestart()` is `docker restart -t 0`
 * (SIGTERM then at once SIGKILL) through testcontainers, and resolves once Redis answers PING; the data
 * is lost as persistence is off. Docker may publish Redis on another host port after a restart:
 * `redis` is read anew on each access. Toxiproxy finds Redis by its alias, so proxies keep working.
 * @param why recorded as the backend's `why`.
 * @throws Error if a container does not start or the check fails; whatever started is removed first.
 */
export async function startContainerBackend(why: string): Promise<ContainerBackend> {
  process.env['TESTCONTAINERS_RYUK_DISABLED'] ??= 'true';
  const { Network, getContainerRuntimeClient } = await import('testcontainers');
  const { RedisContainer } = await import('@testcontainers/redis');
  const { ToxiProxyContainer } = await import('@testcontainers/toxiproxy');
  const runtime = await getContainerRuntimeClient();
  const started: Started = {};
  try {
    started.network = await new Network().start();
    started.redis = await new RedisContainer(REDIS_IMAGE)
      .withCommand(REDIS_COMMAND)
      .withNetwork(started.network)
      .withNetworkAliases(REDIS_ALIAS)
      .start();
    started.toxiproxy = await new ToxiProxyContainer(TOXIPROXY_IMAGE).withNetwork(started.network).start();
  } catch (error) {
    await stopAll(started).catch(() => {});
    throw error;
  }
  const backend = makeContainerBackend(why, runtime, started.network, started.redis, started.toxiproxy);
  try {
    await verifyBackend(backend, `Toxiproxy dials ${REDIS_UPSTREAM} on the network ${started.network.getName()}.`);
  } catch (error) {
    await backend.close().catch(() => {});
    throw error;
  }
  return backend;
}

type Started = { network?: StartedNetwork; redis?: StartedRedisContainer; toxiproxy?: StartedToxiProxyContainer };

function makeContainerBackend(
  why: string,
  runtime: ContainerRuntimeClient,
  network: StartedNetwork,
  redis: StartedRedisContainer,
  toxi: StartedToxiProxyContainer,
): ContainerBackend {
  // The dockerode handle: testcontainers itself has no pause/unpause.
  const redisContainer = runtime.container.getById(redis.getId());
  let frozen = false;
  const apiHost = toxi.getHost().includes(':') ? `[${toxi.getHost()}]` : toxi.getHost();
  return {
    kind: 'container',
    why,
    toxiproxyUrl: `http://${apiHost}:${toxi.getMappedPort(TOXIPROXY_API_PORT)}`,
    toxiproxy: toxi.client,
    get redis() {
      return { host: redis.getHost(), port: redis.getPort() };
    },
    async createRedisProxy(name: string): Promise<ProxiedRedis> {
      // ToxiProxyContainer picks a published port no proxy holds, but does not replace a proxy by name.
      await removeProxyIfPresent(toxi.client, name);
      const created = await toxi.createProxy({ name, upstream: REDIS_UPSTREAM });
      return { proxy: created.instance, host: created.host, port: created.port };
    },
    process: {
      async freeze() {
        await redisContainer.pause();
        frozen = true;
      },
      async thaw() {
        await redisContainer.unpause();
        frozen = false;
      },
      async killAndRestart() {
        // Docker refuses to stop a paused container.
        if (frozen) await redisContainer.unpause();
        frozen = false;
        await redis.restart({ timeout: 0 });
        await waitForPing(redis.getHost(), redis.getPort(), 10_000);
      },
    },
    async close() {
      if (frozen) await redisContainer.unpause().catch(() => {});
      frozen = false;
      await stopAll({ network, redis, toxiproxy: toxi });
    },
  };
}

/** Stops the containers, then the network (Docker refuses to remove a network still in use). */
async function stopAll(started: Started): Promise<void> {
  const containers = await Promise.allSettled([started.toxiproxy?.stop(), started.redis?.stop()]);
  const network = await Promise.allSettled([started.network?.stop()]);
  const failed = [...containers, ...network].find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}
