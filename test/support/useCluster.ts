/**
 * A test file's Redis Cluster (or a describe's): started in `beforeAll` with `startRedisCluster()`,
 * with the clients the file asks for made and ready, and closed in `afterAll` (its clients with it;
 * `close()` checks that every redis-server it started has exited). Call it at the top of a file or of
 * a describe (it registers the vitest hooks), as `useLimiters` does for one server.
 *
 * What it returns is the cluster itself (a `RedisCluster` whose members reach the one started in
 * `beforeAll`), plus the clients made for the file.
 */
import { once } from 'node:events';
import type { Cluster, ClusterOptions } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { RedisWindow } from '../../src/index.js';
import { redisKey } from '../../src/redis/redisKey.js';
import { startRedisCluster, type ClusterHarnessOptions, type RedisCluster } from './cluster.js';

/** A Cluster client as the README configures it: no offline queue, no retry per request. */
export const README_CLUSTER_CLIENT: ClusterOptions = { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } };

export type UseClusterOptions = ClusterHarnessOptions & {
  /** Clients made with `cluster.client(clientOptions)` once the cluster formed, each ready before the tests. @default 0 */
  clients?: number;
  /** The options of those clients. @default README_CLUSTER_CLIENT */
  clientOptions?: ClusterOptions;
  /**
   * Runs the limiter's script once on every master (a `RedisWindow` call on a key of each, through the
   * first client) before the tests: a test that counts script calls then sees no NOSCRIPT + EVAL.
   * @default false
   */
  warmScript?: boolean;
  /** `beforeAll`'s timeout, ms. @default the project's hookTimeout */
  startTimeoutMs?: number;
};

export type ClusterFixture = RedisCluster & {
  /** The clients made for the file (`options.clients` of them), ready. */
  readonly clients: readonly Cluster[];
  /** The first of them. */
  readonly redis: Cluster;
};

/** Registers the hooks and returns the cluster (usable once `beforeAll` ran). */
export function useCluster(options: UseClusterOptions = {}): ClusterFixture {
  const { clients: count = 0, clientOptions = README_CLUSTER_CLIENT, warmScript = false, startTimeoutMs, ...harness } = options;
  let cluster: RedisCluster | undefined;
  const clients: Cluster[] = [];
  beforeAll(async () => {
    cluster = await startRedisCluster(harness);
    for (let i = 0; i < count; i++) clients.push(cluster.client({ ...clientOptions }));
    await Promise.all(clients.map((c) => once(c, 'ready')));
    if (warmScript) {
      const warm = new RedisWindow({ redis: fixture.redis, prefix: 'warm:', limit: 1, windowMs: 1 });
      await Promise.all(cluster.keysOnEveryMaster(1, (k) => redisKey('warm:', k)).map((k) => warm.limit(k)));
    }
  }, startTimeoutMs);
  afterAll(async () => {
    await cluster?.close(); // disconnects every client it made
  });
  const started = (): RedisCluster => {
    if (cluster === undefined) throw new Error('useCluster: the cluster starts in beforeAll');
    return cluster;
  };
  const fixture: ClusterFixture = {
    get nodes() {
      return started().nodes;
    },
    get nodeIds() {
      return started().nodeIds;
    },
    get clients() {
      started();
      return clients;
    },
    get redis() {
      started();
      const first = clients[0];
      if (first === undefined) throw new Error('useCluster: no client asked for (options.clients)');
      return first;
    },
    client: (clientOptions) => started().client(clientOptions),
    nodeOf: (key) => started().nodeOf(key),
    keysOnEveryMaster: (perMaster, toRedisKey, keyOptions) => started().keysOnEveryMaster(perMaster, toRedisKey, keyOptions),
    scriptCalls: (index) => started().scriptCalls(index),
    state: (index) => started().state(index),
    waitOk: (indexes, timeoutMs) => started().waitOk(indexes, timeoutMs),
    restart: (index) => started().restart(index),
    close: () => started().close(),
  };
  return fixture;
}
