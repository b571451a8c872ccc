import type { ToxicKind } from './kind.ts';

/** Milliseconds; 0 means never. */
export type TimeoutAttributes = { readonly timeout: number };

/**
 * timeout: drops every chunk (nothing is ever delivered). With `timeout > 0` it closes the link
 * once `timeout` ms pass without a chunk; with 0 it holds the link open for good.
 *
 * Removing the toxic (or `POST /reset`) closes the link (`cleanup`): on every live connection of the
 * proxy, whether or not the toxicity draw made the toxic act there, as in Toxiproxy.
 */
export const timeout: ToxicKind<TimeoutAttributes> = {
  type: 'timeout',
  defaults: { timeout: 0 },
  async pipe(io, { timeout: timeoutMs }) {
    for (;;) {
      const next = timeoutMs > 0 ? await io.readWithin(timeoutMs) : await io.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'end' || next.kind === 'timeout') return io.close();
      // A chunk: dropped.
    }
  },
  cleanup(io) {
    io.close();
  },
};
