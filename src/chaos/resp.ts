/**
 * A minimal RESP2 client over `node:net` (`node:tls` when asked) for the chaos harness's admin and
 * read-only commands (PING, INFO, CONFIG, FLUSHALL, DEBUG…), with no Redis client library: the harness
 * runs whichever client the user has. No reconnection, RESP3 or pub/sub; bulk strings decode as UTF-8,
 * integers as numbers (exact to 2^53). Only `node:` imports: it runs from source (type stripping) too.
 */
import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';

/** A reply: simple and bulk strings, integers, a null bulk string or array, arrays (nested). */
export type RespReply = string | number | null | readonly RespItem[];
/** An element of an array reply: a command inside `EXEC` may fail alone, so an error can be one. */
export type RespItem = RespReply | RespError;

/** Where a Redis server is and how to log in; what {@link openResp} and {@link respOnce} take. */
export type RespOptions = {
  readonly host: string;
  readonly port: number;
  /** ACL user; sent as `AUTH username password`, and only with a password. */
  readonly username?: string | undefined;
  /** Sent as `AUTH` once connected, before any command. */
  readonly password?: string | undefined;
  /** `true`: TLS with Node's defaults (the host name checked against the certificate); or the options for `tls.connect`. */
  readonly tls?: boolean | ConnectionOptions | undefined;
  /** `SELECT`ed once connected, when not 0. */
  readonly db?: number | undefined;
  /** The deadline of the connect and of each command, ms. @default 2000 */
  readonly timeoutMs?: number | undefined;
};

/** An open connection, from {@link openResp}. */
export interface RespConnection {
  /** `host:port` (`[::1]:6379` for IPv6), as error messages name it. */
  readonly address: string;
  /**
   * Sends one command; calls made without waiting are pipelined and answered in order.
   * @throws {RespError} when the server answers with an error (its message is the server's).
   * @throws Error naming the address and the command when no reply comes within the deadline (the
   *   connection is then closed: a late reply would answer the wrong command), or the connection fails or is closed.
   * @throws TypeError when an argument is neither a string nor a finite number.
   */
  command(...args: readonly (string | number)[]): Promise<RespReply>;
  /** Closes the socket at once; commands still waiting fail. Safe to call twice. */
  close(): void;
}

/** An error reply of the server; `message` is the server's text, e.g. `ERR unknown command 'NOPE'…`. */
export class RespError extends Error {
  override readonly name = 'RespError';
  /** The message's first word, e.g. `ERR`, `WRONGPASS`, `NOAUTH`, `MISCONF`. */
  readonly code: string;
  /** The server's `host:port`, once the reply has reached its command. */
  readonly address: string | undefined;
  /** The command it answered (its name, never its arguments), once the reply has reached its command. */
  readonly command: string | undefined;

  constructor(message: string, context: { readonly address?: string; readonly command?: string } = {}) {
    super(message);
    this.code = message.split(' ', 1)[0] ?? '';
    this.address = context.address;
    this.command = context.command;
  }
}

const DEFAULT_TIMEOUT_MS = 2_000;
const DEFAULT_PORT = 6379;
const MAX_DEPTH = 64;
const CRLF = Buffer.from('\r\n');

/**
 * Turns the bytes a server sends into replies, however they are cut into chunks.
 * @example
 * const parser = new RespParser();
 * parser.push(Buffer.from('+PO')); // []
 * parser.push(Buffer.from('NG\r\n')); // ['PONG']
 */
export class RespParser {
  #buffer: Buffer = Buffer.alloc(0);

  /**
   * Adds a chunk; returns the replies it completed, in order (error replies as {@link RespError}).
   * @throws Error on bytes that are not RESP2; the parser is then unusable.
   */
  push(chunk: Buffer): RespItem[] {
    this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk]);
    const replies: RespItem[] = [];
    let offset = 0;
    for (let parsed = parseAt(this.#buffer, 0, 0); parsed !== undefined; parsed = parseAt(this.#buffer, offset, 0)) {
      replies.push(parsed.value);
      offset = parsed.next;
    }
    this.#buffer = this.#buffer.subarray(offset);
    return replies;
  }
}

