/**
 * An A/B of two versions of `lua/sliced-window.lua` in one redis-server child: the server's CPU per
 * decision, rounds alternating, medians of 7. 2,000 keys a version, each with 59 slices of calls
 * behind it (times injected, then Redis's clock), decided in batches of 16 calls (as the coalescer
 * sends them at 64 callers), and RateLimiterRedis's script, one call a decision, for scale.
 *
 *   mkdir -p /tmp/before && git show <commit>:lua/sliced-window.lua > /tmp/before/sliced-window.lua
 *   git show <commit>:lua/prelude.lua > /tmp/before/prelude.lua   # a commit that has one
 *   node bench/probes/sliced-ab.ts /tmp/before/sliced-window.lua lua/sliced-window.lua
 * Each file is joined with the prelude.lua beside it, if any (bench/support/scriptText.ts).
 */
import { loadavg } from 'node:os';
import { startRedisServer, waitReady } from '../../test/support/redis.ts';
import { scriptText } from '../support/scriptText.ts';

const [fileA, fileB] = process.argv.slice(2);
if (fileA === undefined || fileB === undefined) throw new Error('usage: node bench/probes/sliced-ab.ts <a.lua> <b.lua>');
const KEYS = 2_000;
const LIMIT = Number(process.env.LIMIT ?? 1_000_000);
const BATCH = Number(process.env.BATCH ?? 16);
const PER_ROUND = 12_000;
const ROUNDS = 7;
const RLF = `redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX')
local consumed = redis.call('incrby', KEYS[1], ARGV[1])
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then redis.call('expire', KEYS[1], ARGV[2]) ttl = 1000 * ARGV[2] end
return {consumed, ttl}`;

const server = await startRedisServer();
const redis = server.client();
await waitReady(redis);
const sha = {
  A: (await redis.script('LOAD', scriptText(fileA))) as string,
  B: (await redis.script('LOAD', scriptText(fileB))) as string,
};
const shaRlf = (await redis.script('LOAD', RLF)) as string;
const key = (name: string, i: number): string => `${name}{${i % KEYS}}:s1000`;

async function cpuUs(): Promise<number> {
  const info = (await redis.info('cpu')) as string;
  return (Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1])) * 1e6;
}
/** `count` script calls made by `args`, pipelined 200 at a time; the server's CPU µs per decision (`per` decisions a call). */
async function run(count: number, per: number, args: (i: number) => (string | number)[]): Promise<number> {
  const before = await cpuUs();
  for (let i = 0; i < count; i += 200) {
    const p = redis.pipeline();
    for (let j = i; j < Math.min(i + 200, count); j += 1) p.call('EVALSHA', ...args(j));
    await p.exec();
  }
  return ((await cpuUs()) - before) / (count * per);
}
const batch = (name: 'A' | 'B') => (i: number) => [
  sha[name],
  BATCH,
  ...Array.from({ length: BATCH }, (_, k) => key(name, i * BATCH + k)),
  'd',
  60_000,
  1_000,
  '',
  '',
  0,
  LIMIT,
];
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

// 59 past slices per key, 8,000 permits each.
const now = Date.now();
for (const name of ['A', 'B'] as const) {
  for (let s = 0; s < 59; s += 1) {
    await run(KEYS, 1, (i) => [sha[name], 1, key(name, i), 'd', 60_000, 1_000, now - 59_000 + s * 1_000, '', 0, '', LIMIT, 8_000]);
  }
}
const a: number[] = [];
const b: number[] = [];
const r: number[] = [];
for (let round = 0; round < ROUNDS; round += 1) {
  for (const name of round % 2 === 0 ? (['A', 'B'] as const) : (['B', 'A'] as const))
    (name === 'A' ? a : b).push(await run(PER_ROUND / BATCH, BATCH, batch(name)));
  r.push(await run(PER_ROUND, 1, (i) => [shaRlf, 1, `rlf{${i % KEYS}}`, 1, 60]));
}
console.log(
  `redis-server ${server.kind}; load average ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
console.log(
  `Redis CPU µs per decision, batches of ${BATCH}: A ${median(a).toFixed(2)}, B ${median(b).toFixed(2)} (B ÷ A ${(median(b) / median(a)).toFixed(3)}×); RateLimiterRedis ${median(r).toFixed(2)} (B ÷ RLF ${(median(b) / median(r)).toFixed(3)}×)`,
);
await server.close();
