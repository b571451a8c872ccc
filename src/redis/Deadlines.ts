import type { PollWatch } from './PollWatch.js';

/** A call racing its deadline: settled once, by its answer or by the verdict. */
type Pending = { readonly at: number; settled: boolean; readonly reject: (error: Error) => void };

/** Settled entries kept at the front of the queue before it is compacted (they are dropped as the timer passes them). */
const COMPACT_AT = 1_024;

/**
 * The deadlines of the calls in flight through one breaker, all `ms` long: they come due in the order
 * the calls were sent, so one timer serves them all, armed for the earliest call not yet answered (a
 * timer set and cleared per call cost about 5 µs of Node CPU a decision at one caller, measured with
 * `bench/probes/one-caller.ts`). Time is `performance.now()`, read when used, as the timers are (a
 * test's fake clock moves both).
 *
 * A call that misses its deadline is rejected with opossum's code `ETIMEDOUT` once `ms` have passed
 * AND the event loop has polled for I/O since. A loop iteration runs its timers before it polls: when
 * this process is busy past the deadline (its own overload, not Redis's), a reply that arrived in time
 * lies unread in the socket as the timer fires. So the timer only schedules the verdict for the check
 * phase (setImmediate), right after the poll: a reply read there settles the call first, and counts. A
 * frozen Redis is still found at the deadline, one poll later. Both moments are shown to `polls`: the
 * poll in between vouches for Redis's silence up to the deadline (the gate's stall rule reads it).
 */
export class Deadlines {
  #queue: Pending[] = [];
  #head = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    readonly ms: number,
    readonly polls: PollWatch | undefined,
  ) {}

  /** `call`, or a rejection with code `ETIMEDOUT` past the deadline (see the class comment). */
  race<T>(call: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry: Pending = { at: performance.now() + this.ms, settled: false, reject };
      this.#queue.push(entry);
      if (this.#timer === undefined) this.#arm(this.ms);
      call.then(
        (value) => {
          if (entry.settled) return;
          entry.settled = true;
          resolve(value);
        },
        (error: unknown) => {
          if (entry.settled) return;
          entry.settled = true;
          reject(error);
        },
      );
    });
  }

  /**
   * Clears the timer when every call has been answered; calls still waiting keep it, to get their
   * verdict at their deadline (it ends by itself after the last one).
   */
  stop(): void {
    const queue = this.#queue;
    for (let i = this.#head; i < queue.length; i += 1) if (!(queue[i] as Pending).settled) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#queue = [];
    this.#head = 0;
  }

  #arm(ms: number): void {
    this.#timer = setTimeout(this.#due, ms);
    this.#timer.unref();
  }

  /**
   * The earliest call's deadline came: every call due now (within the timer's 1 ms grain) gets its
   * verdict after the next poll; answered calls are dropped; the timer is armed for the next one.
   */
  readonly #due = (): void => {
    this.#timer = undefined;
    const now = performance.now();
    const queue = this.#queue;
    let head = this.#head;
    let due: Pending[] | undefined;
    for (; head < queue.length; head += 1) {
      const entry = queue[head] as Pending;
      if (entry.settled) continue;
      if (entry.at > now + 1) break;
      (due ??= []).push(entry);
    }
    if (head === queue.length) {
      this.#queue = [];
      this.#head = 0;
    } else if (head >= COMPACT_AT) {
      this.#queue = queue.slice(head);
      this.#head = 0;
    } else {
      this.#head = head;
    }
    if (due !== undefined) this.#verdict(due);
    const next = this.#queue[this.#head];
    if (next !== undefined) this.#arm(Math.max(1, Math.ceil(next.at - now)));
  };

  #verdict(due: readonly Pending[]): void {
    const { polls } = this;
    polls?.observe('any');
    setImmediate(() => {
      polls?.observe('check');
      for (const entry of due) {
        if (entry.settled) continue;
        entry.settled = true;
        entry.reject(Object.assign(new Error(`Timed out after ${this.ms}ms`), { code: 'ETIMEDOUT' }));
      }
    });
  }
}
