/**
 * A real Redis Sentinel deployment for tests: a master, one replica (`--replicaof`) and three
 * Sentinels (quorum 2), each a `redis-server` child process on a free port whose identity the harness
 * checks through `process_id` (Sentinels run as `redis-server <config file> --sentinel`). Never a mock.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { assertExited, startRedisServer, withProbe, type RedisChild } from './redis.js';

const HOST = '127.0.0.1';

export type SentinelHarnessOptions = {
  /** The master group's name. @default 'resilimit' */
  name?: string;
  /** `down-after-milliseconds`: how long the master may not answer before a Sentinel says it is down. @default 1000 */
  downAfterMs?: number;
  /** `failover-timeout`: also the least time between two failovers of the group. @default 5000 */
  failoverTimeoutMs?: number;
};

/** A `+switch-master` event as one Sentinel published it, at `performance.now()` of this process. */
export type Switch = { at: number; sentinel: number; fromPort: number; toPort: number };
/**
 * A `+promoted-slave` event: the failover's leader saw the replica at `port` answer as a master.
 * From then on the leader names it as the master (`GET-MASTER-ADDR-BY-NAME`), before any Sentinel
 * publishes `+switch-master`.
 */
export type Promotion = { at: number; sentinel: number; port: number };

export type SentinelDeployment = {
  readonly name: string;
  /** The master at start (`nodes[0]`) and its replica (`nodes[1]`); which one is master changes on failover. */
  readonly nodes: readonly RedisChild[];
  readonly sentinels: readonly RedisChild[];
  /** The Sentinels' addresses, as ioredis's `sentinels` option takes them. */
  readonly addresses: readonly { host: string; port: number }[];
  /** `role` of node `index` (`INFO replication`): 'master', 'slave', or 'down'. */
  role(index: number): Promise<string>;
  /** Every `+switch-master` any Sentinel published since the deployment was ready, in arrival order. */
  readonly switches: readonly Switch[];
  /** Every `+promoted-slave` any Sentinel published since the deployment was ready, in arrival order. */
  readonly promotions: readonly Promotion[];
  /**
   * When a client could first learn that the replica at `port` is the master: the first
   * `+promoted-slave` naming it or `+switch-master` to it, whichever came first; undefined before.
   */
  promotedAt(port: number): number | undefined;
  /** Stops every process and checks that none is left. */
  close(): Promise<void>;
};

export async function startSentinels(options: SentinelHarnessOptions = {}): Promise<SentinelDeployment> {
  const { name = 'resilimit', downAfterMs = 1000, failoverTimeoutMs = 5000 } = options;
  const nodes: RedisChild[] = [];
  const sentinels: RedisChild[] = [];
  const subscribers: Redis[] = [];
  const switches: Switch[] = [];
  const promotions: Promotion[] = [];
  const close = async (): Promise<void> => {
    for (const s of subscribers) s.disconnect();
    const all = [...sentinels, ...nodes];
    const pids = all.map((p) => p.pid);
    await Promise.all(all.map((p) => p.close()));
    // No orphan: every process started is gone; killed ones were awaited already.
    assertExited(pids);
  };
  try {
    // A diskless full sync waits 5 s by default for more replicas to join it; there is one.
    const master = await startRedisServer({ args: ['--repl-diskless-sync-delay', '0'] });
    nodes.push(master);
    nodes.push(await startRedisServer({ args: ['--replicaof', HOST, String(master.port)] }));
    await until(
      'the replica to be in sync',
      async () => (await (nodes[1] as RedisChild).info('replication'))['master_link_status'] === 'up',
    );
    for (let i = 0; i < 3; i++) {
      sentinels.push(
        await startRedisServer({
          sentinel: [
            `sentinel monitor ${name} ${HOST} ${master.port} 2`,
            `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
            `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
          ],
        }),
      );
    }
    // Ready once every Sentinel knows the replica and the two other Sentinels (they find each other
    // through hello messages on the master, every 2 s): a failover needs a quorum and a leader.
    await until('the Sentinels to know the replica and each other', async () => {
      const views = await Promise.all(sentinels.map((s) => probe(s, (c) => c.call('SENTINEL', 'MASTER', name))));
      return views.every((v) => {
        const fields = pairs(v);
        return fields['num-slaves'] === '1' && fields['num-other-sentinels'] === '2' && fields['flags'] === 'master';
      });
    });
    for (const [index, s] of sentinels.entries()) {
      const sub = new Redis({ host: HOST, port: s.port, maxRetriesPerRequest: 0, retryStrategy: () => 100 });
      sub.on('error', () => {});
      subscribers.push(sub);
      sub.on('message', (channel: string, message: string) => {
        const at = performance.now();
        if (channel === '+switch-master') {
          // "<name> <old ip> <old port> <new ip> <new port>"
          const [group, , from, , to] = message.split(' ');
          if (group === name) switches.push({ at, sentinel: index, fromPort: Number(from), toPort: Number(to) });
        } else {
          // "slave <ip>:<port> <ip> <port> @ <name> <master ip> <master port>"
          const [, , , port, , group] = message.split(' ');
          if (group === name) promotions.push({ at, sentinel: index, port: Number(port) });
        }
      });
      await sub.subscribe('+switch-master', '+promoted-slave');
    }
  } catch (error) {
    await close();
    throw error;
  }
  const promotedAt = (port: number): number | undefined => {
    const times = [
      ...promotions.filter((p) => p.port === port).map((p) => p.at),
      ...switches.filter((s) => s.toPort === port).map((s) => s.at),
    ];
    return times.length === 0 ? undefined : Math.min(...times);
  };
  return {
    name,
    nodes,
    sentinels,
    addresses: sentinels.map((s) => ({ host: HOST, port: s.port })),
    async role(index) {
      try {
        return (await (nodes[index] as RedisChild).info('replication'))['role'] ?? 'unknown';
      } catch {
        return 'down';
      }
    },
    switches,
    promotions,
    promotedAt,
    close,
  };
}

function probe<T>(server: RedisChild, fn: (c: Redis) => Promise<T>): Promise<T> {
  return withProbe({ host: server.host, port: server.port }, fn);
}

/** A flat `[field, value, …]` reply as an object. */
function pairs(reply: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (!Array.isArray(reply)) return out;
  for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = String(reply[i + 1]);
  return out;
}

/** Polls `check` every 50 ms; throws after 20 s (Sentinels find each other within a few hello periods of 2 s). */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + 20_000;
  while (!(await check().catch(() => false))) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
