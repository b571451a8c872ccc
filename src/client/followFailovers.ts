import type { Redis } from 'ioredis';

/** Reconnects of the Sentinel connections: 50 ms doubling to 1 s, forever (as the client's own). */
const retryStrategy = (times: number): number => Math.min(50 * 2 ** Math.min(times - 1, 6), 1000);

/**
 * Makes a client created with `sentinels` and `name` follow a failover at once: it subscribes to
 * `+switch-master` on every listed Sentinel and, when one announces a new master for the client's
 * group, reconnects the client, which then asks the Sentinels for the master again. Without it, a
 * failover that leaves the old master running (`SENTINEL FAILOVER`, a partition) keeps the client on
 * the old master until the Sentinels demote it and close its connections: about 10 s (measured), and
 * what it wrote there meanwhile is lost.
 *
 * ioredis 6.0's own `failoverDetector` does the same, but (measured, ioredis 6.0.0):
 * - `quit()` leaves its Sentinel connections open, so the process never exits (ioredis issue 1362);
 * - a `+switch-master` that arrives while the client is asking the Sentinels for the master (during
 *   a reconnect after the master died; up to `sentinelCommandTimeout` when a Sentinel does not
 *   answer) ends the client for good: status `'end'`, no reconnect ever.
 * So this reconnects only a client that has a connection (`connect`, `ready`) to another server than
 * the announced master (after `natMap`): a Sentinel that learns of the failover late (up to a second
 * later, measured) must not take a client off the new master. One still connecting may have been
 * given the old master just before the announcement: it is checked once ready. One waiting to
 * reconnect will ask the Sentinels anyway.
 *
 * The Sentinel connections open when the client is first ready and close when it ends (`quit()`,
 * `disconnect()`) or `closeRedisClient` closes it; they use the Sentinel credentials and TLS
 * settings of the client's options.
 */
export function followFailovers(client: Redis, RedisClass: typeof Redis): void {
  const { sentinels, name } = client.options;
  if (!sentinels || sentinels.length === 0 || !name) return;
  let subscribers: Redis[] = [];
  /** The master announced while the client was connecting: it may be on its way to the old one. */
  let announced: { host: string; port: number } | undefined;
  const onSwitch = (_channel: string, message: string): void => {
    // "<name> <old ip> <old port> <new ip> <new port>"
    const [group, , , ip, port] = message.split(' ');
    if (group !== name) return;
    const master = natMapped(client, `${ip}:${port}`);
    if (client.status === 'ready' || client.status === 'connect') {
      if (!connectedTo(client, master)) client.disconnect(true);
    } else if (client.status === 'connecting') {
      announced = master;
    }
  };
  client.on('close', () => {
    announced = undefined; // that attempt got nowhere; the next one asks the Sentinels, after the switch
  });
  client.on('ready', () => {
    const master = announced;
    announced = undefined;
    if (master !== undefined && !connectedTo(client, master)) client.disconnect(true);
    if (subscribers.length > 0) return;
    const { sentinelUsername, sentinelPassword, sentinelTLS, connectTimeout } = client.options;
    subscribers = sentinels.map((sentinel) => {
      // ioredis's class as createRedisClient() loaded it (an ioredis client's `constructor` is EventEmitter's).
      const sub = new RedisClass({
        host: sentinel.host ?? 'localhost',
        port: sentinel.port ?? 26379,
        ...(sentinel.family === undefined ? {} : { family: sentinel.family }),
        ...(sentinelUsername ? { username: sentinelUsername } : {}),
        ...(sentinelPassword ? { password: sentinelPassword } : {}),
        ...(sentinelTLS === undefined ? {} : { tls: sentinelTLS }),
        ...(connectTimeout === undefined ? {} : { connectTimeout }),
        retryStrategy,
        // SUBSCRIBE waits for the connection however long a Sentinel is down; re-sent on every reconnect.
        maxRetriesPerRequest: null,
        enableReadyCheck: false,
      });
      sub.on('error', () => {
        // A Sentinel down is retried; the others keep announcing.
      });
      sub.on('message', onSwitch);
      sub.subscribe('+switch-master').catch(() => undefined);
      return sub;
    });
  });
  const stop = (): void => {
    for (const sub of subscribers) sub.disconnect();
    subscribers = [];
    announced = undefined;
  };
  client.on('end', stop);
  stoppers.set(client, stop);
}

/** How to close the Sentinel connections of each client that follows failovers. */
const stoppers = new WeakMap<Redis, () => void>();

/**
 * Closes the Sentinel connections of `client`, if it follows failovers. For `closeRedisClient`:
 * a client that is reconnecting when `disconnect()` is called stops without ever emitting `'end'`
 * (ioredis 6.0.0), which would leave them open and the process alive.
 */
export function stopFollowing(client: Redis): void {
  stoppers.get(client)?.();
}

/** Whether the client's connection is to `master` (an IPv4 address may show as IPv6-mapped). */
function connectedTo(client: Redis, master: { host: string; port: number }): boolean {
  const { remoteAddress, remotePort } = client.stream;
  return remotePort === master.port && remoteAddress?.replace(/^::ffff:/, '') === master.host;
}

/** The address the client connects to for `key` (`ip:port` as a Sentinel names it), as ioredis maps it. */
function natMapped(client: Redis, key: string): { host: string; port: number } {
  const { natMap } = client.options;
  const mapped = typeof natMap === 'function' ? natMap(key) : natMap?.[key];
  if (mapped) return mapped;
  const i = key.lastIndexOf(':');
  return { host: key.slice(0, i), port: Number(key.slice(i + 1)) };
}
