/**
 * The server's own ceiling per script: redis-benchmark with 16-deep pipelines and 50 connections
 * on EVALSHA of each script, no client library in the way. Each command is tried once first with
 * the admin client, because redis-benchmark counts error replies as requests too.
 */
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { NAIVE_SOURCE } from './naive.ts';
import { redisBenchmark } from './redisBenchmark.ts';
import { scriptText } from './scriptText.ts';
import type { BenchServer } from './server.ts';

export type Ceiling = { script: string; requestsPerSecond: number; command: string } | { script: string; error: string };

const RESILIMIT_SOURCE = scriptText(new URL('../../lua/sliding-window.lua', import.meta.url));

/** rate-limiter-flexible keeps its script in a private field; read it from an instance. */
function rlfSource(server: BenchServer): string {
  const limiter = new RateLimiterRedis({ storeClient: server.admin, points: 1, duration: 1 });
  return (limiter as unknown as { _incrTtlLuaScript: string })._incrTtlLuaScript;
}

export async function ceilings(
  server: BenchServer,
  o: { keyspace: number; limit: number; windowMs: number; requests: number },
): Promise<Ceiling[]> {
  const now = String(Date.now());
  const limit = String(o.limit);
  const windowMs = String(o.windowMs);
  const scripts = [
    // KEYS[1]; now, windowMs, limit, member.
    { script: 'plain script', source: NAIVE_SOURCE, args: ['1', 'naive:user:__rand_int__', now, windowMs, limit, `${now}-__rand_int__`] },
    // KEYS[1]; windowMs, nowMs ('' = Redis TIME), notAfterMs (''), blockMs (0), the limit of every call (each of cost 1), then an id per key.
    {
      script: 'resilimit lua/sliding-window.lua',
      source: RESILIMIT_SOURCE,
      args: ['1', 'resilimit:{user:__rand_int__}', windowMs, '', '', '0', limit, 'id__rand_int__'],
    },
    // KEYS[1]; points to consume, duration s, points, duration.
    {
      script: 'rate-limiter-flexible',
      source: rlfSource(server),
      args: ['1', 'rlflx:user:__rand_int__', '1', String(o.windowMs / 1000), limit, String(o.windowMs / 1000)],
    },
  ];
  const out: Ceiling[] = [];
  for (const { script, source, args } of scripts) {
    await server.flush();
    const sha = (await server.admin.script('LOAD', source)) as string;
    const command = ['EVALSHA', sha, ...args];
    try {
      const trial = args.map((a) => a.replaceAll('__rand_int__', '000000000001'));
      await server.admin.evalsha(sha, ...(trial as [string, ...string[]]));
      // Best of two runs: redis-benchmark shares the two cores with the server.
      let requestsPerSecond = 0;
      for (let run = 0; run < 2; run += 1) {
        const r = await redisBenchmark({
          host: server.redis.host,
          port: server.redis.port,
          requests: o.requests,
          pipeline: 16,
          clients: 50,
          keyspace: o.keyspace,
          command,
        });
        requestsPerSecond = Math.max(requestsPerSecond, r.requestsPerSecond);
      }
      out.push({ script, requestsPerSecond, command: command.join(' ') });
    } catch (error) {
      out.push({ script, error: String(error) });
    }
  }
  return out;
}
