/**
 * What a toxic type is, and all that its `pipe` may do on a link. The link side implements
 * {@link ToxicIo} (`stub.ts`); the toxics depend on this contract only, never on that class.
 */
import type { Chunk } from '../chunk.ts';
import type { Prng } from '../prng.ts';

/** A toxic's attributes as the HTTP API shows them: every one an integer. */
export type Attributes = Readonly<Record<string, number>>;

/** What a toxic gets from `read()`. */
export type Read = { readonly kind: 'chunk'; readonly chunk: Chunk } | { readonly kind: 'end' } | { readonly kind: 'interrupted' };

/** What a toxic gets from `readWithin()`: a read, or nothing arrived in time. */
export type TimedRead = Read | { readonly kind: 'timeout' };

/** A toxic's place in one link, as its `pipe` sees it. */
export interface ToxicIo {
  /** The server's seeded generator, for jitter and slicing. */
  readonly random: Prng;
  /** The next chunk, the end of the stream, or an interrupt: whichever comes first. */
  read(): Promise<Read>;
  /** Like `read()`, but gives up with `timeout` when nothing arrives within `ms`. */
  readWithin(ms: number): Promise<TimedRead>;
  /** Passes a chunk to the next stage. */
  write(chunk: Chunk): void;
  /** Ends the output: everything after this stage sees the end of the stream. */
  close(): void;
  /** Waits `ms` (nothing if `ms <= 0`) unless interrupted first. */
  sleep(ms: number): Promise<'elapsed' | 'interrupted'>;
  /** Waits until the clock of `now()` reaches `deadlineMs`, unless interrupted first. Never early. */
  sleepUntil(deadlineMs: number): Promise<'elapsed' | 'interrupted'>;
  /** Waits `ms` and does not listen for interrupts (reset_peer, like Toxiproxy, waits this way). */
  wait(ms: number): Promise<void>;
  /** Milliseconds on the clock chunks are stamped with. */
  now(): number;
}

/**
 * One toxic type (`latency`, `timeout`, …): its attributes and how it moves data.
 *
 * `pipe` runs on one link (one direction of one connection) and loops like Toxiproxy's `Pipe`:
 * it takes chunks from `io.read()`, passes them on with `io.write()`, and ends in one of two ways:
 * - it is interrupted (the toxic is being updated, removed or gets a new neighbour): it returns,
 *   handing on any chunk it holds first, never dropping it; the link then restarts it or unlinks it;
 * - the stream ends, or the toxic decides to close the link: it calls `io.close()` and returns.
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
  cleanup?(io: ToxicIo): void;
  pipe(io: ToxicIo, attributes: A, state: S): Promise<void>;
}
