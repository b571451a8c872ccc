import type { ToxicKind } from './kind.ts';

/** Milliseconds. */
export type ResetPeerAttributes = { readonly timeout: number };

/**
 * reset_peer: on the first chunk in its direction (or the end of the stream), drops it, waits
 * `timeout` ms, then closes the link.
 *
 * The RST itself is the connection's doing, as in Toxiproxy (which sets SO_LINGER 0 when a link
 * starts): a connection opened while the proxy has a reset_peer toxic closes both its sockets with
 * `resetAndDestroy()`, so the peer sees ECONNRESET; an older connection closes with a plain FIN.
 * Like Toxiproxy's, the wait does not listen for interrupts: an update or removal waits for it.
 */
export const resetPeer: ToxicKind<ResetPeerAttributes> = {
  type: 'reset_peer',
  defaults: { timeout: 0 },
  async pipe(io, { timeout }) {
    const first = await io.read();
    if (first.kind === 'interrupted') return;
    await io.wait(timeout);
    io.close();
  },
};
