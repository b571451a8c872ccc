/**
 * The plain sliding-window script (`bench/lua/naive-sliding-window.lua`): one ZSET script per
 * decision, no breaker, no fallback; run by EVALSHA. A baseline for the benchmarks.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';

export const NAIVE_SOURCE = readFileSync(new URL('../lua/naive-sliding-window.lua', import.meta.url), 'utf8');
export const NAIVE_SHA = createHash('sha1').update(NAIVE_SOURCE).digest('hex');

/** A member as such scripts usually build it: `<nowMs>-<random>` (8 base-36 characters of randomness). */
export function naiveMember(now: number): string {
  return `${now}-${Math.random().toString(36).slice(2, 10)}`;
}

/** One decision: true when admitted. EVALSHA, and EVAL once on NOSCRIPT. */
export async function naiveLimit(redis: Redis, key: string, limit: number, windowMs: number): Promise<boolean> {
  const now = Date.now();
  const member = naiveMember(now);
  let reply: unknown;
  try {
    reply = await redis.evalsha(NAIVE_SHA, 1, key, now, windowMs, limit, member);
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    reply = await redis.eval(NAIVE_SOURCE, 1, key, now, windowMs, limit, member);
  }
  return reply === 1;
}
