/**
 * Probe: one caller awaiting each call, 10,000 keys filled to 50 (limit 100 / 60 s): commands Redis
 * ran per decision (INFO commandstats) and CPU per decision on each side, resilimit then RLF.
 * With --floors, also the least a script call per decision costs at one caller, through the same
 * client: lua/sliding-window.lua sent bare (the arguments limit() sends, no limiter around it), and a
 * script that only replies (the same keys and arguments): what any Lua-decided call pays.
 * With --pin (two CPUs or more), this process runs on CPU 0 and the redis-server on CPU 1
 * (`taskset`): unpinned, CPU per decision at one caller moves by ±20 % from run to run with where
 * the scheduler puts the two and what else runs (measured on a shared 2-vCPU VM).
 * With --root <checkout>, the limiter is that checkout's `src/` (a before, beside this one's after).
 *   node bench/probes/one-caller.ts [ms] [--resolution <ms>] [--floors] [--pin] [--root <dir>]
 */
import { randomUUID } from 'node:crypto';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { waitReady } from '../../test/support/redis.ts';
import { sourceOf } from '../support/sourceHooks.ts';
import { scriptText } from '../support/scriptText.ts';
import { startServer } from '../support/server.ts';

const MS = Number(process.argv[2] ?? 2000);
const at = process.argv.indexOf('--resolution');
const RESOLUTION = at === -1 ? undefined : Number(process.argv[at + 1]);
const rootAt = process.argv.indexOf('--root');
const { createRedisClient, ResilientLimiter } = await sourceOf(rootAt === -1 ? undefined : process.argv[rootAt + 1]);
const server = await startServer();
if (process.argv.includes('--pin')) {
  if (availableParallelism() < 2) throw new Error('--pin needs two CPUs');
  execFileSync('taskset', ['-pc', '1', String(server.redis.pid)]);
  execFileSync('taskset', ['-pc', '0', String(process.pid)]);
}
console.log(
  `limiter: ${rootAt === -1 ? 'this checkout' : process.argv[rootAt + 1]}; ${process.argv.includes('--pin') ? 'pinned (node CPU 0, redis-server CPU 1)' : 'not pinned'}`,
);
const keys = Array.from({ length: 10_000 }, (_, i) => `k:${i}`);
const stats = async () => {
  const c = server.redis.client();
  await waitReady(c);
  const text = (await c.info('commandstats')) + (await c.info('cpu'));
  c.disconnect();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/cmdstat_(\w+):calls=(\d+)/g)) out[m[1]!] = Number(m[2]);
  out.cpuUs = (Number(/used_cpu_user:([\d.]+)/.exec(text)![1]) + Number(/used_cpu_sys:([\d.]+)/.exec(text)![1])) * 1e6;
  return out;
};
async function run(name: string, decide: (k: string) => Promise<unknown>) {
  for (const k of keys) for (let i = 0; i < 50; i++) await decide(k);
  const a = await stats();
  const n0 = process.cpuUsage();
  const t0 = performance.now();
  let n = 0;
  while (performance.now() - t0 < MS) await decide(keys[n++ % keys.length]!);
  const cpu = process.cpuUsage(n0);
  const el = performance.now() - t0;
  const b = await stats();
  const per: string[] = [];
  for (const [k, v] of Object.entries(b)) if (k !== 'cpuUs' && v - (a[k] ?? 0) > 0) per.push(`${k} ${((v - (a[k] ?? 0)) / n).toFixed(3)}`);
  console.log(
    `${name}: ${((n / el) * 1000).toFixed(0)}/s; node ${((cpu.user + cpu.system) / n).toFixed(1)} µs; redis ${((b.cpuUs! - a.cpuUs!) / n).toFixed(1)} µs; per decision: ${per.join(', ')}`,
  );
}
{
  const redis = createRedisClient(server.redis.url);
  await waitReady(redis);
  const limiter = new ResilientLimiter({
    redis,
    limit: 100,
    windowMs: 60_000,
    local: { instances: 1 },
    ...(RESOLUTION === undefined ? {} : { resolutionMs: RESOLUTION }),
  });
  await run('resilimit', (k) => limiter.limit(k));
  await limiter.close();
  redis.disconnect();
}
{
  const client = server.redis.client();
  await waitReady(client);
  const rlf = new RateLimiterRedis({ storeClient: client, points: 100, duration: 60, keyPrefix: 'rlf' });
  await run('rlf', (k) => rlf.consume(k).catch(() => undefined));
  client.disconnect();
}
if (process.argv.includes('--floors')) {
  const client = server.redis.client();
  await waitReady(client);
  const source = scriptText(new URL('../../lua/sliding-window.lua', import.meta.url));
  const real = (await client.script('LOAD', source)) as string;
  const bare = (await client.script('LOAD', "return '1,0,1,1,0,1,0'")) as string;
  // Keys of their own, shaped as limit() sends them (the user key in its hash tag).
  await run('script bare', (k) => client.evalsha(real, 1, `bare:{${k}}`, 60_000, '', '', 0, 100, randomUUID()));
  await run('empty script', (k) => client.evalsha(bare, 1, `empty:{${k}}`, 60_000, '', '', 0, 100, randomUUID()));
  client.disconnect();
}
await server.close?.();
