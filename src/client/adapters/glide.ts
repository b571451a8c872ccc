import type { Script } from '../../base/wire.js';
import { isNoScript, ReplyError, type PortEvent, type RedisPort, type ScriptArgs, scriptCommand } from '../port.js';
import { isA } from './errorClass.js';

/**
 * What resilimit calls on a Valkey GLIDE 2 client (`GlideClient` or `GlideClusterClient`); typed by
 * shape, so that the package is not needed to build resilimit nor to use it with another client.
 */
export interface GlideClientLike {
  /** `options`: `{ route: 'allPrimaries' }` on a Cluster (typed `never`: the two clients type their options apart). */
  customCommand(args: string[], options?: never): Promise<unknown>;
  invokeScript(script: object, options?: object): Promise<unknown>;
  close(errorMessage?: string): void;
}

/** Whether `value` is a Valkey GLIDE client: `customCommand` and `invokeScript`. */
export function isGlide(value: object): boolean {
  const c = value as Partial<Record<'customCommand' | 'invokeScript' | 'close', unknown>>;
  return typeof c.customCommand === 'function' && typeof c.invokeScript === 'function' && typeof c.close === 'function';
}

/**
 * GLIDE's kinds of server error (redis-rs's, in "An error was signalled by the server: - <Kind>: …")
 * by Redis's code. Other server errors come as "<CODE>: …".
 */
const KINDS: Record<string, string> = {
  ResponseError: 'ERR',
  NoScriptError: 'NOSCRIPT',
  BusyLoadingError: 'LOADING',
  ExecAbortError: 'EXECABORT',
  TryAgain: 'TRYAGAIN',
  ClusterDown: 'CLUSTERDOWN',
  CrossSlot: 'CROSSSLOT',
  MasterDown: 'MASTERDOWN',
  ReadOnly: 'READONLY',
  AuthenticationFailed: 'NOAUTH',
  NotBusy: 'NOTBUSY',
  PermissionDenied: 'NOPERM',
  Moved: 'MOVED',
  Ask: 'ASK',
};

/** GLIDE's errors that are never a server's reply: its own timeout, a lost connection, a closed client, its own breaker. */
const NOT_A_REPLY = ['TimeoutError', 'ConnectionError', 'ClosingError', 'ConfigurationError', 'CircuitBreakerError'];

/**
 * A GLIDE error as the port gives it: a server's error reply as a {@link ReplyError} starting with
 * Redis's code; anything else as it is. A reply is told by its message only ("An error was signalled
 * by the server: - <Kind>: …", or "<CODE>: …"): GLIDE gives its own failures the same class
 * (`RequestError`: "Standalone connect failed - IoError: …"), and those mean Redis cannot answer.
 */
export function glideError(error: unknown): unknown {
  if (!(error instanceof Error) || NOT_A_REPLY.some((name) => isA(error, name))) return error;
  const kind = /^An error was signalled by the server: - (\w+): ?(.*)$/s.exec(error.message);
  if (kind !== null) return new ReplyError(`${KINDS[kind[1] as string] ?? kind[1]} ${kind[2]}`, { cause: error });
  const code = /^([A-Z][A-Z0-9_]*): (.*)$/s.exec(error.message);
  return code === null ? error : new ReplyError(`${code[1]} ${code[2]}`, { cause: error });
}

/**
 * The port over a Valkey GLIDE client. GLIDE connects when the client is made and reconnects by
 * itself, and has no events: the client counts as ready until it is closed, a call while Redis is
 * away fails (GLIDE's own `requestTimeout`, or the breaker's deadline, whichever comes first), and the
 * first reply after such a failure is reported as `ready` again (so that a restarted server is
 * checked for lost data, as with the other clients).
 */
export class GlidePort implements RedisPort {
  readonly library = 'valkey-glide';
  readonly isCluster: boolean;
  readonly #ready = new Set<(arg?: unknown) => void>();
  /** A call failed for want of Redis since the last reply. */
  #away = false;

  constructor(readonly client: GlideClientLike) {
    this.isCluster = typeof (client as { invokeScriptWithRoute?: unknown }).invokeScriptWithRoute === 'function';
  }

  get ended(): boolean {
    return (this.client as { isClosed?: boolean }).isClosed === true;
  }

  get ready(): boolean {
    return !this.ended;
  }

  get status(): string {
    return this.ended ? 'closed' : 'ready';
  }

  async run(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown> {
    try {
      return await this.#send(scriptCommand('EVALSHA', script, keys, args));
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return this.eval(script, keys, args);
    }
  }

  eval(script: Script, keys: readonly string[], args: ScriptArgs): Promise<unknown> {
    return this.#send(scriptCommand('EVAL', script, keys, args));
  }

  del(key: string): Promise<unknown> {
    return this.#send(['DEL', key]);
  }

  time(): Promise<readonly [string, string]> {
    return this.#send(['TIME']) as Promise<readonly [string, string]>;
  }

  ping(): Promise<unknown> {
    return this.#send(['PING']);
  }

  async info(...sections: string[]): Promise<string[]> {
    if (!this.isCluster) return [String(await this.#send(['INFO', ...sections]))];
    const byNode = await this.#send(['INFO', ...sections], { route: 'allPrimaries' });
    return Object.values(byNode as Record<string, string>).map(String);
  }

  on(event: PortEvent, listener: (arg?: unknown) => void): () => void {
    if (event !== 'ready') return () => {};
    this.#ready.add(listener);
    return () => this.#ready.delete(listener);
  }

  describe(): string {
    return this.isCluster ? 'a Valkey GLIDE Cluster client' : 'a Valkey GLIDE client';
  }

  unsafeSettings(): string[] {
    return [];
  }

  async close(): Promise<void> {
    if (!this.ended) this.client.close();
  }

  /** Sends a command (on a Cluster, GLIDE routes a script call by its keys); notes Redis's absence and its return. */
  async #send(args: string[], options?: { route: 'allPrimaries' }): Promise<unknown> {
    let reply: unknown;
    try {
      reply = await this.client.customCommand(args, options as never);
    } catch (error) {
      const mappedError = glideError(error);
      if (!(mappedError instanceof ReplyError)) this.#away = true;
      throw mappedError;
    }
    if (this.#away) {
      this.#away = false;
      for (const listener of this.#ready) listener();
    }
    return reply;
  }
}