type Parsed = { readonly value: RespItem; readonly next: number } | undefined;

/** The value starting at `offset`, or undefined while its bytes have not all arrived. */
function parseAt(buffer: Buffer, offset: number, depth: number): Parsed {
  if (depth > MAX_DEPTH) throw new Error(`RESP arrays nested deeper than ${MAX_DEPTH}`);
  const eol = buffer.indexOf(CRLF, offset);
  if (eol < 0) return undefined;
  const line = buffer.toString('utf8', offset + 1, eol);
  const next = eol + 2;
  switch (String.fromCharCode(buffer[offset] ?? 0)) {
    case '+':
      return { value: line, next };
    case '-':
      return { value: new RespError(line), next };
    case ':':
      return { value: integer(line), next };
    case '$':
      return bulkAt(buffer, integer(line), next);
    case '*':
      return arrayAt(buffer, integer(line), next, depth);
    default:
      throw new Error(
        `not RESP2: type byte 0x${(buffer[offset] ?? 0).toString(16).padStart(2, '0')} in ${JSON.stringify(line.slice(0, 40))}`,
      );
  }
}

function bulkAt(buffer: Buffer, length: number, start: number): Parsed {
  if (length === -1) return { value: null, next: start };
  if (length < 0) throw new Error(`not RESP2: bulk string of length ${length}`);
  const end = start + length;
  if (buffer.length < end + 2) return undefined;
  if (buffer[end] !== 0x0d || buffer[end + 1] !== 0x0a) throw new Error(`not RESP2: bulk string of length ${length} not followed by CRLF`);
  return { value: buffer.toString('utf8', start, end), next: end + 2 };
}

function arrayAt(buffer: Buffer, count: number, start: number, depth: number): Parsed {
  if (count === -1) return { value: null, next: start };
  if (count < 0) throw new Error(`not RESP2: array of length ${count}`);
  const items: RespItem[] = [];
  let next = start;
  for (let i = 0; i < count; i++) {
    const parsed = parseAt(buffer, next, depth + 1);
    if (parsed === undefined) return undefined;
    items.push(parsed.value);
    next = parsed.next;
  }
  return { value: items, next };
}

function integer(line: string): number {
  if (!/^-?\d+$/.test(line)) throw new Error(`not RESP2: expected an integer, got ${JSON.stringify(line.slice(0, 40))}`);
  return Number(line);
}

/**
 * A command as RESP2 sends it: an array of bulk strings.
 * @throws TypeError when an argument is neither a string nor a finite number.
 */
export function encodeCommand(args: readonly (string | number)[]): Buffer {
  const parts: string[] = [`*${args.length}\r\n`];
  for (const arg of args) {
    if (typeof arg === 'number' ? !Number.isFinite(arg) : typeof arg !== 'string') {
      throw new TypeError(
        `Expected every argument of a Redis command to be a string or a finite number, got ${String(arg)} (${typeof arg})`,
      );
    }
    const text = String(arg);
    parts.push(`$${Buffer.byteLength(text)}\r\n${text}\r\n`);
  }
  return Buffer.from(parts.join(''));
}

/** Commands whose first argument says what they do: error messages name both words. */
const WITH_SUBCOMMAND = new Set(['ACL', 'CLIENT', 'CLUSTER', 'CONFIG', 'DEBUG', 'FUNCTION', 'INFO', 'MEMORY', 'OBJECT', 'SCRIPT']);

/** How an error names a command: its name (and subcommand), never the rest (a password may follow). */
function commandName(args: readonly (string | number)[]): string {
  const name = String(args[0] ?? '').toUpperCase();
  return WITH_SUBCOMMAND.has(name) && args[1] !== undefined ? `${name} ${String(args[1])}` : name;
}

/** `host:port`, with brackets around an IPv6 host. */
export function joinHostPort(host: string, port: number): string {
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}

type Pending = { name: string; resolve: (reply: RespReply) => void; reject: (error: Error) => void; timer: NodeJS.Timeout };

class Connection implements RespConnection {
  readonly address: string;
  readonly #socket: Socket;
  readonly #timeoutMs: number;
  readonly #parser = new RespParser();
  readonly #pending: Pending[] = [];
  /** Why the connection is closed, once it is. */
  #closed: string | undefined;

