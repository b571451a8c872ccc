/**
 * `closeRedisClient` without a server: what it refuses, and clients that never connected. The cases
 * with Redis up, killed and frozen run child processes in test/integration/close.test.ts.
 */
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { closeRedisClient, createRedisClient } from '../../src/index.js';
import { freePort } from '../support/redis.js';

// freePort(): a port nothing listens on.
describe('closeRedisClient', () => {
  it.each([
    [
      'no client',
      undefined,
      {},
      'Expected `client` to be an ioredis, iovalkey, node-redis or Valkey GLIDE client (single server or Cluster), got `undefined` (undefined)',
    ],
    ['options not an object', 'client', 5, 'Expected `options` to be an object, got `5` (number)'],
    ['timeoutMs negative', 'client', { timeoutMs: -1 }, 'Expected `timeoutMs` to be an integer from 0 to 60000, got `-1` (number)'],
    [
      'timeoutMs a string',
      'client',
      { timeoutMs: '100' },
      'Expected `timeoutMs` to be an integer from 0 to 60000, got `"100"` (string of length 3)',
    ],
  ])('rejects %s with a coded error naming it', async (_, which, options, message) => {
    const client = createRedisClient({ host: '127.0.0.1', port: await freePort(), lazyConnect: true });
    try {
      const target = which === 'client' ? client : which;
      await expect(closeRedisClient(target as never, options as never)).rejects.toMatchObject({
        code: 'ERR_RESILIMIT_INVALID_OPTION',
        message,
      });
    } finally {
      client.disconnect();
    }
  });

  it('ends a client that never connected at once, and one already ended without error', async () => {
    const client = createRedisClient({ host: '127.0.0.1', port: await freePort(), lazyConnect: true });
    const ended = once(client, 'end');
    await closeRedisClient(client);
    await ended;
    expect(client.status).toBe('end');
    await closeRedisClient(client);
    expect(client.status).toBe('end');
  });

  it('stops a client that keeps failing to connect from reconnecting', async () => {
    const client = createRedisClient({ host: '127.0.0.1', port: await freePort() });
    await new Promise((resolve) => client.once('reconnecting', resolve)); // the first attempt was refused
    let attempts = 0;
    client.on('connecting', () => (attempts += 1));
    await closeRedisClient(client);
    // The next attempt was due 50 ms after the first, plus up to 50 ms of jitter; 500 ms is room for a loaded machine.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(attempts).toBe(0);
  });
});
