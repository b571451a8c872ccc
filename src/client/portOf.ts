import { invalidOption } from '../base/errors.js';
import { GlidePort, isGlide } from './adapters/glide.js';
import { IoredisPort, isIoredis } from './adapters/ioredis.js';
import { isNodeRedis, NodeRedisPort } from './adapters/nodeRedis.js';
import type { RedisPort } from './port.js';

/** One port per client, however many limiters and windows use it (listener caps, warnings and prefixes are per client). */
const ports = new WeakMap<object, RedisPort>();

/** What the `redis` option takes, in messages. */
export const CLIENTS = 'an ioredis, iovalkey, node-redis or Valkey GLIDE client (single server or Cluster)';

/**
 * The port over the user's client: the adapter of its library, told apart by shape (no client
 * package is loaded to check).
 * @throws {ResilimitError} `ERR_RESILIMIT_INVALID_OPTION` naming `option` when `value` is none of those clients.
 */
export function portOf(value: unknown, option = 'redis'): RedisPort {
  if (typeof value !== 'object' || value === null) throw invalidOption(option, CLIENTS, value);
  let port = ports.get(value);
  if (port !== undefined) return port;
  if (isIoredis(value)) port = new IoredisPort(value as ConstructorParameters<typeof IoredisPort>[0]);
  else if (isNodeRedis(value)) port = new NodeRedisPort(value as ConstructorParameters<typeof NodeRedisPort>[0]);
  else if (isGlide(value)) port = new GlidePort(value as ConstructorParameters<typeof GlidePort>[0]);
  else throw invalidOption(option, CLIENTS, value);
  ports.set(value, port);
  return port;
}