  constructor(socket: Socket, address: string, timeoutMs: number) {
    this.address = address;
    this.#socket = socket;
    this.#timeoutMs = timeoutMs;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', (error) => this.#fail(`the connection failed: ${error.message}`, error));
    socket.on('close', () => this.#fail('the server closed the connection'));
  }

  async command(...args: readonly (string | number)[]): Promise<RespReply> {
    const name = commandName(args);
    if (args.length === 0) throw new TypeError('Expected a Redis command, got no arguments');
    if (this.#closed !== undefined) throw new Error(`Redis ${this.address}: ${name}: ${this.#closed}`);
    const encoded = encodeCommand(args);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.#timeout(), this.#timeoutMs);
      this.#pending.push({ name, resolve, reject, timer });
      this.#socket.write(encoded);
    });
  }

  close(): void {
    this.#fail('the connection was closed (close())');
  }

  #onData(chunk: Buffer): void {
    let replies: RespItem[];
    try {
      replies = this.#parser.push(chunk);
    } catch (error) {
      this.#fail(`unreadable reply: ${(error as Error).message}`, error);
      return;
    }
    for (const reply of replies) {
      const pending = this.#pending.shift();
      if (pending === undefined) {
        this.#fail('the server sent a reply no command asked for');
        return;
      }
      clearTimeout(pending.timer);
      if (reply instanceof RespError) pending.reject(new RespError(reply.message, { address: this.address, command: pending.name }));
      else pending.resolve(reply);
    }
  }

  /** The oldest command's deadline passed: it fails, and so does the connection (a late reply would answer the wrong command). */
  #timeout(): void {
    const late = this.#pending.shift();
    if (late === undefined) return;
    const why = `no reply within ${this.#timeoutMs} ms`;
    late.reject(new Error(`Redis ${this.address}: ${late.name}: ${why}; the connection is closed`));
    this.#fail(`abandoned: ${late.name} before it got ${why}, and the connection was closed`);
  }

  #fail(why: string, cause?: unknown): void {
    this.#closed ??= why;
    this.#socket.destroy();
    for (const pending of this.#pending.splice(0)) {
      clearTimeout(pending.timer);
      pending.reject(new Error(`Redis ${this.address}: ${pending.name}: ${why}`, cause === undefined ? undefined : { cause }));
    }
  }
}

/**
 * Connects, then sends `AUTH` (with the username when given) and `SELECT` (when `db` is not 0).
 * @throws Error naming the address when the connect fails or takes longer than `timeoutMs`, or when
 *   `AUTH` or `SELECT` is refused (the server's {@link RespError} as its cause).
 * @throws TypeError when `timeoutMs` is not a positive number.
 * @example
 * const redis = await openResp({ host: '127.0.0.1', port: 6379, timeoutMs: 500 });
 * try {
 *   await redis.command('PING'); // 'PONG'
 * } finally {
 *   redis.close();
 * }
 */
export async function openResp(options: RespOptions): Promise<RespConnection> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!(typeof timeoutMs === 'number' && timeoutMs > 0 && timeoutMs < 2 ** 31)) {
    throw new TypeError(`Expected \`timeoutMs\` to be a positive number of ms, got ${String(timeoutMs)} (${typeof timeoutMs})`);
  }
  const address = joinHostPort(options.host, options.port);
  const connection = new Connection(await connectSocket(options, address, timeoutMs), address, timeoutMs);
  try {
    if (options.password !== undefined) {
      const credentials = options.username !== undefined ? [options.username, options.password] : [options.password];
      await connection.command('AUTH', ...credentials);
    }
    if (options.db !== undefined && options.db !== 0) await connection.command('SELECT', options.db);
  } catch (error) {
    connection.close();
    const refused = error instanceof RespError ? `${error.command} was refused: ${error.message}` : (error as Error).message;
    throw new Error(`Redis ${address}: ${refused}`, { cause: error });
  }
  return connection;
}

