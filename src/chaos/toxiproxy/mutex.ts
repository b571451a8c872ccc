/**
 * Runs async operations one at a time, in call order.
 *
 * Toxiproxy holds a Go mutex across each API operation, including the wait for every live link to
 * take a new toxic. Here the same operations are async, so without this two API calls could
 * interleave half-way through rewiring a chain.
 */
export class Mutex {
  #tail: Promise<unknown> = Promise.resolve();

  /** Runs `operation` after every operation queued before it has settled. */
  run<T>(operation: () => Promise<T> | T): Promise<T> {
    const result = this.#tail.then(operation);
    this.#tail = result.catch(() => undefined);
    return result;
  }
}
