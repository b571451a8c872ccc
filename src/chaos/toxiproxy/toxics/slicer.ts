import type { Prng } from '../prng.ts';
import type { ToxicKind } from './kind.ts';

/** Sizes in bytes; `delay` in MICROseconds. */
export type SlicerAttributes = {
  readonly average_size: number;
  readonly size_variation: number;
  readonly delay: number;
};

/**
 * slicer: cuts each chunk into pieces of about `average_size ± size_variation` bytes and waits
 * `delay` µs after each piece. The bytes and their order are unchanged.
 *
 * Node timers tick in whole milliseconds, so sub-millisecond delays are owed and paid once they add
 * up to a millisecond: the pace over many pieces is right, single gaps are 0 or ≥ 1 ms.
 * Refuses `average_size <= 0` (Toxiproxy 2.12 would recurse until its stack overflows).
 */
export const slicer: ToxicKind<SlicerAttributes> = {
  type: 'slicer',
  defaults: { average_size: 0, size_variation: 0, delay: 0 },
  validate: ({ average_size }) => (average_size > 0 ? undefined : 'average_size must be greater than 0'),
  async pipe(io, { average_size, size_variation, delay }) {
    let owedUs = 0;
    for (;;) {
      const next = await io.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'end') return io.close();
      const { data, readAtMs } = next.chunk;
      for (const [from, to] of pieces(0, data.length, average_size, size_variation, io.random)) {
        io.write({ data: data.subarray(from, to), readAtMs });
        owedUs += Math.max(0, delay);
        const waitMs = Math.floor(owedUs / 1000);
        owedUs -= waitMs * 1000;
        if ((await io.sleep(waitMs)) === 'interrupted') {
          if (to < data.length) io.write({ data: data.subarray(to), readAtMs }); // the rest, uncut
          return;
        }
      }
    }
  },
};

/**
 * Toxiproxy's cut: a span no longer than `average + variation` stays whole; a longer one splits near
 * its middle (moved by a draw in [-variation, variation)) and both halves are cut again. The split is
 * kept strictly inside the span, which Toxiproxy does not do (its issue #541: out-of-range slices
 * when `size_variation` is not smaller than `average_size`).
 */
function pieces(start: number, end: number, average: number, variation: number, random: Prng): Array<[number, number]> {
  const spread = Math.max(0, variation);
  if (end - start - average <= spread) return [[start, end]];
  const jitter = spread > 0 ? random.intn(2 * spread) - spread : 0;
  const middle = Math.min(end - 1, Math.max(start + 1, start + Math.floor((end - start) / 2) + jitter));
  return [...pieces(start, middle, average, variation, random), ...pieces(middle, end, average, variation, random)];
}
