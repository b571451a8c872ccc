import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';

/** A Lua script shipped in `lua/`, with its SHA1 computed once. */
export type Script = { readonly name: string; readonly source: string; readonly sha: string };

/** Loads `lua/<name>.lua` (next to `src/` and `dist/` in the package). */
export function loadScript(name: string): Script {
  const source = readFileSync(new URL(`../lua/${name}.lua`, import.meta.url), 'utf8');
  return Object.freeze({ name, source, sha: createHash('sha1').update(source).digest('hex') });
}

/**
 * Runs a script by SHA, and by its source when the server does not know it (`NOSCRIPT`: a fresh,
 * restarted or flushed server). Nothing is defined on the user's client.
 */
export async function runScript(
  redis: Redis | Cluster,
  script: Script,
  keys: readonly string[],
  args: readonly (string | number)[],
): Promise<unknown> {
  try {
    return await redis.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    return redis.eval(script.source, keys.length, ...keys, ...args);
  }
}
