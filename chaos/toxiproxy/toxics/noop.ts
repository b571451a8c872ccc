import type { ToxicKind } from './kind.ts';

/**
 * noop: passes every chunk through unchanged. It is also what runs in a toxic's place on a link
 * where the toxicity draw said no, and the hidden first stage of every link.
 */
export const noop: ToxicKind<Record<string, never>> = {
  type: 'noop',
  defaults: {},
  async pipe(stub) {
    for (;;) {
      const next = await stub.read();
      if (next.kind === 'interrupted') return;
      if (next.kind === 'end') return stub.close();
      stub.write(next.chunk);
    }
  },
};
