import type { ToxicStub } from '../stub.ts';

/** A toxic's attributes as the HTTP API shows them: every one an integer. */
export type Attributes = Readonly<Record<string, number>>;

/**
 * One toxic type (`latency`, `timeout`, …): its attributes and how it moves data.
 *
 * `pipe` runs on one link (one direction of one connection) and loops like Toxiproxy's `Pipe`:
 * it takes chunks from `stub.read()`, passes them on with `stub.write()`, and ends in one of two ways:
 * - the stub is interrupted (the toxic is being updated, removed or gets a new neighbour): it returns,
 *   handing on any chunk it holds first, never dropping it; the link then restarts it or unlinks it;
 * - the stream ends, or the toxic decides to close the link: it calls `stub.close()` and returns.
 */
export interface ToxicKind<A extends Attributes = Attributes, S = unknown> {
  /** The name in the API's `type` field. */
  readonly type: string;
  /** Every attribute with its zero value, in Toxiproxy's field order: the JSON always shows them all. */
  readonly defaults: A;
  /** A reason to refuse these attributes (answered as `400 bad request body: <reason>`), or undefined. */
  validate?(attributes: A): string | undefined;
  /** Per-link state that outlives restarts of the toxic on that link (limit_data's byte count). */
  newState?(): S;
  /** Runs when the toxic is removed from a live link, before its data is flushed onward. */
  cleanup?(stub: ToxicStub): void;
  pipe(stub: ToxicStub, attributes: A, state: S): Promise<void>;
}
