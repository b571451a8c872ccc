/**
 * A client of Toxiproxy's HTTP API (2.x), on `fetch`: the part the chaos harness uses, against the
 * real Toxiproxy or the stand-in in `toxiproxy/` (see its README for the routes and their answers).
 * No dependency on `toxiproxy-node-client`; only `node:` built-ins and the stand-in's own files.
 */
import { splitHostPort } from './toxiproxy/address.ts';
import { startToxiproxyServer, type ToxiproxyServer } from './toxiproxy/spawn.ts';

export type { ToxiproxyServer } from './toxiproxy/spawn.ts';

/** Which way a toxic acts: `upstream` is client → server, `downstream` server → client. */
export type ToxicStream = 'upstream' | 'downstream';

/** The toxics the stand-in serves; the real Toxiproxy has a few more (`slow_close`, …). */
export type ToxicType = 'latency' | 'bandwidth' | 'timeout' | 'reset_peer' | 'slicer' | 'limit_data' | (string & {});

/** A toxic to add (see the stand-in's README for each type's attributes). */
export type ToxicSpec = {
  readonly name: string;
  readonly type: ToxicType;
  /** @default 'downstream' */
  readonly stream?: ToxicStream;
  /** The probability, 0 to 1, that it acts on a connection. @default 1 */
  readonly toxicity?: number;
  /** E.g. `{ latency: 200, jitter: 0 }` for `latency`. */
  readonly attributes?: Readonly<Record<string, number>>;
};

/** A toxic as the server reports it, defaults filled in. */
export type Toxic = {
  readonly name: string;
  readonly type: string;
  readonly stream: string;
  readonly toxicity: number;
  readonly attributes: Readonly<Record<string, number>>;
};

/** A proxy to create. */
export type ProxySpec = {
  readonly name: string;
  /** Where it listens; `127.0.0.1:0` lets the server pick a free port (see {@link ProxyInfo.port}). */
  readonly listen: string;
  /** Where it forwards to, as the Toxiproxy server reaches it, e.g. `127.0.0.1:6379`. */
  readonly upstream: string;
  /** @default true */
  readonly enabled?: boolean;
};

/** A proxy as the server reports it, with its listen address split. */
export type ProxyInfo = {
  readonly name: string;
  /** The address it is bound to, port 0 resolved, e.g. `127.0.0.1:41234`. */
  readonly listen: string;
  readonly upstream: string;
  readonly enabled: boolean;
  readonly toxics: readonly Toxic[];
  /** `listen`'s host, without brackets. */
  readonly host: string;
  /** `listen`'s port (0 only while a disabled proxy has never been bound). */
  readonly port: number;
};

/** A request the API refused or could not answer: `status` is undefined when no answer came. */
export class ToxiproxyApiError extends Error {
  override readonly name = 'ToxiproxyApiError';
  readonly method: string;
  readonly url: string;
  readonly status: number | undefined;

  constructor(message: string, request: { method: string; url: string; status?: number }, options?: ErrorOptions) {
    super(message, options);
    this.method = request.method;
    this.url = request.url;
    this.status = request.status;
  }
}

/**
 * The Toxiproxy API at `url`.
 * @example
 * const api = new ToxiproxyApi('http://127.0.0.1:8474');
 * const proxy = await api.createProxy({ name: 'redis', listen: '127.0.0.1:0', upstream: '127.0.0.1:6379' });
 * await api.addToxic('redis', { name: 'slow', type: 'latency', attributes: { latency: 200 } });
 * // … connect to proxy.host:proxy.port …
 * await api.reset();
 */
export class ToxiproxyApi {
  /** The API's base URL, without a trailing `/`. */
  readonly url: string;
  readonly #timeoutMs: number;

