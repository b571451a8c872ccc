/** A piece of one direction of a TCP stream, stamped with when the proxy read it. */
export interface Chunk {
  readonly data: Buffer;
  /**
   * `performance.now()` when these bytes were read from the source socket. Latency counts from here,
   * so a chunk that queued behind a slower one is not delayed twice.
   */
  readonly readAtMs: number;
}

/** Where a stage of a link sends chunks: the next stage's queue, or the destination socket. */
export interface ChunkSink {
  write(chunk: Chunk): void;
  /** The stream has ended: nothing more will be written. */
  end(): void;
}
