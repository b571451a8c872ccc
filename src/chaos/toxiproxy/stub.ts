import { setTimeout as delay } from 'node:timers/promises';
import type { Chunk, ChunkSink } from './chunk.ts';
import { ChunkQueue } from './chunkQueue.ts';
import type { Prng } from './prng.ts';
import type { ActiveToxic } from './toxic.ts';
import type { Read, TimedRead, ToxicIo } from './toxics/kind.ts';
import { noop } from './toxics/noop.ts';

const END: Read = { kind: 'end' };
const INTERRUPTED: Read = { kind: 'interrupted' };
const TIMEOUT: TimedRead = { kind: 'timeout' };

/**
 * One toxic's place in one link (Toxiproxy's `ToxicStub`): an input queue, an output, and the
 * toxic's `pipe` running between them. The link interrupts and restarts the pipe to update the
 * toxic or rewire the chain; the input queue and `state` survive restarts.
 */
export class ToxicStub implements ToxicIo {
  /** Chunks waiting for this toxic. */
  readonly input = new ChunkQueue();
  /** The next stage's input, or the link's socket writer for the last stage. Rewired by the link. */
  output: ChunkSink;
  readonly random: Prng;
  /** Per-link state of a stateful toxic (see `ToxicKind.newState`). */
  state: unknown;
  #closed = false;
  #disposed = false;
  #interruptRequested = false;
  /** Wakes the pipe's current wait, if it is waiting. */
  #wakeOnInterrupt: (() => void) | undefined;
  #running: Promise<void> = Promise.resolve();

  constructor(output: ChunkSink, random: Prng) {
    this.output = output;
    this.random = random;
  }

  /** True once the stub has ended its output: the link behind it is closing. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Starts `toxic`'s pipe, or a noop pipe: the toxicity is drawn here, so once per link each time
   * the toxic (re)starts on it, never per chunk.
   */
  run(toxic: ActiveToxic): void {
    this.#interruptRequested = false;
    const poisoned = this.random.float() < toxic.toxicity;
    const pipe = poisoned ? toxic.kind.pipe(this, toxic.attributes, this.state) : noop.pipe(this, {}, undefined);
    this.#running = pipe.catch((error: unknown) => {
      process.stderr.write(`toxiproxy: ${toxic.kind.type} toxic ${toxic.name} failed: ${String(error)}\n`);
      this.close();
    });
  }

  /**
   * Stops the running pipe and waits until it has returned (after handing on what it held).
   * @returns false if the stub had closed instead: there is nothing left to restart.
   */
  async interrupt(): Promise<boolean> {
    if (this.#closed) return false;
    this.#interruptRequested = true;
    this.#wakeOnInterrupt?.();
    await this.#running;
    if (!this.#disposed) this.#interruptRequested = false;
    return !this.#closed;
  }

  /** Ends the output: everything after this stage sees the end of the stream. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.output.end();
  }

  /** Stops the pipe for good once both sockets are gone, so no timer outlives the connection. */
  dispose(): void {
    this.#disposed = true;
    this.#closed = true;
    this.#interruptRequested = true;
    this.#wakeOnInterrupt?.();
  }

  /** Passes a chunk to the next stage. */
  write(chunk: Chunk): void {
    if (!this.#disposed) this.output.write(chunk);
  }

  /** The next chunk, the end of the stream, or an interrupt: whichever comes first. */
  async read(): Promise<Read> {
    for (;;) {
      const read = this.#poll();
      if (read) return read;
      await this.#wait(this.input.ready(), Number.POSITIVE_INFINITY);
    }
  }

  /** Like `read()`, but gives up with `timeout` when nothing arrives within `ms`. */
  async readWithin(ms: number): Promise<TimedRead> {
    const deadline = performance.now() + ms;
    for (;;) {
      const read = this.#poll();
      if (read) return read;
      if (performance.now() >= deadline) return TIMEOUT; // on the clock: a timer can fire a little early
      await this.#wait(this.input.ready(), deadline);
    }
  }

  /** Waits `ms` (nothing if `ms <= 0`) unless interrupted first. */
  sleep(ms: number): Promise<'elapsed' | 'interrupted'> {
    return this.sleepUntil(performance.now() + ms);
  }

  /**
   * Waits until `performance.now() >= deadlineMs` unless interrupted first. Never early: Node timers
   * may fire a millisecond before their time, so the clock is checked again after each one.
   */
  async sleepUntil(deadlineMs: number): Promise<'elapsed' | 'interrupted'> {
    for (;;) {
      if (this.#interruptRequested) return 'interrupted';
      if (performance.now() >= deadlineMs) return 'elapsed';
      await this.#wait(undefined, deadlineMs);
    }
  }

  /** Waits `ms` and does not listen for interrupts (reset_peer, like Toxiproxy, waits this way). */
  async wait(ms: number): Promise<void> {
    if (ms > 0) await delay(ms, undefined, { ref: false });
  }

  /** Milliseconds on the clock chunks are stamped with. */
  now(): number {
    return performance.now();
  }

  #poll(): Read | undefined {
    if (this.#interruptRequested) return INTERRUPTED;
    const next = this.input.take();
    if (next === 'end') return END;
    return next ? { kind: 'chunk', chunk: next } : undefined;
  }

  /**
   * Waits for `event` (if any), an interrupt, or the deadline. Listeners are dropped once it settles,
   * so a long-lived link does not pile them up.
   */
  #wait(event: Promise<void> | undefined, deadlineMs: number): Promise<'event' | 'interrupt' | 'deadline'> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const wake = (): void => settle('interrupt');
      const settle = (why: 'event' | 'interrupt' | 'deadline'): void => {
        clearTimeout(timer);
        // A stale event may settle an older wait late: it must not unhook the current one.
        if (this.#wakeOnInterrupt === wake) this.#wakeOnInterrupt = undefined;
        resolve(why);
      };
      this.#wakeOnInterrupt = wake;
      void event?.then(() => settle('event'));
      if (Number.isFinite(deadlineMs)) {
        timer = setTimeout(settle, Math.max(0, Math.ceil(deadlineMs - performance.now())), 'deadline');
        timer.unref();
      }
    });
  }
}
