/**
 * A real Redis Cluster for tests: three `redis-server` masters started in cluster mode as child
 * processes (each on a free port, identity checked by the harness), joined with
 * `redis-cli --cluster create`. Never a mock.
 */
import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Cluster, type ClusterOptions } from 'ioredis';
import { startRedisServer, type RedisChild } from './redis.js';

const run = promisify(execFile);

export type RedisCluster = {
  readonly nodes: readonly RedisChild[];
  /** A new ioredis Cluster client (caller's options win), with an 'error' listener; closed by close(). */
  client(options?: ClusterOptions): Cluster;
  close(): Promise<void>;
};

export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const nodes: RedisChild[] = [];
  const clients = new Set<Cluster>();
  const close = async (): Promise<void> => {
    for (const c of clients) c.disconnect();
    await Promise.all(nodes.map((n) => n.close()));
  };
  try {
    for (let i = 0; i < masters; i++) {
      nodes.push(
        await startRedisServer({
          args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'],
        }),
      );
    }
    await run('redis-cli', [
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      '0',
      '--cluster-yes',
    ]);
    const deadline = Date.now() + 10_000;
    for (const node of nodes) {
      while ((await node.info('cluster'))['cluster_enabled'] !== '1') await sleep(50);
      const probe = node.client({ lazyConnect: true });
      await probe.connect();
      while (!/cluster_state:ok/.test(await probe.cluster('INFO'))) {
        if (Date.now() > deadline) throw new Error(`cluster did not reach state ok: ${await probe.cluster('INFO')}`);
        await sleep(50);
      }
      probe.disconnect();
    }
  } catch (error) {
    await close();
    throw error;
  }
  return {
    nodes,
    client(options = {}) {
      const c = new Cluster(
        nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
        options as ConstructorParameters<typeof Cluster>[1],
      );
      c.on('error', () => {});
      clients.add(c);
      return c;
    },
    close,
  };
}
