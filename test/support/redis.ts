/**
 * The one place tests get a Redis from. Always a real server, never a mock:
 * `REDIS_URL` if set, else a `redis-server` child process, else a container.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis, type RedisOptions } from 'ioredis';

/**
 * ioredis options for {@link RedisHandle.client}. `replyMapping` is left out because
 * `'resp3'` changes the client's type, which would no longer be a plain `Redis`.
 */
/** The port of a `redis://` URL that names none: a server we connect to (REDIS_URL), never one we start. */
const REDIS_URL_DEFAULT_PORT = 6379;

export type ClientOptions = Omit<RedisOptions, 'replyMapping'>;

/** A Redis server for one test file. */
export interface RedisHandle {
  readonly kind: 'external' | 'child' | 'container';
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** A new ioredis client to this server (caller's options win), tracked and closed by `close()`. */
  client(options?: ClientOptions): Redis;
  /** FLUSHALL on the server. */
  flush(): Promise<void>;
  /** Disconnects every tracked client and stops whatever was started. */
  close(): Promise<void>;
}

/** A `redis-server` child process under the test's control. */
export interface RedisChild extends RedisHandle {
  readonly kind: 'child';
  /** Pid of the current child process (changes on `restart()`). */
  readonly pid: number;
  /** SIGSTOP: the server keeps its socket but answers nothing. */
  freeze(): void;
  /** SIGCONT: undo `freeze()`. */
  thaw(): void;
  /** SIGKILL; resolves once the process has exited. Data is lost. */
  kill(): Promise<void>;
  /**
   * Starts a new process on the same port and data directory (stopping the current one
   * if needed). Empty unless `args` turned persistence back on. Throws, with logs, if
   * the port cannot be reclaimed.
   */
  restart(): Promise<void>;
  /** SIGTERM (SIGKILL after 2 s), waits for exit, removes the data directory. */
  stop(): Promise<void>;
  /** Last ~200 lines of the server's stdout/stderr. */
  logs(): string;
  /** `INFO <section>` parsed into key/value pairs, over a short-lived connection. */
  info(section?: string): Promise<Record<string, string>>;
}

const HOST = '127.0.0.1';
const running = new Map<ChildProcess, { frozen: boolean; dir: string }>();
let exitHookInstalled = false;

/** Resolves when `client.status` is `'ready'`; rejects after `timeoutMs`. */
export function waitReady(client: Redis, timeoutMs = 5_000): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onReady = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      client.off('ready', onReady);
      reject(new Error(`client not ready after ${timeoutMs} ms (status: ${client.status})`));
    }, timeoutMs);
    client.once('ready', onReady);
  });
}

/**
 * Kills `server` (its data is lost) and starts it again on its port; resolves once `client`, which
 * was ready, has reconnected (its next `'ready'`), so that what the limiter does on reconnect has begun.
 */
export async function restartEmpty(server: RedisChild, client: Redis, timeoutMs = 10_000): Promise<void> {
  const reconnected = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`client did not reconnect within ${timeoutMs} ms (status: ${client.status})`)),
      timeoutMs,
    );
    client.once('ready', () => {
      clearTimeout(timer);
      resolve();
    });
  });
  await server.kill();
  await server.restart();
  await reconnected;
}

/** A Redis for a test file: `REDIS_URL`, else a `redis-server` child, else a container. */
export async function useRedis(): Promise<RedisHandle> {
  const url = process.env['REDIS_URL'];
  if (url) {
    const u = new URL(url);
    const conn: ClientOptions = { host: u.hostname, port: Number(u.port || REDIS_URL_DEFAULT_PORT) };
    if (u.username) conn.username = decodeURIComponent(u.username);
    if (u.password) conn.password = decodeURIComponent(u.password);
    if (u.pathname.length > 1) conn.db = Number(u.pathname.slice(1));
    if (u.protocol === 'rediss:') conn.tls = {};
    return makeHandle('external', url, conn, async () => {});
  }
  if (findOnPath('redis-server')) return startRedisServer();
  process.env['TESTCONTAINERS_RYUK_DISABLED'] ??= 'true';
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
  } catch {
    throw new Error(
      'No Redis for the tests: set REDIS_URL, or install redis-server ' + '(apt-get install redis-server), or start a Docker engine.',
    );
  }
  const { RedisContainer } = await import('@testcontainers/redis');
  const started = await new RedisContainer('redis:7.0.15').start();
  const conn = { host: started.getHost(), port: started.getPort() };
  return makeHandle('container', started.getConnectionUrl(), conn, async () => {
    await started.stop();
  });
}

