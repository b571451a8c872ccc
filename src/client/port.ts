import type { Script } from '../base/wire.js';

/** A script's arguments after its keys: Redis takes them as strings (numbers are written in decimal). */
export type ScriptArgs = readonly (string | number)[];

/** What a port reports: the client is ready (again), it failed, or (a Cluster) a node is ready again after start-up. */
export type PortEvent = 'ready' | 'error' | 'node';

/**
 * The one narrow way the limiter talks to Redis, whatever the client: each client library is an
 * adapter to it (`adapters/ioredis.ts`, `adapters/nodeRedis.ts`, `adapters/glide.ts`). The tiers, the
 * recovery and the watches use nothing else of the user's client.
 *
 * Contract, checked for every adapter by `test/integration/adapters.test.ts` against a real server:
 * - a server's error reply rejects with an error named `ReplyError` (ioredis's own, or {@link ReplyError})
 *   whose message starts with Redis's code (`WRONGTYPE …`, `NOSCRIPT …`, `BUSY …`); anything else (connection lost, client offline, the client's
 *   own timeout) rejects with the client's error, which counts as "Redis cannot answer";
 * - `run` sends `EVALSHA` and, on `NOSCRIPT`, the source (`EVAL`); `eval` sends the source at once;
 *   on a Cluster both go to the master of the keys' slot (the keys of one call share a slot);
 * - nothing is sent while `ready` is false is the caller's rule (the tier checks it before each call).
 */
export interface RedisPort {
  /** The user's client, as given: never closed by the limiter. */
  readonly client: object;
  /** Which library the client is from, for messages. */
  readonly library: 'ioredis' | 'node-redis' | 'valkey-glide';
  readonly isCluster: boolean;
  /** The client is connected and can send now. */
  readonly ready: boolean;
  /** The client was closed for good: it never will be ready. */
  readonly ended: boolean;
  /** The client's own word for its state (`ready`, `connecting`, `reconnecting`, `end`, …), for messages. */
  readonly status: string;
  /** Runs a script by SHA, and by its source when the server does not know it (`NOSCRIPT`). */
  run(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown>;
  /**
   * Runs a script by its source (`EVAL`), never by SHA: for a write that must reach Redis before the
   * commands sent after it (by SHA, a server that does not know the script answers `NOSCRIPT`, and the
   * retry by source would go out behind them).
   */
  eval(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown>;
  del(key: string): Promise<unknown>;
  /** `TIME`: seconds and microseconds (a single server; a Cluster has no one clock). */
  time(): Promise<readonly [string | number, string | number]>;
  ping(): Promise<unknown>;
  /** `INFO <sections…>` of every master: one text per master (one on a single server). */
  info(...sections: string[]): Promise<string[]>;
  /** Listens to `event` until the returned function is called (`node`: a Cluster's node is ready again). */
  on(event: PortEvent, listener: (arg?: unknown) => void): () => void;
  /** Where the client connects, without credentials, for messages. */
  describe(): string;
  /** Settings that make calls wait or replay while Redis is down, as sentences (empty: none). */
  unsafeSettings(): string[];
  /**
   * Closes the client for good (`closeRedisClient`): a polite close that waits at most `timeoutMs`
   * (0: none), then drops the connections. Never rejects.
   */
  close(timeoutMs: number): Promise<void>;
}

/**
 * A server's error reply, as every adapter gives it: `message` starts with Redis's error code. Named
 * `ReplyError` as ioredis names its own, which passes through unchanged (see `isRedisUnavailable`).
 */
export class ReplyError extends Error {
  override readonly name = 'ReplyError';
}

/** Whether `error` is Redis's `NOSCRIPT` reply: the server does not know the script (fresh, restarted or flushed). */
export function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/** The `EVALSHA` or `EVAL` command of `script` as text, for the clients that send a command as an array of strings. */
export function scriptCommand(by: 'EVALSHA' | 'EVAL', script: Script, keys: readonly string[], args: ScriptArgs): string[] {
  return [by, by === 'EVALSHA' ? script.sha : script.source, String(keys.length), ...keys, ...args.map(String)];
}

/** Listens to `event` on a Node `EventEmitter` client, raising its listener cap by one while it does (each limiter adds its own). */
export function listenOn(
  // biome-ignore lint/suspicious/noExplicitAny: the clients type their listeners' arguments as any
  emitter: { on(e: string, l: (...a: any[]) => void): unknown; off(e: string, l: (...a: any[]) => void): unknown } & MaxListeners,
  event: string,
  listener: (arg?: unknown) => void,
): () => void {
  const max = emitter.getMaxListeners();
  if (max !== 0) emitter.setMaxListeners(max + 1);
  emitter.on(event, listener);
  let on = true;
  return () => {
    if (!on) return;
    on = false;
    emitter.off(event, listener);
    const now = emitter.getMaxListeners();
    if (now !== 0) emitter.setMaxListeners(Math.max(now - 1, 1));
  };
}

type MaxListeners = { getMaxListeners(): number; setMaxListeners(n: number): unknown };
