import type { GeneratedId, SentId } from '../base/call.js';
import type { PendingCall } from '../base/wire.js';

export type { PendingCall } from '../base/wire.js';

const FIRST_CAPACITY = 64;

/**
 * The journal's waiting calls, oldest first, kept in columns instead of an object per call: a ring
 * over typed arrays (time, cost, generated id, window) and one array of key references. A call costs
 * 28 bytes at full capacity (8 the key's reference, 8 its time, 4 its cost, 8 its id), against about
 * 80 for an object with a boxed time in an array: the journal fills while Redis is down, for as long
 * as it is down, up to `maxPending` calls. Once a caller's id, or a call of `limitAll()`, has come,
 * every slot has 8 more bytes (a reference to a caller's id) or 4 more (its window), until the
 * journal is emptied; plus the caller's ids themselves.
 *
 * Positions `i` are logical (0 is the oldest); slot `(#start + i) mod capacity` holds call `i`.
 * Capacity doubles as calls come, never past `limit` (the most the journal ever holds at once) but
 * for {@link unshift}, which makes room for all it is given (the journal then drops the oldest), and
 * goes back to nothing when the journal is emptied ({@link takeAll}).
 *
 * Invariants: a slot outside the ring holds no key nor caller's id (a dropped call is garbage); a
 * call's id is the caller's where `#names` holds a string, else its number in `#seqs`; `#windows` is
 * 0 for a call of `limit()`, and absent until a call of `limitAll()` comes.
 */
export class PendingCalls {
  #keys: (string | undefined)[] = [];
  #at = new Float64Array(0);
  #costs = new Uint32Array(0);
  #seqs = new Float64Array(0);
  /** The caller's ids, by slot; absent until one comes. */
  #names: (string | undefined)[] | undefined;
  /** Windows of `limitAll()`'s calls, by slot (0: a call of `limit()`); absent until one comes. */
  #windows: Uint32Array | undefined;
  #start = 0;
  #size = 0;

  constructor(
    /** The most calls held at once: capacity never grows past it. */
    readonly limit: number,
  ) {}

  get size(): number {
    return this.#size;
  }

