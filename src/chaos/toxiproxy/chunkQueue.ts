import type { Chunk, ChunkSink } from './chunk.ts';

/**
 * The channel into one stage of a link: chunks in arrival order, then at most one end.
 *
 * It plays the part of a Go channel in Toxiproxy. Like a closed channel, an ended and empty queue
 * answers `'end'` to every `take()`, so a toxic restarted after the end still sees it. Invariant: one
 * reader at a time (the stage's current pipe), so one pending `ready()` is enough.
 */
export class ChunkQueue implements ChunkSink {
  #chunks: Chunk[] = [];
  #ended = false;
  #bytes = 0;
  #wake: (() => void) | undefined;

  /** Bytes queued and not yet taken: the link pauses its source when its stages hold too many. */
  get bytes(): number {
    return this.#bytes;
  }

  write(chunk: Chunk): void {
    if (this.#ended) return;
    this.#chunks.push(chunk);
    this.#bytes += chunk.data.length;
    this.#notify();
  }

  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#notify();
  }

  /** The next chunk, `'end'` once ended and empty, or `undefined` while empty and open. */
  take(): Chunk | 'end' | undefined {
    const chunk = this.#chunks.shift();
    if (chunk) {
      this.#bytes -= chunk.data.length;
      return chunk;
    }
    return this.#ended ? 'end' : undefined;
  }

  /** Resolves once `take()` has something to return. */
  ready(): Promise<void> {
    if (this.#chunks.length > 0 || this.#ended) return Promise.resolve();
    return new Promise((resolve) => {
      this.#wake = resolve;
    });
  }

  /**
   * Moves every queued chunk to `sink`, in order, and tells whether the end was reached
   * (the end itself is not passed on: the caller decides who ends `sink`).
   */
  drainTo(sink: ChunkSink): 'end' | 'open' {
    for (;;) {
      const next = this.take();
      if (next === undefined) return 'open';
      if (next === 'end') return 'end';
      sink.write(next);
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}
