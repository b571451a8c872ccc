/**
 * A real Redis Cluster for tests: `redis-server` masters started in cluster mode as child processes
 * (each on a free port, identity checked by the harness through `process_id`), joined with
 * `redis-cli --cluster create`, without replicas. Never a mock.
 *
 * Each master keeps its `nodes.conf` in its own data directory, which `restart()` keeps: a master
 * killed and restarted comes back with the same node id and the same slots (but empty: persistence
 * is off), as a rebooted master of a real cluster does.
 */
import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import calculateSlot from 'cluster-key-slot';
import { Cluster, type ClusterOptions, type Redis } from 'ioredis';
import { assertExited, startRedisServer, withProbe, type RedisChild } from './redis.js';

const run = promisify(execFile);

export type ClusterHarnessOptions = {
  /** Masters to start. @default 3 */
  masters?: number;
  /** `cluster-node-timeout`: how long a master may be unreachable before it is marked failing. @default 2000 */
  nodeTimeoutMs?: number;
  /**
   * `cluster-require-full-coverage`: when `true` (Redis's default), every master refuses every key
   * (`CLUSTERDOWN`) once one slot has no master; when `false`, the others keep serving their slots.
   * @default true
   */
  requireFullCoverage?: boolean;
  /**
   * Replicas per master (started after the masters, `nodes[masters…]`): a master killed is replaced by
   * its replica once the others mark it failing. @default 0
   */
  replicas?: number;
};

export type RedisCluster = {
  readonly nodes: readonly RedisChild[];
  /** `CLUSTER MYID` of each master, in `nodes` order, read once the cluster formed. */
  readonly nodeIds: readonly string[];
  /** A new ioredis Cluster client (caller's options win), with an 'error' listener; closed by close(). */
  client(options?: ClusterOptions): Cluster;
  /** Index in `nodes` of the master that serves `redisKey`'s hash slot (slots never move in these tests). */
  nodeOf(redisKey: string): number;
  /**
   * `perMaster` user keys on each master, each in a slot of its own and none in `avoidSlots`:
   * `${stem}0`, `${stem}1`, … kept while their master needs keys. `toRedisKey` maps a user key to its
   * Redis key (the limiter's `<prefix>{<key>}`).
   */
  keysOnEveryMaster(
    perMaster: number,
    toRedisKey: (key: string) => string,
    options?: { stem?: string; avoidSlots?: ReadonlySet<number> },
  ): string[];
  /** Script calls (`EVALSHA` + `EVAL`) that master `index` has run since it started (`INFO commandstats`). */
  scriptCalls(index: number): Promise<number>;
  /** `cluster_state` of master `index` as it sees the cluster (`'ok'` or `'fail'`), or `'down'` if it does not answer. */
  state(index: number): Promise<string>;
  /** Polls until every listed master reports `cluster_state:ok`; resolves with the time it took, ms. */
  waitOk(indexes?: readonly number[], timeoutMs?: number): Promise<number>;
  /**
   * Restarts master `index` on its port and data directory (so with its `nodes.conf`), checks it is
   * our new process and that it came back as the same node.
   */
  restart(index: number): Promise<void>;
  close(): Promise<void>;
};

