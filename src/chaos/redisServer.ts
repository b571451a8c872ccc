/**
 * A `redis-server` child process for the chaos harness: on a free port of 127.0.0.1, persistence
 * off, in a temporary directory, under the harness's control (SIGSTOP, SIGKILL, restart on the same
 * port, a failed background save). It talks to the server with `resp.ts` only, so it needs no Redis
 * client library, and imports only `node:` built-ins besides.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { openResp, parseInfo, type RespOptions, respOnce } from './resp.ts';

/** Options of {@link startRedisServer}. */
export type RedisServerOptions = {
  /** More `redis-server` arguments, after the harness's own (so they win), e.g. `['--maxmemory', '10mb']`. */
  readonly args?: readonly string[];
  /** How long the server may take to answer, at start and at each restart, ms. @default 10000 */
  readonly startTimeoutMs?: number;
};

/** A running `redis-server` child, from {@link startRedisServer}. */
export interface RedisServer {
  /** Always `127.0.0.1`. */
  readonly host: string;
  readonly port: number;
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
  /** The current process's pid: it changes on {@link RedisServer.restart}. */
  readonly pid: number;
  /** `redis-server --version`'s number, e.g. `7.2.4`. */
  readonly version: string;
  /**
   * SIGSTOP: the server keeps its socket, accepts connections, answers nothing.
   * @throws Error if the process is not running.
   */
  freeze(): void;
  /**
   * SIGCONT: undoes {@link RedisServer.freeze}.
   * @throws Error if the process is not running.
   */
  thaw(): void;
  /** SIGKILL; resolves once the process has exited. The data is lost. */
  kill(): Promise<void>;
  /**
   * Stops the process if it runs, then starts a new one on the same port, empty; resolves once it
   * answers `INFO` with its new pid.
   * @throws Error with the server's last output if the port cannot be had back or it does not answer in time.
   */
  restart(): Promise<void>;
  /**
   * Makes the server refuse writes as after a failed background save (`MISCONF`): starts a slowed
   * `BGSAVE` (one key written, `stop-writes-on-bgsave-error yes`) and kills its child process.
   * @throws Error if the save does not start, or is not reported as failed, within a few seconds.
   */
  failSave(): Promise<void>;
  /** Undoes {@link RedisServer.failSave}: writes allowed again, saves off. */
  allowWrites(): Promise<void>;
  /** `INFO <section>` as `field: value` pairs. @throws Error if the server does not answer within 2 s. */
  info(section?: string): Promise<Record<string, string>>;
  /** The server's last ~200 lines of output. */
  logs(): string;
  /** SIGTERM (SIGKILL after 2 s), waits for the exit, removes the directory. Safe to call twice. */
  close(): Promise<void>;
}

const HOST = '127.0.0.1';
const START_ATTEMPTS = 5;
const STOP_GRACE_MS = 2_000;
const PROBE_TIMEOUT_MS = 500;
const NOT_ON_PATH = 'redis-server is not on PATH: install it (apt-get install redis-server) or pass an external Redis';

/** Every child started and not yet exited: killed when this process exits, and their directories removed. */
const running = new Map<ChildProcess, { frozen: boolean }>();
const directories = new Set<string>();
let exitHookInstalled = false;

/**
 * Starts `redis-server` (found on PATH) on a free port of 127.0.0.1 with persistence off (`--save ''`,
 * `--appendonly no`) in a new temporary directory, and checks that the server answering on that port
 * is the process it started (`INFO server`'s `process_id`). The child is killed when this process exits.
 * @throws Error `redis-server is not on PATH: …` when it is missing; Error with the server's output
 *   when it does not start, or the port it was given is taken by another process, five times in a row.
 * @example
 * const redis = await startRedisServer();
 * redis.freeze(); // … the fault …
 * redis.thaw();
 * await redis.close();
 */