function connectSocket(options: RespOptions, address: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const { host, port, tls } = options;
    const socket =
      tls === undefined || tls === false
        ? netConnect({ host, port })
        : tlsConnect({ ...(isIP(host) === 0 ? { servername: host } : {}), ...(tls === true ? {} : tls), host, port });
    let settled = false;
    const settle = (error?: Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (error === undefined) resolve(socket);
      else {
        socket.destroy();
        reject(error);
      }
    };
    const timer = setTimeout(() => settle(new Error(`Redis ${address}: could not connect within ${timeoutMs} ms`)), timeoutMs);
    socket.once(tls === undefined || tls === false ? 'connect' : 'secureConnect', () => settle());
    // Stays attached once connected (then a no-op): the connection's own listener takes over.
    socket.on('error', (error) => settle(new Error(`Redis ${address}: cannot connect: ${error.message}`, { cause: error })));
  });
}

/**
 * Opens a connection, sends one command and closes: for a probe or a single admin command.
 * @param address where, as {@link RespOptions} or a `redis://` / `rediss://` URL (see {@link parseRedisUrl}).
 * @throws what {@link openResp}, {@link RespConnection.command} and {@link parseRedisUrl} throw.
 * @example
 * const info = parseInfo(String(await respOnce('redis://127.0.0.1:6379', 'INFO', 'server')));
 */
export async function respOnce(address: RespOptions | string, ...args: readonly (string | number)[]): Promise<RespReply> {
  const connection = await openResp(typeof address === 'string' ? parseRedisUrl(address) : address);
  try {
    return await connection.command(...args);
  } finally {
    connection.close();
  }
}

/** The text of an `INFO` reply as `field: value` pairs (section headers and blank lines left out). */
export function parseInfo(text: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields[line.slice(0, colon)] = line.slice(colon + 1);
  }
  return fields;
}

/** A Redis URL's parts, ready for {@link openResp}. */
export type RedisUrl = {
  readonly host: string;
  readonly port: number;
  readonly username?: string;
  readonly password?: string;
  /** `rediss:` */
  readonly tls: boolean;
  readonly db?: number;
};

const URL_SHAPE = 'redis://[[username]:password@]host[:port][/db] or rediss://… (TLS)';

/**
 * Reads `redis://[[username]:password@]host[:port][/db]` or `rediss://…` (TLS); an IPv6 host in
 * brackets (`redis://[::1]:6379`), user and password percent-decoded, the port 6379 when none is given.
 * @throws Error naming the expected shape and what was given (its password hidden): not a string,
 *   not a URL, another scheme, `host:port` without a scheme, no host, a path other than a database
 *   number, a query or a fragment.
 */
export function parseRedisUrl(url: string): RedisUrl {
  const shown = typeof url === 'string' ? JSON.stringify(hidePassword(url)) : String(url);
  const bad = (why: string): Error => new Error(`Expected a Redis URL, ${URL_SHAPE}, got ${shown} (${why})`);
  if (typeof url !== 'string') throw bad(`${url === null ? 'null' : typeof url}, not a string`);
  const hostPort = /^[^/:@]+:\d+$/.test(url);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw bad(hostPort ? 'host:port without redis://' : 'not a URL');
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw bad(hostPort ? 'host:port without redis://' : `a URL of scheme ${parsed.protocol}`);
  }
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  if (host === '') throw bad('no host');
  if (parsed.search !== '' || parsed.hash !== '') throw bad('a query or fragment, which is not read');
  const path = parsed.pathname;
  if (path !== '' && path !== '/' && !/^\/\d+$/.test(path)) throw bad(`the path ${path} is not a database number`);
  const port = parsed.port === '' ? DEFAULT_PORT : Number(parsed.port);
  if (port === 0) throw bad('port 0');
  return {
    host,
    port,
    ...(parsed.username !== '' ? { username: decodeURIComponent(parsed.username) } : {}),
    ...(parsed.password !== '' ? { password: decodeURIComponent(parsed.password) } : {}),
    tls: parsed.protocol === 'rediss:',
    ...(path.length > 1 ? { db: Number(path.slice(1)) } : {}),
  };
}

/** The URL with whatever stands between `:` and `@` after the scheme replaced by `***`. */
function hidePassword(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^/@:]*:)[^@/]*@/i, '$1***@');
}
