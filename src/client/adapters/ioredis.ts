import type { Cluster, Redis } from 'ioredis';
import type { Script } from '../../base/wire.js';
import { withDeadline } from '../withDeadline.js';
import { stopFollowing } from '../followFailovers.js';
import { isNoScript, listenOn, type PortEvent, type RedisPort, type ScriptArgs } from '../port.js';

/** An ioredis 6 `Redis` or `Cluster`, or iovalkey's (ioredis's fork for Valkey: the same API). */
type Client = Redis | Cluster;

/** Whether `value` has ioredis's API: `evalsha`, `eval`, `status` (iovalkey's clients too). */
export function isIoredis(value: object): boolean {
  const c = value as Partial<Record<'evalsha' | 'eval' | 'del' | 'status', unknown>>;
  return typeof c.evalsha === 'function' && typeof c.eval === 'function' && typeof c.del === 'function' && typeof c.status === 'string';
}

/** ioredis's events by the port's names: a Cluster's node added after start-up is reported once it is ready. */
const EVENTS: Record<Exclude<PortEvent, 'node'>, string> = { ready: 'ready', error: 'error' };

/** The port over an ioredis (or iovalkey) client. Its reply errors are ioredis's `ReplyError` already. */
export class IoredisPort implements RedisPort {
  readonly library = 'ioredis';
  readonly isCluster: boolean;

  constructor(readonly client: Client) {
    this.isCluster = (client as { isCluster?: boolean }).isCluster === true;
  }

  get ready(): boolean {
    return this.client.status === 'ready';
  }

  get ended(): boolean {
    return this.client.status === 'end';
  }

  get status(): string {
    return this.client.status;
  }

  async run(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown> {
    try {
      return await this.client.evalsha(script.sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return this.client.eval(script.source, keys.length, ...keys, ...args);
    }
  }

  eval(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown> {
    return this.client.eval(script.source, keys.length, ...keys, ...args);
  }

  del(key: string): Promise<unknown> {
    return this.client.del(key);
  }

  time(): Promise<readonly [string, string]> {
    return this.client.time() as unknown as Promise<readonly [string, string]>;
  }

  ping(): Promise<unknown> {
    return this.client.ping();
  }

  info(...sections: string[]): Promise<string[]> {
    const nodes: Redis[] = this.isCluster ? (this.client as Cluster).nodes('master') : [this.client as Redis];
    return Promise.all(nodes.map((node) => node.call('INFO', ...sections) as Promise<string>));
  }

  on(event: PortEvent, listener: (arg?: unknown) => void): () => void {
    if (event !== 'node') return listenOn(this.client, EVENTS[event], listener);
    // A Cluster client stays 'ready' while one master dies and comes back empty: ioredis drops the
    // node ('-node') and adds it again ('+node') once it answers.
    // Nodes added while the client connects are not reported: only those added once it was ready.
    const waiting = new Map<Redis, () => void>();
    const stop = listenOn(this.client, '+node', (added) => {
      const node = added as Redis;
      if (this.client.status !== 'ready' || waiting.has(node)) return;
      const onReady = (): void => {
        waiting.delete(node);
        listener();
      };
      waiting.set(node, onReady);
      node.once('ready', onReady);
    });
    return () => {
      stop();
      for (const [node, onReady] of waiting) node.off('ready', onReady);
      waiting.clear();
    };
  }

  describe(): string {
    if (this.isCluster) return 'a Cluster client';
    const { host, port, path, sentinels, name } = (this.client as Redis).options;
    if (sentinels && sentinels.length > 0) {
      return `master ${JSON.stringify(name)} via ${sentinels.length} listed Sentinel${sentinels.length === 1 ? '' : 's'}`;
    }
    return path ? `connecting to ${path}` : `connecting to ${host}:${port}`;
  }

  unsafeSettings(): string[] {
    const problems: string[] = [];
    if (this.isCluster) {
      const options = (this.client as Cluster).options;
      if (options.enableOfflineQueue !== false) problems.push('enableOfflineQueue is not false (set it in ClusterOptions)');
      if (options.redisOptions?.maxRetriesPerRequest !== 0) problems.push('redisOptions.maxRetriesPerRequest is not 0');
    } else {
      const options = (this.client as Redis).options;
      if (options.enableOfflineQueue !== false) problems.push('enableOfflineQueue is not false');
      if (options.maxRetriesPerRequest !== 0) problems.push('maxRetriesPerRequest is not 0');
    }
    return problems;
  }

  /**
   * `QUIT` when ready (pending replies arrive first), waited at most `timeoutMs`; else, or when it
   * fails or is late, `disconnect()` (which stops ioredis reconnecting) and the sockets closed at once:
   * `disconnect()` alone waits up to `disconnectTimeout` for a server to close its side, which a frozen
   * server never does.
   */
  async close(timeoutMs: number): Promise<void> {
    const client = this.client;
    if (client.status === 'end') return;
    if (client.status === 'ready' && timeoutMs > 0) {
      const quit = await withDeadline(client.quit(), timeoutMs).then(
        () => true,
        () => false,
      );
      if (quit) return;
    }
    const sockets = this.isCluster ? (client as Cluster).nodes('all').map((node) => node.stream) : [(client as Redis).stream];
    client.disconnect();
    if (!this.isCluster) stopFollowing(client as Redis);
    for (const socket of sockets) socket?.destroy();
  }
}
