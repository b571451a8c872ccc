import type { RedisPort } from '../client/port.js';

/** The prefixes of the open limiters of each client, with how many use each. */
const inUse = new WeakMap<RedisPort, Map<string, number>>();

/**
 * Notes that a limiter uses `prefix` on `client` until the returned release is called (`close()`),
 * and warns (`RESILIMIT_SHARED_PREFIX`) when another open limiter uses it already: two limiters with
 * one prefix on one Redis share their windows (a limit-3 limiter admitted 2 after a limit-100 one
 * used the key once, and one's trimming deletes the other's calls) and count each other as instances
 * (each one's local share shrinks). Almost always a missing `prefix`, or one copied from another limiter.
 */
export function claimPrefix(client: RedisPort, prefix: string): () => void {
  let prefixes = inUse.get(client);
  if (prefixes === undefined) inUse.set(client, (prefixes = new Map()));
  const users = (prefixes.get(prefix) ?? 0) + 1;
  prefixes.set(prefix, users);
  if (users === 2) {
    process.emitWarning(
      `Two open ResilientLimiters use the prefix ${JSON.stringify(prefix)} on one Redis client: they share their windows ` +
        '(those of one `resolutionMs`) and count each other as instances. Give each limiter its own `prefix` (a limiter per limit, one prefix each).',
      { type: 'ResilimitWarning', code: 'RESILIMIT_SHARED_PREFIX' },
    );
  }
  let released = false;
  return () => {
    if (released) return;
    released = true;
    const left = (prefixes.get(prefix) ?? 1) - 1;
    if (left === 0) prefixes.delete(prefix);
    else prefixes.set(prefix, left);
  };
}