/**
 * Always a `redis-server` child process on a free port, for tests that need process control.
 * With `sentinel`, it runs as a Sentinel (`redis-server <config file> --sentinel`, so that only the
 * `redis-server` package is needed) whose config file holds those lines; Sentinel rewrites the file
 * with what it learns, and `restart()` keeps it.
 */
export async function startRedisServer(options: { args?: string[]; sentinel?: readonly string[] } = {}): Promise<RedisChild> {
  if (!findOnPath('redis-server')) {
    throw new Error('redis-server is not on PATH (apt-get install redis-server).');
  }
  const dir = mkdtempSync(join(tmpdir(), 'resilimit-redis-'));
  const extra = [...(options.args ?? [])];
  if (options.sentinel !== undefined) {
    const file = join(dir, 'sentinel.conf');
    writeFileSync(file, `${options.sentinel.join('\n')}\n`);
    // The config file must come first; the options on the command line after it (port, dir) override it.
    extra.unshift(file, '--sentinel');
  }
  let log = '';
  const appendLog = (chunk: Buffer): void => {
    log += chunk.toString();
    if (log.length > 64_000) log = lastLines(log, 200);
  };
  let child: ChildProcess | undefined;
  let port = 0;
  for (let attempt = 1; !child; attempt++) {
    port = await freePort();
    const candidate = spawnServer(port, dir, extra, appendLog);
    try {
      await awaitServer(candidate, port);
      child = candidate;
    } catch (err) {
      await killChild(candidate);
      if (attempt >= 5) {
        rmSync(dir, { recursive: true, force: true });
        throw withLogs(err, log);
      }
    }
  }
  const current = (): ChildProcess => child as ChildProcess;
  const stop = async (): Promise<void> => {
    await stopChild(current());
    rmSync(dir, { recursive: true, force: true });
  };
  const base = makeHandle('child', `redis://${HOST}:${port}`, { host: HOST, port }, stop);
  return {
    kind: 'child',
    url: base.url,
    host: HOST,
    port,
    get pid() {
      return current().pid as number;
    },
    client: base.client,
    flush: base.flush,
    close: base.close,
    stop,
    freeze() {
      signal(current(), 'SIGSTOP', true);
    },
    thaw() {
      signal(current(), 'SIGCONT', false);
    },
    kill: () => killChild(current()),
    async restart() {
      await stopChild(current());
      for (let attempt = 1; ; attempt++) {
        const candidate = spawnServer(port, dir, extra, appendLog);
        try {
          await awaitServer(candidate, port);
          child = candidate;
          return;
        } catch (err) {
          await killChild(candidate);
          if (attempt >= 4) throw withLogs(err, log);
          await sleep(250);
        }
      }
    },
    logs: () => lastLines(log, 200),
    info: (section = 'server') => infoOf({ host: HOST, port }, section),
  };
}

function makeHandle(kind: RedisHandle['kind'], url: string, conn: ClientOptions, stop: () => Promise<void>): RedisHandle {
  const clients = new Set<Redis>();
  return {
    kind,
    url,
    host: conn.host ?? HOST,
    port: conn.port ?? REDIS_URL_DEFAULT_PORT,
    client(options = {}) {
      const c = new Redis({ ...conn, ...options });
      c.on('error', () => {});
      clients.add(c);
      return c;
    },
    flush: () =>
      withProbe(conn, async (c) => {
        await c.flushall();
      }),
    async close() {
      for (const c of clients) c.disconnect();
      clients.clear();
      await stop();
    },
  };
}

