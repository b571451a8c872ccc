/**
 * One fresh redis-server child per benchmark file (persistence off, OS-assigned port, identity
 * checked by the test harness), plus the admin commands the benchmarks need.
 */
import type { Redis } from 'ioredis';
import { startRedisServer, waitReady, type RedisChild } from '../../test/support/redis.ts';

export type BenchServer = {
  readonly redis: RedisChild;
  /** A client for FLUSHALL, MEMORY USAGE, INFO, SCRIPT LOAD; not one of the contenders. */
  readonly admin: Redis;
  readonly version: string;
  flush(): Promise<void>;
  /** Zeroes the server's command statistics (`CONFIG RESETSTAT`). */
  resetStats(): Promise<void>;
  /** Calls and CPU µs spent in script commands (EVAL, EVALSHA) since `resetStats()`, from `INFO commandstats`. */
  scriptStats(): Promise<{ calls: number; usec: number }>;
  /** Calls and CPU µs of every command since `resetStats()` (`INFO commandstats`), by lower-case name. */
  commandStats(): Promise<Map<string, { calls: number; usec: number }>>;
  /** Bytes of `key` with every element counted (`MEMORY USAGE key SAMPLES 0`); 0 when absent. */
  memoryUsage(key: string): Promise<number>;
  close(): Promise<void>;
};

export async function startServer(): Promise<BenchServer> {
  const redis = await startRedisServer();
  const admin = redis.client();
  await waitReady(admin);
  const info = await redis.info('server');
  return {
    redis,
    admin,
    version: info['redis_version'] ?? 'unknown',
    async flush() {
      await admin.flushall();
      await admin.script('FLUSH');
    },
    async resetStats() {
      await admin.config('RESETSTAT');
    },
    async scriptStats() {
      let calls = 0;
      let usec = 0;
      for (const line of (await admin.info('commandstats')).split(/\r?\n/)) {
        const m = /^cmdstat_(?:eval|evalsha):calls=(\d+),usec=(\d+)/.exec(line);
        if (m !== null) {
          calls += Number(m[1]);
          usec += Number(m[2]);
        }
      }
      return { calls, usec };
    },
    async commandStats() {
      const stats = new Map<string, { calls: number; usec: number }>();
      for (const line of (await admin.info('commandstats')).split(/\r?\n/)) {
        const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
        if (m !== null) stats.set(m[1] as string, { calls: Number(m[2]), usec: Number(m[3]) });
      }
      return stats;
    },
    async memoryUsage(key) {
      const bytes = (await admin.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) as number | null;
      return bytes ?? 0;
    },
    close: () => redis.close(),
  };
}
