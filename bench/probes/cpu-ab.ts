/**
 * An A/B of CPU per decision between two checkouts of resilimit, in one sitting: each round runs a
 * fresh process per checkout (alternating which goes first), and the medians are compared.
 *
 *   git worktree add /tmp/before <commit>
 *   node bench/probes/cpu-ab.ts /tmp/before .            # 5 rounds
 *   node bench/probes/cpu-ab.ts /tmp/before . --rounds 9
 *
 * Cases: `redis` — a healthy Redis (a redis-server child per process), 64 concurrent callers, 10,000
 * keys, limit 100 per 60 s, each key filled to 50 first (steady state, not a fresh window): Node CPU
 * (process.cpuUsage) and Redis CPU (INFO cpu) per decision;
 * `local` — the breaker forced open, one caller awaiting each call, 10,000 keys: Node CPU per decision.
 * CPU time, not wall time: it moves far less with the machine's other load than decisions/s do.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

type Sample = { redisNodeUs: number; redisServerUs: number; localNodeUs: number };

const KEYS = 10_000;

async function probe(root: string): Promise<Sample> {
  const { sourceOf } = await import('../support/sourceHooks.ts');
  const lib = await sourceOf(root);
  const { startRedisServer, waitReady } = await import('../../test/support/redis.ts');
  const server = await startRedisServer();
  const keys = Array.from({ length: KEYS }, (_, i) => `user:${i}`);
  const serverCpuUs = async (): Promise<number> => {
    const info = await server.info('cpu');
    return (Number(info['used_cpu_user']) + Number(info['used_cpu_sys'])) * 1e6;
  };
  const nodeCpuUs = (): number => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };

  const redis = lib.createRedisClient({ host: '127.0.0.1', port: server.port });
  await waitReady(redis);
  const limiter = new lib.ResilientLimiter({ redis, limit: 100, windowMs: 60_000, prefix: 'ab:', local: { instances: 1 } });
  const closedLoop = async (decisions: number): Promise<void> => {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < decisions) {
        next += 1;
        await limiter.limit(keys[(next * 7919) % KEYS] as string);
      }
    };
    await Promise.all(Array.from({ length: 64 }, worker));
  };
  // Warm-up, and keys in steady state: each key half full (50 of its 100) before the measured
  // decisions add 6 more, as a service's keys are well into their windows (never a fresh window).
  await closedLoop(KEYS * 50);
  const redisDecisions = 60_000;
  const [node0, server0] = [nodeCpuUs(), await serverCpuUs()];
  await closedLoop(redisDecisions);
  const [node1, server1] = [nodeCpuUs(), await serverCpuUs()];
  await limiter.close();
  redis.disconnect();
  await server.close();

  const local = new lib.ResilientLimiter({
    redis: lib.createRedisClient({ lazyConnect: true }),
    limit: 100,
    windowMs: 60_000,
    local: { instances: 1 },
  });
  local.forceOpen();
  for (const key of keys) await local.limit(key);
  const localDecisions = 300_000;
  const l0 = nodeCpuUs();
  for (let i = 0; i < localDecisions; i++) await local.limit(keys[(i * 7919) % KEYS] as string);
  const l1 = nodeCpuUs();
  await local.close();
  return {
    redisNodeUs: (node1 - node0) / redisDecisions,
    redisServerUs: (server1 - server0) / redisDecisions,
    localNodeUs: (l1 - l0) / localDecisions,
  };
}

function runProbe(root: string): Promise<Sample> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--probe', root], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('exit', (code) =>
      code === 0 ? done(JSON.parse(out.trim().split('\n').at(-1) as string) as Sample) : fail(new Error(`probe of ${root} exited ${code}`)),
    );
  });
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
};

const args = process.argv.slice(2);
if (args[0] === '--probe') {
  process.stdout.write(`${JSON.stringify(await probe(args[1] as string))}\n`);
  process.exit(0);
} else {
  const [a, b] = [args[0], args[1]];
  if (a === undefined || b === undefined) throw new Error('usage: node bench/probes/cpu-ab.ts <checkout A> <checkout B> [--rounds N]');
  const roundsAt = args.indexOf('--rounds');
  const rounds = roundsAt === -1 ? 5 : Number(args[roundsAt + 1]);
  const samples: Record<'A' | 'B', Sample[]> = { A: [], B: [] };
  for (let r = 0; r < rounds; r++) {
    const order: ('A' | 'B')[] = r % 2 === 0 ? ['A', 'B'] : ['B', 'A'];
    for (const which of order) {
      const sample = await runProbe(which === 'A' ? a : b);
      samples[which].push(sample);
      console.log(
        `round ${r + 1} ${which}: ${JSON.stringify(sample, (_, v: unknown) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v))}`,
      );
    }
  }
  console.log(`\nCPU per decision, µs (median of ${rounds} rounds; A = ${a}, B = ${b})\n`);
  console.log('| case | A | B | B ÷ A |');
  console.log('| :--- | ---: | ---: | ---: |');
  const rows: [string, keyof Sample][] = [
    ['Redis healthy, 64 concurrent: Node CPU', 'redisNodeUs'],
    ['Redis healthy, 64 concurrent: Redis CPU', 'redisServerUs'],
    ['breaker open, local tier: Node CPU', 'localNodeUs'],
  ];
  for (const [name, field] of rows) {
    const [ma, mb] = [median(samples.A.map((s) => s[field])), median(samples.B.map((s) => s[field]))];
    console.log(`| ${name} | ${ma.toFixed(2)} | ${mb.toFixed(2)} | ${(mb / ma).toFixed(3)}× |`);
  }
}
