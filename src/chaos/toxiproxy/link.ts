import type { Socket } from 'node:net';
import type { ChunkSink } from './chunk.ts';
import type { Prng } from './prng.ts';
import { ToxicStub } from './stub.ts';
import type { ActiveToxic, Direction } from './toxic.ts';
import { noop } from './toxics/noop.ts';

/** Toxiproxy reads with Go's `io.Copy`, 32 KiB at a time: chunk-minded toxics see the same sizes. */
const READ_SIZE = 32 * 1024;
/** The source is paused while the stages and the socket buffer hold more than this… */
const HIGH_WATER_BYTES = 4 * 1024 * 1024;
/** …and resumed once they hold less than this (Toxiproxy gets the same from its bounded channels). */
const LOW_WATER_BYTES = 1024 * 1024;
const PAUSED_CHECK_MS = 10;

/**
 * The hidden first stage of every link, as in Toxiproxy: every real toxic then has a predecessor that
 * can be paused while the chain behind it is rewired.
 */
const HEAD: ActiveToxic = {
  name: '',
  kind: noop,
  stream: '',
  direction: 'upstream',
  toxicity: 0,
  attributes: {},
};

interface Stage {
  toxic: ActiveToxic;
  readonly stub: ToxicStub;
}

/** What a link needs from its connection. */
export interface LinkOptions {
  readonly direction: Direction;
  /** The proxy's toxics for this direction when the link starts, in order. */
  readonly chain: readonly ActiveToxic[];
  /** Read from… */
  readonly source: Socket;
  /** …written to. */
  readonly destination: Socket;
  /** Called once when the end of the stream leaves the last stage: the connection closes `destination`. */
  readonly onEnd: () => void;
  readonly random: Prng;
}

/**
 * One direction of one connection (Toxiproxy's `ToxicLink`): chunks read from `source` flow through
 * a chain of stages, one per toxic of that direction in insertion order, then into `destination`.
 *
 * Live changes follow Toxiproxy: adding a toxic pauses the current tail, appends the new stage and
 * restarts both; updating restarts that stage with the new attributes; removing pauses the stage and
 * its predecessor, flushes what the stage still holds onward, unlinks it and restarts the
 * predecessor. Every (re)start draws that toxic's toxicity again on this link.
 */
export class Link {
  readonly direction: Direction;
  readonly #stages: Stage[] = [];
  readonly #source: Socket;
  readonly #destination: Socket;
  readonly #random: Prng;
  readonly #sink: ChunkSink;
  #ended = false;
  #disposed = false;

  constructor(options: LinkOptions) {
    this.direction = options.direction;
    this.#source = options.source;
    this.#destination = options.destination;
    this.#random = options.random;
    this.#sink = {
      write: (chunk) => {
        if (chunk.data.length > 0 && !this.#destination.destroyed) this.#destination.write(chunk.data);
      },
      end: () => {
        if (this.#ended) return;
        this.#ended = true;
        options.onEnd();
      },
    };
    // Built back to front, since each stage's output is the input of the stage after it.
    let output: ChunkSink = this.#sink;
    for (const toxic of [HEAD, ...options.chain].reverse()) {
      const stub = this.#newStub(toxic, output);
      this.#stages.unshift({ toxic, stub });
      output = stub.input;
    }
  }

  /** Starts every stage, then starts reading the source. */
  start(): void {
    for (const { toxic, stub } of this.#stages) stub.run(toxic);
    const head = this.#head().stub.input;
    this.#source.on('data', (data: Buffer) => {
      const readAtMs = performance.now();
      for (let offset = 0; offset < data.length; offset += READ_SIZE) {
        head.write({ data: data.subarray(offset, offset + READ_SIZE), readAtMs });
      }
      if (this.#heldBytes() > HIGH_WATER_BYTES) this.#pauseSource();
    });
    // EOF, a reset, or the socket closed under us (the other link closed it): the stream has ended.
    const end = (): void => head.end();
    this.#source.on('end', end).on('close', end).on('error', end);
    this.#source.resume();
  }

  /** Appends `toxic` to the chain of this live link. */
  async addToxic(toxic: ActiveToxic): Promise<void> {
    const tail = this.#stages.at(-1) ?? this.#head();
    if (!(await tail.stub.interrupt())) return; // closing: a closed link takes no new toxic
    const stub = this.#newStub(toxic, tail.stub.output);
    tail.stub.output = stub.input;
    this.#stages.push({ toxic, stub });
    stub.run(toxic);
    tail.stub.run(tail.toxic);
  }

  /** Restarts the stage of `toxic.name` with `toxic`'s new attributes and toxicity. */
  async updateToxic(toxic: ActiveToxic): Promise<void> {
    const stage = this.#stages.find((s, i) => i > 0 && s.toxic.name === toxic.name);
    if (!stage || !(await stage.stub.interrupt())) return;
    stage.toxic = toxic;
    stage.stub.run(toxic);
  }

  /** Unlinks the stage of `toxic`, first passing on everything it holds. */
  async removeToxic(toxic: ActiveToxic): Promise<void> {
    const index = this.#stages.findIndex((s, i) => i > 0 && s.toxic.name === toxic.name);
    const stage = this.#stages[index];
    const previous = this.#stages[index - 1];
    if (!stage || !previous || !(await stage.stub.interrupt())) return;
    toxic.kind.cleanup?.(stage.stub);
    if (stage.stub.closed) return; // the cleanup closed the link
    await previous.stub.interrupt();
    // Nothing moves now: hand on what the stage still queues, in order, then close the gap.
    if (stage.stub.input.drainTo(stage.stub.output) === 'end') return stage.stub.close();
    previous.stub.output = stage.stub.output;
    this.#stages.splice(index, 1);
    if (!previous.stub.closed) previous.stub.run(previous.toxic);
  }

  /** True once both sockets are gone. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Stops every stage for good: both sockets are gone. */
  dispose(): void {
    this.#disposed = true;
    for (const { stub } of this.#stages) stub.dispose();
  }

  #head(): Stage {
    const head = this.#stages[0];
    if (!head) throw new Error('a link always has its head stage');
    return head;
  }

  #newStub(toxic: ActiveToxic, output: ChunkSink): ToxicStub {
    const stub = new ToxicStub(output, this.#random);
    stub.state = toxic.kind.newState?.();
    return stub;
  }

  #heldBytes(): number {
    return this.#stages.reduce((sum, { stub }) => sum + stub.input.bytes, this.#destination.writableLength);
  }

  /** Backpressure: stop reading until the stages and the destination have caught up. */
  #pauseSource(): void {
    if (this.#source.isPaused()) return;
    this.#source.pause();
    const timer = setInterval(() => {
      if (this.#source.destroyed || this.#heldBytes() < LOW_WATER_BYTES) {
        clearInterval(timer);
        this.#source.resume();
      }
    }, PAUSED_CHECK_MS);
    timer.unref();
  }
}