/** Runs `fn` with a one-shot client that never retries or queues. */
export async function withProbe<T>(conn: ClientOptions, fn: (c: Redis) => Promise<T>): Promise<T> {
  const c = new Redis({
    ...conn,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    connectTimeout: 500,
    commandTimeout: 2_000,
  });
  c.on('error', () => {});
  try {
    await c.connect();
    return await fn(c);
  } finally {
    c.disconnect();
  }
}

async function infoOf(conn: ClientOptions, section: string): Promise<Record<string, string>> {
  const text = await withProbe(conn, (c) => c.info(section));
  const out: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0 && !line.startsWith('#')) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

function spawnServer(port: number, dir: string, extra: string[], onOutput: (chunk: Buffer) => void): ChildProcess {
  // A config file (with `--sentinel`) must come before every option.
  const leading = extra[1] === '--sentinel' ? extra.slice(0, 2) : [];
  const child = spawn(
    'redis-server',
    [
      ...leading,
      '--port',
      String(port),
      '--bind',
      HOST,
      '--save',
      '',
      '--appendonly',
      'no',
      '--protected-mode',
      'no',
      '--enable-debug-command',
      'local',
      '--dir',
      dir,
      '--daemonize',
      'no',
      ...extra.slice(leading.length),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout?.on('data', onOutput);
  child.stderr?.on('data', onOutput);
  child.once('exit', () => running.delete(child));
  child.on('error', () => {
    // Spawn failures emit 'error' without 'exit': forget the child and wake waiters.
    if (child.pid === undefined && running.delete(child)) child.emit('exit', null, null);
  });
  running.set(child, { frozen: false, dir });
  installExitHook();
  return child;
}

/** Polls until `INFO server` answers on `port` and its `process_id` is this child's pid. */
async function awaitServer(child: ChildProcess, port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!running.has(child)) throw new Error(`redis-server on port ${port} exited early`);
    const info = await infoOf({ host: HOST, port }, 'server').catch(() => undefined);
    if (info) {
      if (info['process_id'] === String(child.pid)) return;
      throw new Error(`port ${port} is served by pid ${info['process_id']}, not our child ${child.pid}`);
    }
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} not ready after ${timeoutMs} ms`);
    await sleep(50);
  }
}

function signal(child: ChildProcess, sig: NodeJS.Signals, frozen: boolean): void {
  const state = running.get(child);
  if (!state) throw new Error(`redis-server (pid ${child.pid}) is not running`);
  child.kill(sig);
  state.frozen = frozen;
}

/** Resolves once `child` has exited (immediately if it already has). */
function exited(child: ChildProcess): Promise<void> {
  if (!running.has(child)) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

async function killChild(child: ChildProcess): Promise<void> {
  const done = exited(child);
  if (running.has(child)) child.kill('SIGKILL');
  await done;
}

async function stopChild(child: ChildProcess): Promise<void> {
  const state = running.get(child);
  if (!state) return;
  const done = exited(child);
  if (state.frozen) child.kill('SIGCONT');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 2_000);
  await done;
  clearTimeout(timer);
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const [child, { frozen, dir }] of running) {
      if (frozen) child.kill('SIGCONT');
      child.kill('SIGKILL');
      try {
        rmSync(dir, { recursive: true, force: true });
      } catch {
        /* best effort */
      }
    }
  });
}

/** A port on 127.0.0.1 free now (nothing listens on it once this resolves). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function findOnPath(bin: string): boolean {
  return (process.env['PATH'] ?? '').split(delimiter).some((d) => {
    try {
      accessSync(join(d, bin), constants.X_OK);
      return d !== '';
    } catch {
      return false;
    }
  });
}

function lastLines(text: string, n: number): string {
  return text.split('\n').slice(-n).join('\n');
}

function withLogs(err: unknown, log: string): Error {
  const msg = err instanceof Error ? err.message : String(err);
  return new Error(`${msg}\n--- redis-server output ---\n${lastLines(log, 200)}`, { cause: err });
}

/** Throws unless every process of `pids` has exited: nothing a test started is left running. */
export function assertExited(pids: readonly number[]): void {
  const alive = pids.filter((pid) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  });
  if (alive.length > 0) throw new Error(`redis-server processes still alive after close: ${alive.join(', ')}`);
}
