import { connect, createServer, type Server, type Socket } from 'node:net';
import { listenOn, splitHostPort, type HostPort } from './address.ts';
import { Connection } from './connection.ts';
import { Mutex } from './mutex.ts';
import type { Prng } from './prng.ts';
import { toxicJson } from './toxic.ts';
import { ToxicCollection } from './toxicCollection.ts';

/** What `PATCH /proxies/{name}` may change. */
export interface ProxyConfig {
  readonly listen: string;
  readonly upstream: string;
  readonly enabled: boolean;
}

/**
 * As Toxiproxy's sockets (Go's defaults): no Nagle delay, so that small replies are not held back and
 * a latency toxic is the only delay; keep-alive probes after 15 s.
 */
const SOCKET_OPTIONS = { allowHalfOpen: true, noDelay: true, keepAlive: true, keepAliveInitialDelay: 15_000 } as const;

/** Something that can be cut off when the proxy stops: a live connection, or one still dialling. */
interface Closable {
  closeNow(): void;
}

/**
 * A named listener that forwards each accepted client to `upstream` through the proxy's toxics.
 *
 * Each client dials the upstream only once accepted (nothing is dialled at creation); if the dial
 * fails the client is closed at once, so it sees a successful connect, then EOF. Stopping closes
 * the listener (new connects are refused) and every socket of the proxy; starting again listens on
 * the same address. Toxics stay across stop and start.
 */
export class Proxy {
  readonly name: string;
  /** As given until the proxy first starts, then the address actually bound (port 0 resolved). */
  listen: string;
  upstream: string;
  enabled = false;
  readonly toxics: ToxicCollection;
  #server: Server | undefined;
  readonly #open = new Set<Closable>();
  readonly #lock = new Mutex();

  constructor(name: string, listen: string, upstream: string, random: Prng) {
    this.name = name;
    this.listen = listen;
    this.upstream = upstream;
    this.toxics = new ToxicCollection(random);
  }

  /**
   * Listens, if not already enabled.
   * @throws Error saying why binding failed; the proxy stays disabled.
   */
  start(): Promise<void> {
    return this.#lock.run(() => this.#start());
  }

  /** Stops listening and closes every socket of the proxy. */
  stop(): Promise<void> {
    return this.#lock.run(() => this.#stop());
  }

  /**
   * Applies a new config: a changed listen or upstream stops the proxy first; then `enabled`
   * starts or stops it.
   * @throws Error saying why binding failed, if it has to start.
   */
  update(config: ProxyConfig): Promise<void> {
    return this.#lock.run(async () => {
      if (config.listen !== this.listen || config.upstream !== this.upstream) {
        this.#stop();
        this.listen = config.listen;
        this.upstream = config.upstream;
      }
      if (config.enabled === this.enabled) return;
      if (config.enabled) await this.#start();
      else this.#stop();
    });
  }

  /** The API JSON, with Toxiproxy's key order. */
  toJSON(): object {
    return {
      name: this.name,
      listen: this.listen,
      upstream: this.upstream,
      enabled: this.enabled,
      toxics: this.toxics.list().map(toxicJson),
    };
  }

  async #start(): Promise<void> {
    if (this.enabled) return;
    const server = createServer({ ...SOCKET_OPTIONS, pauseOnConnect: true }, (client) => this.#accept(client));
    this.listen = await listenOn(server, this.listen);
    this.#server = server;
    this.enabled = true;
  }

  #stop(): void {
    if (!this.enabled) return;
    this.enabled = false;
    this.#server?.close();
    this.#server = undefined;
    for (const open of this.#open) open.closeNow();
    this.#open.clear();
  }

  /** Dials the upstream for a new client (paused until then), then joins the two. */
  #accept(client: Socket): void {
    client.on('error', () => {});
    let target: HostPort;
    try {
      target = splitHostPort(this.upstream);
    } catch {
      client.destroy(); // an upstream that cannot be dialled: connect, then EOF
      return;
    }
    const upstream = connect({ ...SOCKET_OPTIONS, host: target.host || 'localhost', port: target.port });
    upstream.on('error', () => {});
    const dialling: Closable = {
      closeNow: () => {
        client.destroy();
        upstream.destroy();
      },
    };
    this.#open.add(dialling);
    upstream.once('close', () => {
      if (this.#open.delete(dialling)) client.destroy(); // the dial failed: connect, then EOF
    });
    upstream.once('connect', () => {
      this.#open.delete(dialling);
      const connection: Connection = new Connection(client, upstream, this.toxics, () => this.#open.delete(connection));
      this.#open.add(connection);
    });
  }
}
