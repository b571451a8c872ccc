/**
 * The in-process contenders of the local-tier benchmark. Each has either a synchronous `decideSync`
 * or an async `decide`; both return true when the call was admitted.
 */
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { createRedisClient, LocalWindow, ResilientLimiter } from './resilimit.ts';

export type LocalSubject = {
  decideSync?: (key: string) => boolean;
  decide?: (key: string) => Promise<boolean>;
  /** Calls held in the journal now (a ResilientLimiter's). */
  journalled?: () => number;
  close(): Promise<void>;
};

export type LocalFactory = { readonly id: string; readonly name: string; create(keyCount: number): LocalSubject };

export const LIMIT = 100;
export const WINDOW_MS = 60_000;

/** A ResilientLimiter held open: every call is answered by its local window (reason 'breaker-open'). */
function heldOpen(keyCount: number, reconcile: boolean): LocalSubject {
  // Never connected: the breaker is forced open, so the local tier answers and Redis is never called.
  const redis = createRedisClient({ lazyConnect: true, host: '127.0.0.1', port: 9 });
  const limiter = new ResilientLimiter({
    redis,
    limit: LIMIT,
    windowMs: WINDOW_MS,
    local: { instances: 1, maxKeys: keyCount },
    reconcile,
  });
  limiter.forceOpen();
  return {
    decide: (key) => limiter.limit(key).then((d) => d.allowed),
    journalled: () => limiter.stats().reconcile.pending,
    async close() {
      await limiter.close();
      redis.disconnect();
    },
  };
}

export const LOCAL_CONTENDERS: readonly LocalFactory[] = [
  {
    id: 'local-window',
    name: 'resilimit LocalWindow (sync)',
    create(keyCount) {
      const window = new LocalWindow({ limit: LIMIT, windowMs: WINDOW_MS, maxKeys: keyCount });
      return { decideSync: (key) => window.limit(key).allowed, close: async () => window.clear() };
    },
  },
  {
    id: 'resilient-open',
    name: 'resilimit ResilientLimiter, forceOpen()',
    create: (keyCount) => heldOpen(keyCount, true),
  },
  {
    id: 'resilient-open-no-reconcile',
    name: 'resilimit ResilientLimiter, forceOpen(), reconcile: false',
    create: (keyCount) => heldOpen(keyCount, false),
  },
  {
    id: 'rlf-memory',
    name: 'rate-limiter-flexible RateLimiterMemory',
    create() {
      const limiter = new RateLimiterMemory({ points: LIMIT, duration: WINDOW_MS / 1000 });
      const rejected = (error: unknown): boolean => {
        if (error instanceof RateLimiterRes) return false;
        throw error;
      };
      return { decide: (key) => limiter.consume(key).then(() => true, rejected), close: async () => {} };
    },
  },
];
