import type { GlideClientLike } from './adapters/glide.js';
import type { NodeRedisClient, NodeRedisCluster, NodeRedisSentinel } from './adapters/nodeRedis.js';

/**
 * A client with ioredis's API: ioredis 6's `Redis` and `Cluster`, and iovalkey's (ioredis's fork for
 * Valkey). Typed by shape, without ioredis's types: ioredis is an optional peer, and a type imported
 * from a package the user does not have would make this one `any`. What resilimit calls on a client: the classes of two packages never
 * match by name (`Redis<"legacy">` refused iovalkey's before).
 */
export interface IoredisCompatible {
  readonly status: string;
  readonly options: object;
  evalsha(sha: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  del(...keys: string[]): Promise<number>;
  time(): Promise<unknown>;
  ping(): Promise<unknown>;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  // biome-ignore lint/suspicious/noExplicitAny: the clients type their listeners' arguments as any
  on(event: string, listener: (...args: any[]) => void): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: as above
  off(event: string, listener: (...args: any[]) => void): unknown;
  getMaxListeners(): number;
  setMaxListeners(n: number): unknown;
  quit(): Promise<unknown>;
  disconnect(): void;
}

/**
 * The client a limiter or a window takes: ioredis 6's `Redis` or `Cluster`, iovalkey's, node-redis's
 * (`createClient()`, `createCluster()`) or Valkey GLIDE's (`GlideClient`, `GlideClusterClient`).
 */
export type RedisClient = IoredisCompatible | NodeRedisClient | NodeRedisCluster | NodeRedisSentinel | GlideClientLike;
