/**
 * @upstash/ratelimit speaks only the Upstash REST client. What its single-region limiters call on
 * it (read from its dist/index.mjs, 2.2.0): `evalsha(hash, keys[], args[])`, and `eval(script,
 * keys[], args[])` when the reply mentions NOSCRIPT; `get`/`set` only with dynamic limits. Replies
 * are the script's arrays of integers, as ioredis returns them.
 *
 * One incompatibility with open-source Redis: its scripts start with `#!lua flags=allow-key-locking`,
 * a flag of Upstash's own server that redis-server 7.0 refuses ("Unexpected flag in script
 * shebang"). The adapter drops that flag and maps Upstash's precomputed hash to the hash of the
 * script as sent, so that the hot path stays one EVALSHA per call, as it is on Upstash.
 */
import { createHash } from 'node:crypto';
import type { RatelimitConfig } from '@upstash/ratelimit';
import type { Redis } from 'ioredis';

type Arg = string | number | Buffer;

function sha1(text: string): string {
  return createHash('sha1').update(text).digest('hex');
}

function toArg(value: unknown): Arg {
  if (typeof value === 'string' || typeof value === 'number' || Buffer.isBuffer(value)) return value;
  return value === null || value === undefined ? '' : JSON.stringify(value);
}

/** The script without the Upstash-only `allow-key-locking` shebang flag. */
export function forOpenSourceRedis(script: string): string {
  return script.replace(/^#!lua flags=([^\n]*)/, (_, flags: string) => {
    const kept = flags.split(',').filter((flag) => flag.trim() !== 'allow-key-locking');
    return kept.length === 0 ? '#!lua' : `#!lua flags=${kept.join(',')}`;
  });
}

export function upstashAdapter(client: Redis): RatelimitConfig['redis'] {
  // Upstash's hash of a script → the hash of the script as this server received it.
  const sentSha = new Map<string, string>();
  const adapter = {
    evalsha(sha: string, keys: string[], args: unknown[]): Promise<unknown> {
      return client.evalsha(sentSha.get(sha) ?? sha, keys.length, ...keys, ...args.map(toArg));
    },
    eval(script: string, keys: string[], args: unknown[]): Promise<unknown> {
      const sent = forOpenSourceRedis(script);
      sentSha.set(sha1(script), sha1(sent));
      return client.eval(sent, keys.length, ...keys, ...args.map(toArg));
    },
    get(key: string): Promise<unknown> {
      return client.get(key).then((value) => (value === null ? null : JSON.parse(value)));
    },
    set(key: string, value: unknown): Promise<unknown> {
      return client.set(key, JSON.stringify(value));
    },
  };
  // Upstash's types are its whole client; at run time it calls only the methods above.
  return adapter as unknown as RatelimitConfig['redis'];
}
