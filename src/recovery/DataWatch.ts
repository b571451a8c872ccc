import { withDeadline } from '../client/withDeadline.js';
import type { RedisPort } from '../client/port.js';

/** How long an `INFO` read may take, ms: it is off the decision path, but must not pile up. */
const INFO_MS = 1000;
/** A `RESILIMIT_KEYS_EVICTED` warning at most this often, ms (the event comes every time). */
const WARN_EVERY_MS = 60_000;
/** How often the eviction settings are read while they cannot evict, ms. */
const POLICY_EVERY_MS = 60_000;

/** Clients whose eviction policy was warned about: once per client, however many limiters use it. */
const policyWarned = new WeakSet<object>();

/** What the watch found: the server's eviction policy can evict the limiter's keys, or it evicted keys. */
export type DataLoss = { readonly reason: 'flushed' | 'evicted'; readonly evictedKeys?: number };

/** One server's eviction settings and count (`INFO memory`, `INFO stats`). */
type Eviction = { readonly maxmemory: number; readonly policy: string; readonly evicted: number };

/**
 * Watches for a Redis that can lose the limiter's keys without restarting: eviction. It reads each
 * master's `maxmemory`, `maxmemory-policy` and `evicted_keys` (`INFO memory`, `INFO stats`) `intervalMs`
 * after the client is ready (at start-up, and after each reconnect), then every `intervalMs` while the policy can
 * evict, else every POLICY_EVERY_MS (a `CONFIG SET` changes it at run time). With a memory limit and any
 * policy but `noeviction`, Redis may evict the keys of the windows (they all carry a TTL, so the
 * `volatile-*` policies evict them too), and a window that lost its calls admits a full limit again:
 * told once per client (process warning `RESILIMIT_EVICTION_POLICY`). A rise of `evicted_keys` is
 * reported to `lost` (the `dataLost` event) with the warning `RESILIMIT_KEYS_EVICTED` (at most once a
 * minute). Reads that fail or time out are skipped: a watch, never on a call's way, off the breaker
 * and the ledger. Its timer is unref'd and cleared by {@link stop}.
 */
export class DataWatch {
  readonly #timer: NodeJS.Timeout;
  #evicted: number | undefined;
  #evicting = false;
  #readAt = Number.NEGATIVE_INFINITY;
  #reading = false;
  #lastWarnAt = Number.NEGATIVE_INFINITY;
  #stopped = false;
  /** The read a beat after the last 'ready'. */
  #soon: NodeJS.Timeout | undefined;
  readonly #unlisten: () => void;

  constructor(
    readonly redis: RedisPort,
    readonly intervalMs: number,
    readonly lost: (loss: DataLoss) => void,
    readonly perf: { now(): number },
  ) {
    this.#unlisten = redis.on('ready', this.#onReady);
    this.#timer = setInterval(() => void this.#tick('due'), intervalMs);
    this.#timer.unref();
    if (redis.ready) this.#onReady();
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
    clearTimeout(this.#soon);
    this.#unlisten();
  }

  // A beat after ready, not at once: on a Cluster the first calls open the masters' connections, and
  // an INFO to every master in the same breath made the first decision miss its deadline.
  readonly #onReady = (): void => {
    this.#evicted = undefined; // another server, maybe (a failover): its count is a new baseline
    clearTimeout(this.#soon);
    this.#soon = setTimeout(() => void this.#tick('now'), this.intervalMs);
    this.#soon.unref();
  };

  /** Reads the servers' memory figures: `'now'` (after a 'ready'), or `'due'` (the interval: when a read is due). */
  async #tick(when: 'now' | 'due'): Promise<void> {
    if (this.#reading || this.#stopped || !this.redis.ready) return;
    if (when === 'due' && !this.#evicting && this.perf.now() - this.#readAt < POLICY_EVERY_MS) return;
    this.#reading = true;
    const servers = await this.#read();
    this.#reading = false;
    if (servers === undefined || this.#stopped) return;
    this.#readAt = this.perf.now();
    const evicting = servers.filter((s) => s.maxmemory > 0 && s.policy !== 'noeviction');
    this.#evicting = evicting.length > 0;
    if (this.#evicting && !policyWarned.has(this.redis.client)) {
      policyWarned.add(this.redis.client);
      const policies = [...new Set(evicting.map((s) => s.policy))].join(', ');
      process.emitWarning(
        `Redis may evict the rate limiter's keys (maxmemory is set, maxmemory-policy ${policies}): a window whose calls are ` +
          'evicted admits a full limit again. Run the limiter on a Redis with maxmemory-policy noeviction (writes are then ' +
          'refused when memory is full, and the limiter answers by its mode), or without maxmemory.',
        { type: 'ResilimitWarning', code: 'RESILIMIT_EVICTION_POLICY' },
      );
    }
    const evicted = servers.reduce((n, s) => n + s.evicted, 0);
    const before = this.#evicted;
    this.#evicted = evicted;
    if (before === undefined || evicted <= before) return;
    if (this.#readAt - this.#lastWarnAt >= WARN_EVERY_MS) {
      this.#lastWarnAt = this.#readAt;
      process.emitWarning(
        `Redis evicted ${evicted - before} keys under its memory limit; the rate limiter's windows may be among them ` +
          '(a key this instance holds calls of is answered by its local window meanwhile). Run Redis with maxmemory-policy noeviction.',
        { type: 'ResilimitWarning', code: 'RESILIMIT_KEYS_EVICTED' },
      );
    }
    this.lost({ reason: 'evicted', evictedKeys: evicted - before });
  }

  /** Every master's eviction settings and count, or undefined when one does not answer in time. */
  async #read(): Promise<Eviction[] | undefined> {
    try {
      const texts = await withDeadline(this.redis.info('memory', 'stats'), INFO_MS);
      return texts.map((text) => {
        return {
          maxmemory: Number(/^maxmemory:(\d+)/m.exec(text)?.[1] ?? 0),
          policy: /^maxmemory_policy:(\S+)/m.exec(text)?.[1] ?? 'noeviction',
          evicted: Number(/^evicted_keys:(\d+)/m.exec(text)?.[1] ?? 0),
        };
      });
    } catch {
      return undefined;
    }
  }
}
