import { proxyAlreadyExists } from './errors.ts';
import { Mutex } from './mutex.ts';
import type { Prng } from './prng.ts';
import { Proxy, type ProxyConfig } from './proxy.ts';

/** A proxy as the API creates it. */
export interface ProxyInput extends ProxyConfig {
  readonly name: string;
}

/**
 * Every proxy of the server, by name (Toxiproxy's `ProxyCollection`). Adding, replacing and removing
 * run one at a time, so a name is checked and bound as one step.
 */
export class ProxyCollection {
  readonly #proxies = new Map<string, Proxy>();
  readonly #lock = new Mutex();
  readonly #random: Prng;

  constructor(random: Prng) {
    this.#random = random;
  }

  /** Every proxy, sorted by name, the order Toxiproxy lists them in. */
  list(): Proxy[] {
    return [...this.#proxies.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  get(name: string): Proxy | undefined {
    return this.#proxies.get(name);
  }

  /**
   * Creates a proxy and starts it if `input.enabled`.
   * @throws ApiError 409 if the name is taken (checked before binding); the listen error if binding
   *   fails, in which case the proxy is not added.
   */
  add(input: ProxyInput): Promise<Proxy> {
    return this.#lock.run(async () => {
      if (this.#proxies.has(input.name)) throw proxyAlreadyExists();
      return this.#create(input);
    });
  }

  /**
   * Applies checked inputs in order: an existing proxy whose listen address (as it reports it, port
   * resolved) and upstream are unchanged is kept as it is, toxics and enabled state too; any other is
   * replaced. Returns the proxies as applied.
   * @throws the first failure (a listen error); what was applied before it stays.
   */
  populate(inputs: readonly ProxyInput[]): Promise<Proxy[]> {
    return this.#lock.run(async () => {
      const applied: Proxy[] = [];
      for (const input of inputs) applied.push(await this.#addOrReplace(input));
      return applied;
    });
  }

  /** Stops and forgets the proxy; false if there is none. */
  remove(name: string): Promise<boolean> {
    return this.#lock.run(async () => {
      const proxy = this.#proxies.get(name);
      if (!proxy) return false;
      await proxy.stop();
      this.#proxies.delete(name);
      return true;
    });
  }

  /**
   * `POST /reset`: starts every proxy and removes every toxic (with the side effects of removal).
   * @throws the listen error of a proxy that cannot start again.
   */
  async reset(): Promise<void> {
    for (const proxy of this.list()) {
      await proxy.start();
      await proxy.toxics.reset();
    }
  }

  /** Stops every proxy (server shutdown). */
  closeAll(): Promise<void> {
    return this.#lock.run(async () => {
      await Promise.all([...this.#proxies.values()].map((proxy) => proxy.stop()));
    });
  }

  async #addOrReplace(input: ProxyInput): Promise<Proxy> {
    const existing = this.#proxies.get(input.name);
    if (existing) {
      if (input.listen === existing.listen && input.upstream === existing.upstream) return existing;
      await existing.stop();
    }
    return this.#create(input);
  }

  async #create(input: ProxyInput): Promise<Proxy> {
    const proxy = new Proxy(input.name, input.listen, input.upstream, this.#random);
    if (input.enabled) await proxy.start();
    this.#proxies.set(input.name, proxy);
    return proxy;
  }
}
