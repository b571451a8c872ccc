import type { ToxicKind } from './kind.ts';

/** Milliseconds. */
export type SlowCloseAttributes = { readonly delay: number };

/**
 * slow_close: data passes untouched; when the source ends, the close reaches the destination
 * `delay` ms later.
 */
export const slowClose: ToxicKind<SlowCloseAttributes> = {
  type: 'slow_close',
  defaults: { delay: 0 },
  async pipe(io, { delay }) {
    for (;;) {
      const next = await io.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'chunk') {
        io.write(next.chunk);
        continue;
      }
      // The end: an interrupted wait returns, and the restarted toxic meets the end again.
      if ((await io.sleep(delay)) === 'interrupted') return;
      return io.close();
    }
  },
};
