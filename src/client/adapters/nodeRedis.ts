import type { Script } from '../../base/wire.js';
import { withDeadline } from '../withDeadline.js';
import { isNoScript, listenOn, type PortEvent, ReplyError, type RedisPort, type ScriptArgs, scriptCommand } from '../port.js';
import { isA } from './errorClass.js';

/**
 * What resilimit calls on a node-redis (`redis` 5 and 6) client, `createClient()`'s; typed by shape,
 * so that the package is not needed to build resilimit nor to use it with another client.
 */
export interface NodeRedisClient {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(args: string[]): Promise<unknown>;
  close(): Promise<unknown>;
  destroy(): void;
  // biome-ignore lint/suspicious/noExplicitAny: node-redis types its listeners' arguments as any
  on(event: string, listener: (...args: any[]) => void): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: as above
  off(event: string, listener: (...args: any[]) => void): unknown;
  getMaxListeners(): number;
  setMaxListeners(n: number): unknown;
}

/** What resilimit calls on a node-redis Cluster client, `createCluster()`'s. */
export interface NodeRedisCluster extends Omit<NodeRedisClient, 'sendCommand'> {
  readonly masters: readonly object[];
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
  nodeClient(node: object): Promise<{ sendCommand(args: string[]): Promise<unknown> }> | { sendCommand(args: string[]): Promise<unknown> };
}

/** What resilimit calls on a node-redis Sentinel client, `createSentinel()`'s (it sends to the master it follows). */
export interface NodeRedisSentinel extends Omit<NodeRedisClient, 'sendCommand' | 'destroy'> {
  getMasterNode(): unknown;
  sendCommand(isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
  destroy(): unknown;
}

/** A node of a node-redis Cluster, as resilimit reads it. */
type NodeOf = { host?: string; port?: number; client?: { isReady?: boolean } };

/** Whether `value` is a node-redis client, Cluster or Sentinel client: `sendCommand` and the `isReady` / `isOpen` flags. */
export function isNodeRedis(value: object): boolean {
  const c = value as Partial<Record<'sendCommand' | 'isReady' | 'isOpen' | 'destroy', unknown>>;
  return (
    typeof c.sendCommand === 'function' &&
    typeof c.isReady === 'boolean' &&
    typeof c.isOpen === 'boolean' &&
    typeof c.destroy === 'function'
  );
}

/**
 * A reply error of node-redis (`ErrorReply`, `SimpleError`, `BlobError`) as the port's; anything else
 * as it is. Told by its class, or by its message's shape (Redis's code first, in capitals) when a
 * bundler renamed the classes: node-redis's own errors start with a word in lower case ("The client is offline").
 */
function mapped(error: unknown): unknown {
  if (!(error instanceof Error)) return error;
  return isA(error, 'ErrorReply') || /^[A-Z][A-Z0-9_-]*( |$)/.test(error.message) ? new ReplyError(error.message, { cause: error }) : error;
}

/**
 * The port over a node-redis client or Cluster. Every command goes through `sendCommand` with string
 * arguments; on a Cluster, by the call's first key (the keys of one call share a slot).
 */
export class NodeRedisPort implements RedisPort {
  readonly library = 'node-redis';
  readonly isCluster: boolean;
  readonly #sentinel: boolean;
  /** The addresses of a Cluster's nodes that have been ready: a node ready again may be one restarted empty. */
  readonly #seen = new Set<string>();
  /** The port's listeners of a Cluster's node ready again. */
  readonly #nodeListeners = new Set<(arg?: unknown) => void>();