  /** Appends a call (there must be room: at most `limit` calls are held). */
  push(key: string, at: number, cost: number, id: SentId, windowMs: number | undefined): void {
    if (this.#size === this.#keys.length) this.#resize(Math.min(Math.max(FIRST_CAPACITY, this.#size * 2), this.limit));
    this.#set(this.#slot(this.#size), key, at, cost, id, windowMs);
    this.#size += 1;
  }

  keyAt(i: number): string {
    return this.#keys[this.#slot(i)] as string;
  }

  atAt(i: number): number {
    return this.#at[this.#slot(i)] as number;
  }

  costAt(i: number): number {
    return this.#costs[this.#slot(i)] as number;
  }

  idAt(i: number): SentId {
    const slot = this.#slot(i);
    return this.#names?.[slot] ?? (this.#seqs[slot] as GeneratedId);
  }

  /** The window of call `i` when it is one of `limitAll()`'s, else undefined. */
  windowAt(i: number): number | undefined {
    const windowMs = this.#windows?.[this.#slot(i)];
    return windowMs === undefined || windowMs === 0 ? undefined : windowMs;
  }

  /** Call `i` as an object (for a write-back pass, which groups and batches them). */
  callAt(i: number): PendingCall {
    const windowMs = this.windowAt(i);
    const call: PendingCall = { key: this.keyAt(i), at: this.atAt(i), cost: this.costAt(i), id: this.idAt(i) };
    if (windowMs !== undefined) call.windowMs = windowMs;
    return call;
  }

  /** Drops the oldest call. */
  shift(): void {
    this.#clear(this.#start);
    this.#start = this.#start + 1 === this.#keys.length ? 0 : this.#start + 1;
    this.#size -= 1;
  }

  /** Removes call `i`, the newer ones moving down one place. */
  removeAt(i: number): void {
    for (let j = i; j < this.#size - 1; j += 1) this.#move(this.#slot(j + 1), this.#slot(j));
    this.#size -= 1;
    this.#clear(this.#slot(this.#size));
  }

  /** Keeps the calls for which `keep(i)` is true (`i` as before any removal), in order. */
  retain(keep: (i: number) => boolean): void {
    let kept = 0;
    for (let i = 0; i < this.#size; i += 1) {
      if (!keep(i)) continue;
      if (kept !== i) this.#move(this.#slot(i), this.#slot(kept));
      kept += 1;
    }
    for (let i = kept; i < this.#size; i += 1) this.#clear(this.#slot(i));
    this.#size = kept;
  }

  /** Every call, as objects, oldest first; the journal is left empty, its capacity released. */
  takeAll(): PendingCall[] {
    const calls = Array.from({ length: this.#size }, (_, i) => this.callAt(i));
    this.#reset(0);
    return calls;
  }

  /** Puts `calls` back in front of the calls held (a failed pass): the caller then drops what is over its bounds. */
  unshift(calls: readonly PendingCall[]): void {
    const held = this.takeAll();
    this.#reset(Math.max(calls.length + held.length, FIRST_CAPACITY));
    for (const list of [calls, held]) {
      for (const call of list) {
        this.#set(this.#size, call.key, call.at, call.cost, call.id, call.windowMs);
        this.#size += 1;
      }
    }
  }

  #slot(i: number): number {
    const slot = this.#start + i;
    const capacity = this.#keys.length;
    return slot >= capacity ? slot - capacity : slot;
  }

  #set(slot: number, key: string, at: number, cost: number, id: SentId, windowMs: number | undefined): void {
    this.#keys[slot] = key;
    this.#at[slot] = at;
    this.#costs[slot] = cost;
    if (typeof id === 'number') {
      this.#seqs[slot] = id;
      if (this.#names !== undefined) this.#names[slot] = undefined;
    } else {
      (this.#names ??= new Array<string | undefined>(this.#keys.length).fill(undefined))[slot] = id;
    }
    if (windowMs !== undefined) (this.#windows ??= new Uint32Array(this.#keys.length))[slot] = windowMs;
    else if (this.#windows !== undefined) this.#windows[slot] = 0;
  }

  #move(from: number, to: number): void {
    this.#keys[to] = this.#keys[from];
    this.#at[to] = this.#at[from] as number;
    this.#costs[to] = this.#costs[from] as number;
    this.#seqs[to] = this.#seqs[from] as number;
    if (this.#names !== undefined) this.#names[to] = this.#names[from];
    if (this.#windows !== undefined) this.#windows[to] = this.#windows[from] as number;
  }

  #clear(slot: number): void {
    this.#keys[slot] = undefined;
    if (this.#names !== undefined) this.#names[slot] = undefined;
  }

  /** Empty columns of `capacity` slots. */
  #reset(capacity: number): void {
    this.#keys = new Array<string | undefined>(capacity).fill(undefined);
    this.#at = new Float64Array(capacity);
    this.#costs = new Uint32Array(capacity);
    this.#seqs = new Float64Array(capacity);
    this.#names = undefined;
    this.#windows = undefined;
    this.#start = 0;
    this.#size = 0;
  }

  /** The same calls, in order from slot 0, in columns of `capacity` slots. */
  #resize(capacity: number): void {
    const old = { keys: this.#keys, at: this.#at, costs: this.#costs, seqs: this.#seqs, names: this.#names, windows: this.#windows };
    const order = Array.from({ length: this.#size }, (_, i) => this.#slot(i));
    this.#reset(capacity);
    if (old.names !== undefined) this.#names = new Array<string | undefined>(capacity).fill(undefined);
    if (old.windows !== undefined) this.#windows = new Uint32Array(capacity);
    order.forEach((from, to) => {
      this.#keys[to] = old.keys[from];
      this.#at[to] = old.at[from] as number;
      this.#costs[to] = old.costs[from] as number;
      this.#seqs[to] = old.seqs[from] as number;
      if (old.names !== undefined && this.#names !== undefined) this.#names[to] = old.names[from];
      if (old.windows !== undefined && this.#windows !== undefined) this.#windows[to] = old.windows[from] as number;
    });
    this.#size = order.length;
  }
}
