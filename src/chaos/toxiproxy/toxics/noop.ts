import type { ToxicKind } from './kind.ts';

/**
 * Passes every chunk through unchanged: what runs in a toxic's place on a link where the toxicity
 * draw said no, and the hidden first stage of every link. Not an API type (Toxiproxy's `noop` toxic
 * is not served).
 */
export const noop: ToxicKind<Record<string, never>> = {
  type: 'noop',
  defaults: {},
  async pipe(io) {
    for (;;) {
      const next = await io.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'end') return io.close();
      io.write(next.chunk);
    }
  },
};