export async function startRedisCluster(options: ClusterHarnessOptions = {}): Promise<RedisCluster> {
  const { masters = 3, nodeTimeoutMs = 2000, requireFullCoverage = true, replicas = 0 } = options;
  const nodes: RedisChild[] = [];
  const clients = new Set<Cluster>();
  const close = async (): Promise<void> => {
    for (const c of clients) c.disconnect();
    clients.clear();
    const pids = nodes.map((n) => n.pid);
    await Promise.all(nodes.map((n) => n.close()));
    // No orphan: every process started (and restarted) is gone; killed ones were awaited already.
    assertExited(pids);
  };
  const nodeIds: string[] = [];
  /** Node index per slot. */
  const owners = new Int16Array(16384).fill(-1);
  try {
    for (let i = 0; i < masters * (1 + replicas); i++) {
      nodes.push(
        await startRedisServer({
          args: [
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            'nodes.conf',
            '--cluster-node-timeout',
            String(nodeTimeoutMs),
            '--cluster-require-full-coverage',
            requireFullCoverage ? 'yes' : 'no',
          ],
        }),
      );
    }
    await run('redis-cli', [
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ]);
    const deadline = Date.now() + 10_000;
    for (const node of nodes) {
      while ((await node.info('cluster'))['cluster_enabled'] !== '1') await sleep(50);
      await probe(node, async (c) => {
        while (!/cluster_state:ok/.test(await c.cluster('INFO'))) {
          if (Date.now() > deadline) throw new Error(`cluster did not reach state ok: ${await c.cluster('INFO')}`);
          await sleep(50);
        }
        nodeIds.push(await c.cluster('MYID'));
      });
    }
    const slots = (await probe(nodes[0] as RedisChild, (c) => c.cluster('SLOTS'))) as unknown as [
      number,
      number,
      [string, number, string],
    ][];
    for (const [from, to, [, port, id]] of slots) {
      const index = nodes.findIndex((n) => n.port === port);
      if (index < 0 || nodeIds[index] !== id) throw new Error(`CLUSTER SLOTS names an unknown master ${id} on port ${port}`);
      owners.fill(index, from, to + 1);
    }
    if (owners.includes(-1)) throw new Error('some slots have no master after cluster create');
    // Replicas in sync with their masters before any test writes: a failover then loses only what was
    // written after (replication is asynchronous).
    for (const node of nodes) {
      while ((await node.info('replication'))['role'] === 'slave' && (await node.info('replication'))['master_link_status'] !== 'up') {
        if (Date.now() > deadline) throw new Error(`replica on port ${node.port} did not sync with its master`);
        await sleep(50);
      }
    }
  } catch (error) {
    await close();
    throw error;
  }
  const state = async (index: number): Promise<string> => {
    try {
      const info = await probe(nodes[index] as RedisChild, (c) => c.cluster('INFO'));
      return /cluster_state:(\w+)/.exec(info)?.[1] ?? 'unknown';
    } catch {
      return 'down';
    }
  };
  return {
    nodes,
    nodeIds,
    client(clientOptions = {}) {
      const c = new Cluster(
        nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
        clientOptions as ConstructorParameters<typeof Cluster>[1],
      );
      c.on('error', () => {});
      clients.add(c);
      return c;
    },
    nodeOf: (redisKey) => owners[calculateSlot(redisKey)] as number,
    keysOnEveryMaster(perMaster, toRedisKey, { stem = 'k', avoidSlots = new Set<number>() } = {}) {
      const counts = nodes.map(() => 0);
      const slots = new Set(avoidSlots);
      const keys: string[] = [];
      for (let i = 0; keys.length < perMaster * masters; i++) {
        const key = `${stem}${i}`;
        const slot = calculateSlot(toRedisKey(key));
        const node = owners[slot] as number;
        if ((counts[node] as number) < perMaster && !slots.has(slot)) {
          counts[node] = (counts[node] as number) + 1;
          slots.add(slot);
          keys.push(key);
        }
      }
      return keys;
    },
    async scriptCalls(index) {
      const stats = await (nodes[index] as RedisChild).info('commandstats');
      const calls = (name: string): number => Number(/calls=(\d+)/.exec(stats[`cmdstat_${name}`] ?? '')?.[1] ?? 0);
      return calls('evalsha') + calls('eval');
    },
    state,
    async waitOk(indexes = nodes.map((_, i) => i), timeoutMs = 15_000) {
      const started = performance.now();
      for (;;) {
        const states = await Promise.all(indexes.map(state));
        if (states.every((s) => s === 'ok')) return performance.now() - started;
        if (performance.now() - started > timeoutMs) throw new Error(`cluster not ok after ${timeoutMs} ms: ${states.join(', ')}`);
        await sleep(20);
      }
    },
    async restart(index) {
      const node = nodes[index] as RedisChild;
      await node.restart(); // checks that the port is served by our new child (process_id)
      const id = await probe(node, (c) => c.cluster('MYID'));
      if (id !== nodeIds[index]) throw new Error(`master ${index} came back as node ${id}, not ${nodeIds[index]}`);
    },
    close,
  };
}

/** Runs `fn` with a one-shot client to one master that never retries or queues. */
function probe<T>(node: RedisChild, fn: (c: Redis) => Promise<T>): Promise<T> {
  return withProbe({ host: node.host, port: node.port }, fn);
}