  /**
   * @param url e.g. `http://127.0.0.1:8474`.
   * @param options.timeoutMs how long each request may take. @default 5000
   * @throws Error when `url` is not an http or https URL.
   */
  constructor(url: string, options: { readonly timeoutMs?: number } = {}) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(url);
    } catch {
      parsed = undefined;
    }
    if (parsed?.protocol !== 'http:' && parsed?.protocol !== 'https:') {
      throw new Error(`Expected the Toxiproxy API's URL, e.g. http://127.0.0.1:8474, got ${JSON.stringify(String(url))}`);
    }
    this.url = String(url).replace(/\/+$/, '');
    this.#timeoutMs = options.timeoutMs ?? 5_000;
  }

  /**
   * The server's version, e.g. `2.12.0`.
   * @throws {ToxiproxyApiError} on any failure (as every method).
   */
  async version(): Promise<string> {
    const body = await this.#request('GET', '/version');
    return typeof body === 'object' && body !== null && 'version' in body ? String(body.version) : String(body);
  }

  /** Creates the proxy, deleting one of the same name first. @throws {ToxiproxyApiError} */
  async createProxy(spec: ProxySpec): Promise<ProxyInfo> {
    await this.#request('DELETE', `/proxies/${encodeURIComponent(spec.name)}`, undefined, [404]);
    return proxyInfo(await this.#request('POST', '/proxies', { enabled: true, ...spec }));
  }

  /** The proxy named `name`. @throws {ToxiproxyApiError} (404 when there is none) */
  async proxy(name: string): Promise<ProxyInfo> {
    return proxyInfo(await this.#request('GET', `/proxies/${encodeURIComponent(name)}`));
  }

  /**
   * Disabled: the proxy stops listening (new connects are refused) and closes its connections;
   * enabled: it listens again on the same address.
   * @throws {ToxiproxyApiError}
   */
  async setEnabled(name: string, enabled: boolean): Promise<ProxyInfo> {
    return proxyInfo(await this.#request('POST', `/proxies/${encodeURIComponent(name)}`, { enabled }));
  }

  /** Deletes the proxy, closing its connections. @throws {ToxiproxyApiError} (404 when there is none) */
  async deleteProxy(name: string): Promise<void> {
    await this.#request('DELETE', `/proxies/${encodeURIComponent(name)}`);
  }

  /** Adds a toxic to the proxy's live and future connections. @throws {ToxiproxyApiError} (409 for a name in use) */
  async addToxic(proxyName: string, spec: ToxicSpec): Promise<Toxic> {
    const body = { stream: 'downstream', toxicity: 1, attributes: {}, ...spec };
    return toxic(await this.#request('POST', `/proxies/${encodeURIComponent(proxyName)}/toxics`, body));
  }

  /** Removes a toxic. @throws {ToxiproxyApiError} (404 when the proxy or the toxic does not exist) */
  async removeToxic(proxyName: string, toxicName: string): Promise<void> {
    await this.#request('DELETE', `/proxies/${encodeURIComponent(proxyName)}/toxics/${encodeURIComponent(toxicName)}`);
  }

  /** Every proxy enabled again and every toxic removed; no proxy deleted. @throws {ToxiproxyApiError} */
  async reset(): Promise<void> {
    await this.#request('POST', '/reset');
  }

  /** The answer's JSON (undefined for an empty body); statuses in `tolerated` count as success. */
  async #request(method: string, path: string, body?: unknown, tolerated: readonly number[] = []): Promise<unknown> {
    const url = `${this.url}${path}`;
    const what = `Toxiproxy ${method} ${url}`;
    let response: Response;
    let text: string;
    try {
      response = await fetch(url, {
        method,
        signal: AbortSignal.timeout(this.#timeoutMs),
        ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } }),
      });
      text = await response.text();
    } catch (error) {
      const reason = (error as Error).name === 'TimeoutError' ? `no answer within ${this.#timeoutMs} ms` : describeFailure(error);
      throw new ToxiproxyApiError(`${what}: ${reason}`, { method, url }, { cause: error });
    }
    if (tolerated.includes(response.status)) return undefined;
    if (!response.ok) {
      const detail = errorText(text);
      throw new ToxiproxyApiError(`${what} answered ${response.status}${detail ? `: ${detail}` : ''}`, {
        method,
        url,
        status: response.status,
      });
    }
    if (text.trim() === '') return undefined;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new ToxiproxyApiError(`${what} answered ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`, {
        method,
        url,
        status: response.status,
      });
    }
  }
}

/** `fetch failed` says little: its cause says why (`connect ECONNREFUSED 127.0.0.1:8474`). */
function describeFailure(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause.message : undefined;
  return cause !== undefined && cause !== message ? `${message} (${cause})` : message;
}

/** Toxiproxy's `{"error": "…", "status": …}`, or the body as it is. */
function errorText(text: string): string {
  try {
    const body: unknown = JSON.parse(text);
    if (typeof body === 'object' && body !== null && 'error' in body && typeof body.error === 'string') return body.error;
  } catch {
    // not JSON: the text itself
  }
  return text.trim().slice(0, 500);
}

function proxyInfo(value: unknown): ProxyInfo {
  const record = asRecord(value, 'a proxy');
  const listen = String(record['listen'] ?? '');
  const { host, port } = splitHostPort(listen);
  const toxics = Array.isArray(record['toxics']) ? record['toxics'].map(toxic) : [];
  return {
    name: String(record['name']),
    listen,
    upstream: String(record['upstream'] ?? ''),
    enabled: record['enabled'] === true,
    toxics,
    host,
    port,
  };
}

function toxic(value: unknown): Toxic {
  const record = asRecord(value, 'a toxic');
  const attributes = asRecord(record['attributes'] ?? {}, "a toxic's attributes");
  return {
    name: String(record['name']),
    type: String(record['type']),
    stream: String(record['stream']),
    toxicity: Number(record['toxicity'] ?? 1),
    attributes: Object.fromEntries(Object.entries(attributes).map(([key, number]) => [key, Number(number)])),
  };
}

function asRecord(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Error(`Expected ${what} (a JSON object) from Toxiproxy, got ${JSON.stringify(value)}`);
  }
  return value as Record<string, unknown>;
}

/**
 * Starts the bundled Toxiproxy stand-in in a child process on a free port of 127.0.0.1 (see
 * `startToxiproxyServer` in `toxiproxy/spawn.ts`); use its `url` with {@link ToxiproxyApi}.
 * @param seed seeds the server's random draws (toxicity, jitter, slicing). @default random
 * @throws Error with the child's output if it does not start within 10 s.
 * @example
 * const server = await startLocalProxyServer(1);
 * const api = new ToxiproxyApi(server.url);
 * // …
 * await server.stop();
 */
export function startLocalProxyServer(seed?: number): Promise<ToxiproxyServer> {
  return startToxiproxyServer(seed === undefined ? {} : { seed });
}