export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  const version = redisServerVersion();
  const timeoutMs = options.startTimeoutMs ?? 10_000;
  const dir = mkdtempSync(join(tmpdir(), 'resilimit-chaos-redis-'));
  directories.add(dir);
  const args = [
    ...['--bind', HOST, '--save', '', '--appendonly', 'no', '--protected-mode', 'no', '--dir', dir, '--daemonize', 'no'],
    // Redis 7 refuses DEBUG unless told; Redis 6 does not know the option.
    ...(Number(version.split('.')[0]) >= 7 ? ['--enable-debug-command', 'local'] : []),
    ...(options.args ?? []),
  ];
  const output = new Output();
  let child: ChildProcess | undefined;
  let port = 0;
  for (let attempt = 1; child === undefined; attempt++) {
    port = await freePort();
    const candidate = spawnServer(port, args, output);
    try {
      await awaitServer(candidate, port, timeoutMs);
      child = candidate;
    } catch (error) {
      await killChild(candidate);
      if (attempt >= START_ATTEMPTS) {
        removeDirectory(dir);
        throw output.explain(error);
      }
    }
  }
  return makeServer({ port, version, dir, args, output, timeoutMs }, child);
}

type Setup = { port: number; version: string; dir: string; args: readonly string[]; output: Output; timeoutMs: number };

function makeServer(setup: Setup, first: ChildProcess): RedisServer {
  const { port, output } = setup;
  let child = first;
  let closed = false;
  const address = { host: HOST, port, timeoutMs: 2_000 };
  const info = async (section = 'server'): Promise<Record<string, string>> => parseInfo(String(await respOnce(address, 'INFO', section)));
  return {
    host: HOST,
    port,
    url: `redis://${HOST}:${port}`,
    get pid() {
      return child.pid ?? -1;
    },
    version: setup.version,
    freeze: () => signal(child, 'SIGSTOP', true),
    thaw: () => signal(child, 'SIGCONT', false),
    kill: () => killChild(child),
    async restart() {
      if (closed) throw new Error(`redis-server on port ${port} is closed: it cannot restart`);
      await stopChild(child);
      for (let attempt = 1; ; attempt++) {
        const candidate = spawnServer(port, setup.args, output);
        try {
          await awaitServer(candidate, port, setup.timeoutMs);
          child = candidate;
          return;
        } catch (error) {
          await killChild(candidate);
          if (attempt >= START_ATTEMPTS - 1) throw output.explain(error);
          await sleep(250); // the old socket may linger a moment
        }
      }
    },
    async failSave() {
      // The save's child sleeps per key (rdb-key-save-delay, µs), so that it is there to be killed:
      // a save ended by a signal counts as failed.
      await commands(address, [
        ['CONFIG', 'SET', 'save', '3600 1'],
        ['CONFIG', 'SET', 'stop-writes-on-bgsave-error', 'yes'],
        ['CONFIG', 'SET', 'rdb-key-save-delay', '200000'],
        ['SET', 'resilimit:chaos:save', '1'],
        ['BGSAVE'],
      ]);
      await killSaveChild(child.pid ?? -1);
      for (let i = 0; ; i++) {
        const persistence = await info('persistence');
        if (persistence['rdb_bgsave_in_progress'] === '0' && persistence['rdb_last_bgsave_status'] === 'err') return;
        if (i > 500) throw new Error(`redis-server on port ${port}: the killed save was not reported as failed`);
        await sleep(10);
      }
    },
    async allowWrites() {
      await commands(address, [
        ['CONFIG', 'SET', 'stop-writes-on-bgsave-error', 'no'],
        ['CONFIG', 'SET', 'save', ''],
        ['CONFIG', 'SET', 'rdb-key-save-delay', '0'],
      ]);
    },
    info,
    logs: () => output.last(200),
    async close() {
      closed = true;
      await stopChild(child);
      removeDirectory(setup.dir);
    },
  };
}

/** Sends `list` in order over one connection (one `CONFIG SET` per parameter: Redis 6 takes no more). */
async function commands(address: RespOptions, list: readonly (readonly string[])[]): Promise<void> {
  const connection = await openResp(address);
  try {
    for (const args of list) await connection.command(...args);
  } finally {
    connection.close();
  }
}

/**
 * The version `redis-server --version` prints.
 * @throws Error {@link NOT_ON_PATH} when there is no `redis-server` to run.
 */
