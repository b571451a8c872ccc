import type { ToxicKind } from './kind.ts';

/** `rate` in KB/s, 1 KB = 1000 bytes, so `rate` is also bytes per millisecond. */
export type BandwidthAttributes = { readonly rate: number };

/** Toxiproxy sends a big chunk in pieces, one every this many milliseconds. */
const PIECE_INTERVAL_MS = 100;

/**
 * bandwidth: paces the stream at `rate` KB/s. A chunk bigger than `rate * 100` bytes goes out in
 * pieces of `rate * 100` bytes, one every 100 ms; what is left then waits for the rest of its time.
 * The time owed (`owedMs`) carries over from chunk to chunk, so the long-run rate holds whatever the
 * chunk sizes; a timer that fires late is paid back from the next wait.
 *
 * A rate of 0 or less holds the data for good: Toxiproxy sends empty pieces every 100 ms forever
 * (for a negative rate it would panic).
 */
export const bandwidth: ToxicKind<BandwidthAttributes> = {
  type: 'bandwidth',
  defaults: { rate: 0 },
  async pipe(io, { rate }) {
    const pieceBytes = Math.max(0, rate) * PIECE_INTERVAL_MS;
    let owedMs = 0;
    for (;;) {
      const next = await io.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'end') return io.close();
      const { readAtMs } = next.chunk;
      let { data } = next.chunk;
      owedMs = rate > 0 ? owedMs + data.length / rate : 0;
      while (data.length > pieceBytes) {
        if ((await io.sleep(PIECE_INTERVAL_MS)) === 'interrupted') {
          io.write({ data, readAtMs }); // interrupted: hand the rest on at once
          return;
        }
        io.write({ data: data.subarray(0, pieceBytes), readAtMs });
        data = data.subarray(pieceBytes);
        owedMs -= PIECE_INTERVAL_MS;
      }
      const startMs = io.now();
      if ((await io.sleep(owedMs)) === 'interrupted') {
        io.write({ data, readAtMs });
        return;
      }
      owedMs -= io.now() - startMs;
      io.write({ data, readAtMs });
    }
  },
};
