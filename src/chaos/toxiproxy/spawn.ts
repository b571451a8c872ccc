import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import { extname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** A running stand-in server, started by {@link startToxiproxyServer}. */
export interface ToxiproxyServer {
  /** The API's base URL, e.g. `http://127.0.0.1:41234`, for `new Toxiproxy(url)`. */
  readonly url: string;
  /** The server process's pid. */
  readonly pid: number;
  /** SIGTERM (SIGKILL after 2 s); resolves once the process has exited. Safe to call twice. */
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Seed for every random draw of the server (toxicity, jitter, slicing). @default random */
  readonly seed?: number;
}

/**
 * `main` beside this file, with this file's own extension: `main.ts` when run from source (Node's
 * type stripping, vitest), `main.js` once compiled into `dist/chaos/toxiproxy/`.
 */
const MAIN = fileURLToPath(new URL(`./main${extname(new URL(import.meta.url).pathname)}`, import.meta.url));
const START_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 2_000;

/**
 * Starts the stand-in in a child process (`process.execPath main.ts`, or `main.js` when compiled) on a free port of 127.0.0.1.
 * Checks that it is the process it started: the pid the server prints must be the child's, and
 * `GET /version` must answer on the URL it prints. The child is killed on `stop()` and when this
 * process exits; it also exits by itself when this process dies, as its stdin then closes.
 * @throws Error with the child's stderr if it does not start within 10 s.
 * @example
 * const server = await startToxiproxyServer({ seed: 1 });
 * const toxiproxy = new Toxiproxy(server.url);
 * // …
 * await server.stop();
 */
export async function startToxiproxyServer(options: StartOptions = {}): Promise<ToxiproxyServer> {
  const args = [MAIN, '--host', '127.0.0.1', '--port', '0'];
  if (options.seed !== undefined) args.push('--seed', String(options.seed));
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (data: Buffer) => {
    stderr = (stderr + data.toString()).slice(-8_000);
  });
  const killOnExit = (): void => void child.kill('SIGKILL');
  process.on('exit', killOnExit);
  const stop = async (): Promise<void> => {
    process.off('exit', killOnExit);
    await stopChild(child);
  };
  try {
    const announced = parseAnnouncement(await firstLine(child));
    if (announced.pid !== child.pid) {
      throw new Error(`the server says it is pid ${announced.pid}, but the child started is pid ${child.pid}`);
    }
    await expectVersion(announced.api);
    // Neither the child nor its pipes keep this process alive; stdin stays open as its lifeline.
    child.unref();
    for (const stream of [child.stdin, child.stdout, child.stderr]) unref(stream);
    return { url: announced.api, pid: announced.pid, stop };
  } catch (error) {
    await stop();
    throw new Error(`The Toxiproxy stand-in did not start: ${(error as Error).message}\n${stderr}`, { cause: error });
  }
}

/** The first line the child prints, or an error if it exits or stays silent first. */
async function firstLine(child: ChildProcessWithoutNullStreams): Promise<string> {
  const lines = createInterface({ input: child.stdout });
  const timeout = AbortSignal.timeout(START_TIMEOUT_MS);
  try {
    const [line] = (await Promise.race([
      once(lines, 'line', { signal: timeout }),
      once(child, 'exit', { signal: timeout }).then(([code, signal]) => {
        throw new Error(`it exited (code ${String(code)}, signal ${String(signal)}) before printing its address`);
      }),
    ])) as [string];
    return line;
  } catch (error) {
    if (timeout.aborted) throw new Error(`it printed nothing within ${START_TIMEOUT_MS} ms`);
    throw error;
  } finally {
    lines.close();
    child.stdout.resume(); // keep draining, so the child can never block on a full pipe
  }
}

function parseAnnouncement(line: string): { api: string; pid: number } {
  const value: unknown = JSON.parse(line);
  if (typeof value === 'object' && value !== null && 'api' in value && 'pid' in value) {
    const { api, pid } = value;
    if (typeof api === 'string' && typeof pid === 'number') return { api, pid };
  }
  throw new Error(`expected {"api": string, "pid": number}, got ${line}`);
}

async function expectVersion(url: string): Promise<void> {
  const response = await fetch(`${url}/version`, { signal: AbortSignal.timeout(2_000) });
  const body: unknown = await response.json();
  if (response.status !== 200 || typeof body !== 'object' || body === null || !('version' in body)) {
    throw new Error(`GET ${url}/version answered ${response.status}: ${JSON.stringify(body)}`);
  }
}

async function stopChild(child: ChildProcessWithoutNullStreams): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const escalate = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
  await exited;
  clearTimeout(escalate);
}

function unref(stream: object): void {
  if ('unref' in stream && typeof stream.unref === 'function') stream.unref();
}