function redisServerVersion(): string {
  let text: string;
  try {
    text = execFileSync('redis-server', ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 10_000 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(NOT_ON_PATH, { cause: error });
    throw new Error(`redis-server --version failed: ${(error as Error).message}`, { cause: error });
  }
  return /\bv=(\d+\.\d+\.\d+)/.exec(text)?.[1] ?? '0.0.0';
}

function spawnServer(port: number, args: readonly string[], output: Output): ChildProcess {
  const child = spawn('redis-server', ['--port', String(port), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (chunk: Buffer) => output.add(chunk));
  child.stderr?.on('data', (chunk: Buffer) => output.add(chunk));
  running.set(child, { frozen: false });
  child.once('exit', () => running.delete(child));
  child.on('error', (error) => {
    output.add(Buffer.from(`spawn redis-server: ${error.message}\n`));
    // A failed spawn emits 'error' and no 'exit': forget the child and wake whoever waits for its exit.
    if (child.pid === undefined && running.delete(child)) child.emit('exit', null, null);
  });
  installExitHook();
  return child;
}

/** Polls until `INFO server` answers on `port` and its `process_id` is this child's pid. */
async function awaitServer(child: ChildProcess, port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!running.has(child)) throw new Error(`redis-server on port ${port} exited as it started`);
    const text = await respOnce({ host: HOST, port, timeoutMs: PROBE_TIMEOUT_MS }, 'INFO', 'server').catch(() => undefined);
    if (text !== undefined) {
      const pid = parseInfo(String(text))['process_id'];
      if (pid === String(child.pid)) return;
      throw new Error(`port ${port} is served by pid ${pid}, not by the redis-server started (pid ${child.pid})`);
    }
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer within ${timeoutMs} ms`);
    await sleep(50);
  }
}

/** Kills the child `BGSAVE` forked from `pid`, once it appears. */
async function killSaveChild(pid: number): Promise<void> {
  for (let i = 0; i <= 200; i++) {
    const children = childPids(pid);
    if (children.length > 0) {
      for (const child of children) process.kill(child, 'SIGKILL');
      return;
    }
    await sleep(10);
  }
  throw new Error(`redis-server (pid ${pid}): the background save did not start`);
}

/** The pids of `pid`'s children: from /proc on Linux, else from `pgrep -P`. */
function childPids(pid: number): number[] {
  const proc = `/proc/${pid}/task/${pid}/children`;
  const text = existsSync(proc)
    ? readFileSync(proc, 'utf8')
    : execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  return text
    .split(/\s+/)
    .filter((word) => /^\d+$/.test(word))
    .map(Number);
}

function signal(child: ChildProcess, name: NodeJS.Signals, frozen: boolean): void {
  const state = running.get(child);
  if (state === undefined) throw new Error(`redis-server (pid ${child.pid}) is not running: cannot send ${name}`);
  child.kill(name);
  state.frozen = frozen;
}

/** Resolves once `child` has exited (at once if it has). */
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
  if (state === undefined) return;
  const done = exited(child);
  if (state.frozen) child.kill('SIGCONT'); // a stopped process would not act on SIGTERM
  child.kill('SIGTERM');
  const escalate = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
  await done;
  clearTimeout(escalate);
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of running.keys()) child.kill('SIGKILL');
    for (const dir of directories) removeDirectory(dir);
  });
}

function removeDirectory(dir: string): void {
  directories.delete(dir);
  try {
    rmSync(dir, { recursive: true, force: true });
  } catch {
    // best effort: a temporary directory
  }
}

/** A port of 127.0.0.1 free when this resolves (nothing listens on it). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, HOST, () => {
      const bound = server.address();
      const port = typeof bound === 'object' && bound !== null ? bound.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** The server's output, the last ~64 kB of it. */
class Output {
  #text = '';

  add(chunk: Buffer): void {
    this.#text += chunk.toString();
    if (this.#text.length > 64_000) this.#text = this.last(200);
  }

  last(lines: number): string {
    return this.#text.split('\n').slice(-lines).join('\n');
  }

  /** `error` with the server's last output appended. */
  explain(error: unknown): Error {
    const message = error instanceof Error ? error.message : String(error);
    return new Error(`${message}\n--- redis-server output ---\n${this.last(200)}`, { cause: error });
  }
}
