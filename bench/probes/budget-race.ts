/**
 * Probe: 16 callers reserving and settling on 20 keys of one limiter, a healthy Redis: how many
 * reserves were not decided by Redis (reason, by count). A settle's charge recorded in the warm window
 * before a concurrent decision's reply was read made that decision look like lost data ('reconciling');
 * `test/integration/budget.test.ts` checks the fix. `T=<ms>` sets the breaker's deadline (50).
 * Run: node bench/probes/budget-race.ts
 */
import { waitReady } from '../../test/support/redis.ts';
import { Budget, createRedisClient, ResilientLimiter } from '../support/resilimit.ts';
import { startServer } from '../support/server.ts';
const server = await startServer();
async function trial(name: string, actuals: number[], keys: number) {
  const redis = createRedisClient(server.redis.url);
  await waitReady(redis);
  const limiter = new ResilientLimiter({
    redis,
    limit: 1_000_000_000,
    windowMs: 600_000,
    local: { instances: 1 },
    breaker: { timeoutMs: Number(process.env.T ?? 50) },
    prefix: `${name}:`,
  });
  let lost = 0;
  limiter.on('dataLost', () => {
    lost++;
  });
  const budget = new Budget(limiter);
  let turn = 0;
  let local = 0;
  let ops = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (ops < 5000) {
        ops++;
        const key = `k${(Math.random() * keys) | 0}`;
        const a = actuals[turn++ % actuals.length] as number;
        if (a < 0) {
          const d = await limiter.limit(key);
          if (d.source !== 'redis') local++;
          continue;
        }
        const r = await budget.reserve(key, 40);
        if (r.decision.source !== 'redis') local++;
        await budget.settle(r, a);
      }
    }),
  );
  console.log(name, 'keys', keys, 'not by redis:', local, 'dataLost', lost, JSON.stringify(limiter.stats().byReason));
  await limiter.close();
  redis.disconnect();
}
await trial('limitonly', [-1], 20);
await trial('equal', [40], 20);
await trial('above', [70], 20);
await trial('below', [15], 20);
await trial('below0', [0], 20);
await trial('mixed', [15, 70], 2000);
await server.close();
