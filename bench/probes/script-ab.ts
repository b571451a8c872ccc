/**
 * An A/B of two versions of `lua/sliding-window.lua` in one redis-server child: the server's CPU
 * (`INFO cpu`, user + sys) per decision, rounds alternating which version goes first, medians. Each
 * version has its own keys, filled through its own script to the level of the case; a round adds
 * half a call per key, so the fill moves by a few calls over the rounds. Batches of one call (a
 * script call per decision: the fixed cost shows), with rate-limiter-flexible's script for scale.
 *
 *   mkdir -p /tmp/before && git show <commit>:lua/sliding-window.lua > /tmp/before/sliding-window.lua
 *   git show <commit>:lua/prelude.lua > /tmp/before/prelude.lua   # a commit that has one
 *   node bench/probes/script-ab.ts /tmp/before/sliding-window.lua lua/sliding-window.lua
 * Each file is joined with the prelude.lua beside it, if any (bench/support/scriptText.ts).
 */
import { loadavg } from 'node:os';
import { startRedisServer, waitReady } from '../../test/support/redis.ts';
import { scriptText } from '../support/scriptText.ts';

const [fileA, fileB] = process.argv.slice(2);
if (fileA === undefined || fileB === undefined) throw new Error('usage: node bench/probes/script-ab.ts <a.lua> <b.lua>');
const KEYS = 6_000;
const PER_ROUND = 3_000;
const ROUNDS = 7;
const PIPELINE = 500;
/** rate-limiter-flexible's RateLimiterRedis script (11.x), for scale. */
const RLF = `redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX')
local consumed = redis.call('incrby', KEYS[1], ARGV[1])
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then redis.call('expire', KEYS[1], ARGV[2]) ttl = 1000 * ARGV[2] end
return {consumed, ttl}`;

const server = await startRedisServer();
const redis = server.client();
await waitReady(redis);
const shaA = (await redis.script('LOAD', scriptText(fileA))) as string;
const shaB = (await redis.script('LOAD', scriptText(fileB))) as string;
const shaRlf = (await redis.script('LOAD', RLF)) as string;
let id = 0;

async function serverCpuUs(): Promise<number> {
  const info = (await redis.info('cpu')) as string;
  return (Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1])) * 1e6;
}

/** Runs `count` script calls made by `args`, pipelined; the server's CPU per call, µs. */
async function run(count: number, args: (i: number) => (string | number)[]): Promise<number> {
  const before = await serverCpuUs();
  for (let i = 0; i < count; i += PIPELINE) {
    const pipeline = redis.pipeline();
    for (let j = i; j < Math.min(i + PIPELINE, count); j += 1) pipeline.call('EVALSHA', ...args(j));
    await pipeline.exec();
  }
  return ((await serverCpuUs()) - before) / count;
}

const call = (sha: string, prefix: string) => (i: number) => [sha, 1, `${prefix}{${i % KEYS}}`, 60_000, '', '', 0, 100, `c${(id += 1)}`];
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

const rlf: number[] = [];
for (let round = 0; round < ROUNDS; round += 1) rlf.push(await run(PER_ROUND, (i) => [shaRlf, 1, `rlf{${i % KEYS}}`, 1, 60]));
console.log(
  `redis-server ${server.kind}, load average ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
console.log(`| case | A µs | B µs | B ÷ A |\n|---|--:|--:|--:|`);
for (const fill of [0, 50, 95, 100]) {
  for (const [sha, name] of [
    [shaA, 'A'],
    [shaB, 'B'],
  ] as const) {
    if (fill > 0) await run(KEYS * fill, (i) => call(sha, `${name}${fill}:`)(i % KEYS));
  }
  const a: number[] = [];
  const b: number[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    const order = round % 2 === 0 ? ['A', 'B'] : ['B', 'A'];
    for (const name of order) {
      const us = await run(PER_ROUND, call(name === 'A' ? shaA : shaB, `${name}${fill}:`));
      (name === 'A' ? a : b).push(us);
    }
  }
  console.log(
    `| ${fill === 100 ? 'full (refused)' : `${fill} calls of 100`} | ${median(a).toFixed(2)} | ${median(b).toFixed(2)} | ${(median(b) / median(a)).toFixed(3)}× |`,
  );
}
console.log(
  `RateLimiterRedis's script for scale: ${median(rlf).toFixed(2)} µs per decision. Load average at the end ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}.`,
);
await server.close();