  constructor(readonly client: NodeRedisClient | NodeRedisCluster | NodeRedisSentinel) {
    this.isCluster = Array.isArray((client as { masters?: unknown }).masters);
    this.#sentinel = typeof (client as { getMasterNode?: unknown }).getMasterNode === 'function';
    if (this.isCluster) {
      // One listener for every limiter on the client, from the start: the nodes ready by now (the
      // docs connect the Cluster before the limiter is made) are known, so their next ready is reported.
      const c = client as { masters?: NodeOf[]; replicas?: NodeOf[] };
      for (const node of [...(c.masters ?? []), ...(c.replicas ?? [])])
        if (node.client?.isReady === true) this.#seen.add(`${node.host}:${node.port}`);
      (client as NodeRedisCluster).on('node-ready', (node: { host?: string; port?: number }) => {
        const address = `${node.host}:${node.port}`;
        if (!this.#seen.has(address)) this.#seen.add(address);
        else for (const listener of this.#nodeListeners) listener();
      });
    }
  }

  get ready(): boolean {
    return this.client.isReady;
  }

  get ended(): boolean {
    return !this.client.isOpen;
  }

  get status(): string {
    return this.client.isReady ? 'ready' : this.client.isOpen ? 'reconnecting' : 'closed or not connected';
  }

  async run(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown> {
    try {
      return await this.#send(keys[0], scriptCommand('EVALSHA', script, keys, args));
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return this.eval(script, keys, args);
    }
  }

  eval(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown> {
    return this.#send(keys[0], scriptCommand('EVAL', script, keys, args));
  }

  del(key: string): Promise<unknown> {
    return this.#send(key, ['DEL', key]);
  }

  time(): Promise<readonly [string, string]> {
    return this.#send(undefined, ['TIME']) as Promise<readonly [string, string]>;
  }

  ping(): Promise<unknown> {
    return this.#send(undefined, ['PING']);
  }

  async info(...sections: string[]): Promise<string[]> {
    if (!this.isCluster) return [String(await this.#send(undefined, ['INFO', ...sections]))];
    const cluster = this.client as NodeRedisCluster;
    return Promise.all(
      cluster.masters.map(async (master) =>
        String(await (await cluster.nodeClient(master)).sendCommand(['INFO', ...sections]).catch(reject)),
      ),
    );
  }

  on(event: PortEvent, listener: (arg?: unknown) => void): () => void {
    if (event === 'error') return listenOn(this.client, 'error', listener);
    // A Cluster client is ready ('connect') once it knows the slots; each node's connection says 'node-ready'.
    if (event === 'ready' && this.#sentinel) {
      // A Sentinel client that follows a failover to another master is a client ready on another server.
      const stops = [
        listenOn(this.client, 'ready', listener),
        listenOn(this.client, 'topology-change', (change) => {
          if ((change as { type?: string }).type === 'MASTER_CHANGE') listener();
        }),
      ];
      return () => {
        for (const stop of stops) stop();
      };
    }
    if (event === 'ready') return listenOn(this.client, this.isCluster ? 'connect' : 'ready', listener);
    if (!this.isCluster) return () => {};
    this.#nodeListeners.add(listener);
    return () => this.#nodeListeners.delete(listener);
  }

  describe(): string {
    if (this.isCluster) return 'a node-redis Cluster client';
    if (this.#sentinel) return 'a node-redis Sentinel client';
    const options = (this.client as { options?: { url?: string; socket?: { host?: string; port?: number; path?: string } } }).options;
    if (options?.socket?.path) return `connecting to ${options.socket.path}`;
    if (options?.url) {
      const url = new URL(options.url);
      return `connecting to ${url.hostname}:${url.port || 6379}`;
    }
    return `connecting to ${options?.socket?.host ?? 'localhost'}:${options?.socket?.port ?? 6379}`;
  }

  unsafeSettings(): string[] {
    const options = (this.client as { options?: { disableOfflineQueue?: boolean; defaults?: { disableOfflineQueue?: boolean } } }).options;
    // A Sentinel client keeps its options private: nothing to check (docs/clients.md says what to set).
    if (this.#sentinel) return [];
    const off = this.isCluster ? options?.defaults?.disableOfflineQueue : options?.disableOfflineQueue;
    return off === true ? [] : [`disableOfflineQueue is not true${this.isCluster ? " (set it in the Cluster options' defaults)" : ''}`];
  }

  /**
   * `close()` (pending replies arrive first), waited at most `timeoutMs`; else, or when it fails or is
   * late, `destroy()`. node-redis's `close()` says closed (`isOpen` false) at once, and a Cluster's
   * forgets its nodes first: so the nodes' clients are taken before, and destroyed after a late close.
   */
  async close(timeoutMs: number): Promise<void> {
    if (!this.client.isOpen) return;
    const nodes = this.isCluster ? nodeClientsOf(this.client as NodeRedisCluster) : [];
    if (this.client.isReady && timeoutMs > 0) {
      const closed = await withDeadline(this.client.close(), timeoutMs).then(
        () => true,
        () => false,
      );
      if (closed) return;
    }
    for (const client of [this.client, ...nodes]) {
      try {
        await client.destroy();
      } catch {
        // Already destroyed, or closed for good meanwhile: nothing is left of it.
      }
    }
  }

  #send(firstKey: string | undefined, args: string[]): Promise<unknown> {
    const sent = this.isCluster
      ? (this.client as NodeRedisCluster).sendCommand(firstKey, false, args)
      : this.#sentinel
        ? (this.client as NodeRedisSentinel).sendCommand(false, args)
        : (this.client as NodeRedisClient).sendCommand(args);
    return sent.catch(reject);
  }
}

/** The clients of a node-redis Cluster's nodes that have one (masters, replicas, the pub/sub node). */
function nodeClientsOf(cluster: NodeRedisCluster): { destroy(): unknown }[] {
  const c = cluster as unknown as {
    masters?: { client?: unknown }[];
    replicas?: { client?: unknown }[];
    pubSubNode?: { client?: unknown };
  };
  const nodes = [...(c.masters ?? []), ...(c.replicas ?? []), ...(c.pubSubNode ? [c.pubSubNode] : [])];
  return nodes
    .map((node) => node.client)
    .filter((client): client is { destroy(): unknown } => typeof (client as { destroy?: unknown })?.destroy === 'function');
}

function reject(error: unknown): never {
  throw mapped(error);
}
