/** One-shot PINGs, to check that an address really leads to a Redis. */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

/**
 * Sends one PING to `host:port` on a fresh connection that never retries or queues.
 * @param timeoutMs bound on the connect and on the command, ms.
 * @throws Error with ioredis's reason (refused, closed, timed out) or the unexpected reply.
 */
export async function ping(host: string, port: number, timeoutMs = 2_000): Promise<void> {
  const client = new Redis({
    host,
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    const reply = await client.ping();
    if (reply !== 'PONG') throw new Error(`PING answered ${JSON.stringify(reply)}, expected "PONG"`);
  } finally {
    client.disconnect();
  }
}

/**
 * PINGs `host:port` every 100 ms until one succeeds.
 * @param timeoutMs how long to keep trying, ms.
 * @throws Error with the last failure once `timeoutMs` has passed.
 */
export async function waitForPing(host: string, port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await ping(host, port, Math.min(2_000, timeoutMs));
      return;
    } catch (error) {
      if (Date.now() >= deadline) {
        throw new Error(`Redis at ${host}:${port} did not answer PING within ${timeoutMs} ms: ${(error as Error).message}`, {
          cause: error,
        });
      }
    }
    await sleep(100);
  }
}
