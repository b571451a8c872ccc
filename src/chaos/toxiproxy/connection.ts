import type { Socket } from 'node:net';
import type { Link } from './link.ts';
import type { ToxicCollection } from './toxicCollection.ts';

/**
 * One accepted client and its upstream socket, joined by two links: upstream (client → server) and
 * downstream (server → client).
 *
 * There is no half-close: when one link's stream ends, the connection closes that link's destination
 * outright; the other link then sees its source gone, drains, and closes the other socket.
 */
export class Connection {
  readonly #client: Socket;
  readonly #upstream: Socket;
  /** Fixed at creation: a reset_peer toxic existed then (Toxiproxy sets SO_LINGER 0 at link start). */
  readonly #resetOnClose: boolean;
  readonly #links: Link[];

  /** @param onClosed called once both sockets have closed. */
  constructor(client: Socket, upstream: Socket, toxics: ToxicCollection, onClosed: () => void) {
    this.#client = client;
    this.#upstream = upstream;
    this.#resetOnClose = toxics.hasType('reset_peer');
    let open = 2;
    for (const socket of [client, upstream]) {
      socket.on('error', () => {}); // the links see errors as the end of their stream
      socket.once('close', () => {
        if (--open > 0) return;
        for (const link of this.#links) link.dispose();
        onClosed();
      });
    }
    this.#links = [
      toxics.startLink('upstream', client, upstream, () => this.#close(upstream)),
      toxics.startLink('downstream', upstream, client, () => this.#close(client)),
    ];
  }

  /** Closes both sockets at once, dropping what is in flight (the proxy is being disabled or deleted). */
  closeNow(): void {
    for (const socket of [this.#client, this.#upstream]) {
      if (socket.destroyed) continue;
      if (this.#resetOnClose) socket.resetAndDestroy();
      else socket.destroy();
    }
  }

  /**
   * Closes one socket after the data written to it has gone out, like Go's `Close()` (or sends an
   * RST at once, dropping it, like Go's `Close()` after `SetLinger(0)`).
   */
  #close(socket: Socket): void {
    if (socket.destroyed) return;
    if (this.#resetOnClose) {
      socket.resetAndDestroy();
      return;
    }
    socket.end(() => socket.destroy());
  }
}
