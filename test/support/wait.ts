/** Waiting in tests: for a condition, and for one call made while a server is frozen. */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `check` every `everyMs` until it is true; throws naming `what` after `ms`. */
export async function until(check: () => boolean | Promise<boolean>, ms: number, what: string, everyMs = 50): Promise<void> {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(everyMs);
  }
}

/** Makes `call` while `server` is frozen (thawed after, whatever happens): its result and how long it took, ms. */
export async function whileFrozen<T>(server: { freeze(): void; thaw(): void }, call: () => Promise<T>): Promise<{ result: T; ms: number }> {
  server.freeze();
  try {
    const started = performance.now();
    const result = await call();
    return { result, ms: performance.now() - started };
  } finally {
    server.thaw();
  }
}
