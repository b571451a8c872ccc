/**
 * The demo's script: four phases in proportion to the duration, and the fault each one puts on the
 * proxy between the instances and Redis, through toxiproxy-node-client (as chaos/scenarios.ts does).
 */
import type { Toxic } from 'toxiproxy-node-client';
import type { ProxiedRedis } from '../../chaos/types.ts';

export type PhaseName = 'healthy' | 'slow' | 'down' | 'back';

/** One phase of the run, in ms from the start of the load. */
export type DemoPhase = {
  readonly name: PhaseName;
  /** Short label for the chart and the live display. */
  readonly label: string;
  /** What happens, in a sentence. */
  readonly description: string;
  readonly startMs: number;
  readonly endMs: number;
  /** True while Redis is impaired. */
  readonly fault: boolean;
};

/** The latency added to every reply while Redis is slow, well above the breaker's 50 ms deadline. */
export const SLOW_LATENCY_MS = 250;

/** Where each phase ends, as a fraction of the duration (rounded to whole seconds). */
const ENDS: readonly {
  readonly name: PhaseName;
  readonly end: number;
  readonly label: string;
  readonly description: string;
  readonly fault: boolean;
}[] = [
  { name: 'healthy', end: 0.24, label: 'healthy', fault: false, description: 'Redis healthy: Redis decides every call' },
  {
    name: 'slow',
    end: 0.44,
    label: `Redis slow (+${SLOW_LATENCY_MS} ms)`,
    fault: true,
    description: `Redis slow: +${SLOW_LATENCY_MS} ms on every reply (the breaker's deadline is 50 ms)`,
  },
  { name: 'down', end: 0.68, label: 'Redis down', fault: true, description: 'Redis down: proxy disabled, every connection cut' },
  { name: 'back', end: 1, label: 'Redis back', fault: false, description: 'Redis back: proxy enabled again' },
];

/** The four phases over `durationS` seconds (at least 10: each phase lasts 2 s or more). */
export function planPhases(durationS: number): DemoPhase[] {
  let startMs = 0;
  return ENDS.map(({ end, ...phase }) => {
    const endMs = Math.round(end * durationS) * 1000;
    const planned = { ...phase, startMs, endMs };
    startMs = endMs;
    return planned;
  });
}

/** Puts each phase's fault on one proxy, and takes it off again. */
export class FaultScript {
  readonly #redis: ProxiedRedis;
  #latency: Toxic<unknown> | undefined;
  #disabled = false;

  constructor(redis: ProxiedRedis) {
    this.#redis = redis;
  }

  /** Makes the proxy behave as `phase` says. */
  async enter(phase: PhaseName): Promise<void> {
    switch (phase) {
      case 'healthy':
        return;
      case 'slow':
        this.#latency = await this.#redis.proxy.addToxic({
          name: 'demo-slow',
          type: 'latency',
          stream: 'downstream',
          toxicity: 1,
          attributes: { latency: SLOW_LATENCY_MS, jitter: 0 },
        } as never);
        return;
      case 'down':
        // Disabling closes the listener and every client and upstream socket: connections cut.
        await this.#setEnabled(false);
        await this.#removeLatency();
        return;
      case 'back':
        await this.#setEnabled(true);
        return;
    }
  }

  /** Takes every fault off (after an interrupted run), best effort. */
  async clear(): Promise<void> {
    await this.#removeLatency().catch(() => undefined);
    if (this.#disabled) await this.#setEnabled(true).catch(() => undefined);
  }

  async #removeLatency(): Promise<void> {
    const toxic = this.#latency;
    this.#latency = undefined;
    await toxic?.remove();
  }

  async #setEnabled(enabled: boolean): Promise<void> {
    const { proxy } = this.#redis;
    await proxy.update({ enabled, listen: proxy.listen, upstream: proxy.upstream } as never);
    this.#disabled = !enabled;
  }
}
