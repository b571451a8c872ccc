/**
 * The microtask turns from a `limit()` call to its decision on the paths that answer without Redis:
 * a deny-cache refusal and the breaker open (the fallback). The decision path keeps these at one
 * (the promise `limit()` returns); compare two checkouts:
 *
 *   node bench/probes/ticks.ts /tmp/before
 *   node bench/probes/ticks.ts .
 */
const { sourceOf } = await import('../support/sourceHooks.ts');
const root = process.argv[2] ?? '.';
const lib = await sourceOf(root);
const { startRedisServer, waitReady } = await import('../../test/support/redis.ts');
const server = await startRedisServer();
const redis = lib.createRedisClient({ host: '127.0.0.1', port: server.port });
await waitReady(redis);
const l = new lib.ResilientLimiter({ redis, limit: 1, windowMs: 60_000, prefix: `t${Math.random()}:`, local: { instances: 1 } });
async function ticks(f: () => Promise<unknown>): Promise<number> {
  let n = 0;
  let done = false;
  const p = f().then(() => {
    done = true;
  });
  while (!done && n < 1000) {
    await Promise.resolve();
    n += 1;
  }
  await p;
  return n;
}
await l.limit('warm');
await l.limit('warm'); // Redis refused: the deny cache holds it
const deny = await ticks(() => l.limit('warm'));
l.forceOpen();
const open = await ticks(() => l.limit('k'));
console.log(JSON.stringify({ root, denyCache: deny, breakerOpen: open }));
await l.close();
redis.disconnect();
await server.stop?.();
process.exit(0);
