import type { ToxicKind } from './kind.ts';

/** Milliseconds. */
export type LatencyAttributes = { readonly latency: number; readonly jitter: number };

/**
 * latency: each chunk leaves `latency ± jitter` ms after it was read. The delay is counted from the
 * chunk's read time, so it is a fixed one-way delay: chunks that queue behind one another do not add
 * up their delays. Jitter is drawn per chunk, uniform in [-jitter, jitter) (Go's
 * `rand.Int63n(2*jitter) - jitter`); a negative total delay sends the chunk at once.
 */
export const latency: ToxicKind<LatencyAttributes> = {
  type: 'latency',
  defaults: { latency: 0, jitter: 0 },
  async pipe(io, { latency: latencyMs, jitter }) {
    for (;;) {
      const next = await io.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'end') return io.close();
      const { chunk } = next;
      const delayMs = latencyMs + (jitter > 0 ? io.random.intn(2 * jitter) - jitter : 0);
      if ((await io.sleepUntil(chunk.readAtMs + delayMs)) === 'interrupted') {
        io.write(chunk); // interrupted: hand the chunk on undelayed rather than drop it
        return;
      }
      // Restamped, so that a second latency toxic down the chain adds its delay to this one.
      io.write({ data: chunk.data, readAtMs: chunk.readAtMs + delayMs });
    }
  },
};
