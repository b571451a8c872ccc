import type { ToxicKind } from './kind.ts';

/** Bytes. */
export type LimitDataAttributes = { readonly bytes: number };

/** Bytes passed so far on this link; kept across updates of the toxic. */
type LimitDataState = { transmitted: number };

/**
 * limit_data: passes at most `bytes` bytes on each link, cutting the chunk that crosses the limit
 * exactly there, then closes the link. The count is per link and survives updates, so lowering
 * `bytes` below what already passed closes the link on its next chunk.
 */
export const limitData: ToxicKind<LimitDataAttributes, LimitDataState> = {
  type: 'limit_data',
  defaults: { bytes: 0 },
  newState: () => ({ transmitted: 0 }),
  async pipe(io, { bytes }, state) {
    for (;;) {
      const next = await io.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'end') return io.close();
      const allowed = Math.max(0, bytes - state.transmitted);
      const data = next.chunk.data.subarray(0, allowed);
      if (data.length > 0) {
        io.write({ data, readAtMs: next.chunk.readAtMs });
        state.transmitted += data.length;
      }
      if (state.transmitted >= bytes) return io.close();
    }
  },
};
