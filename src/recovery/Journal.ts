import type { WriteBackReply } from '../redis/scripts/reconcile.js';
import type { CallId, SentId } from '../base/call.js';
import { PendingCalls, type PendingCall } from './PendingCalls.js';
import { groupOf } from '../redis/allWindows.js';

export { groupOf } from '../redis/allWindows.js';

export type { PendingCall } from './PendingCalls.js';

/** What one reconciliation pass did. */
export type ReconcileResult = {
  /** Calls added to their Redis window. */
  written: number;
  /** Calls already out of the window, not written. */
  expired: number;
  /** Calls whose id was already in the Redis window (a timed-out call that still ran): not counted twice. */
  present: number;
  /** Calls still waiting (the pass stopped because Redis failed again). */
  remaining: number;
};

/**
 * Writes a batch of one key's calls into Redis: [written, expired, present]. It must send its
 * command before it returns (see {@link Journal.holds}), or fail.
 */
export type WriteBatch = (key: string, calls: readonly PendingCall[]) => Promise<WriteBackReply>;

const BATCH = 200;

/**
 * The heap a journalled call is counted for besides its strings, in bytes: its slots in the journal's
 * columns (28 bytes, see `PendingCalls`), the header of its key string when the journal alone keeps
 * it, and, while a pass writes it, the object it is then (about 80 bytes with its slot in a batch).
 * Refunds kept for Redis (`PendingRefunds`) are objects, counted the same. See {@link pendingBytes}.
 */
export const CALL_BYTES = 128;

/**
 * What a journalled call counts for against `maxPendingBytes`: {@link CALL_BYTES}, and 2 bytes per
 * character of its key and of the caller's id (a generated id is a number: no string). V8 keeps a
 * string in 1 byte per character when every character fits in one, else 2: this bounds both. A key
 * shared by several calls is counted with each: an upper bound, in O(1) per call.
 */
export function pendingBytes(call: { key: string; id: SentId }): number {
  return bytesOf(call.key, call.id);
}

function bytesOf(key: string, id: SentId): number {
  return CALL_BYTES + 2 * key.length + (typeof id === 'string' ? 2 * id.length : 0);
}

/** A write-back pass that stopped part-way: what it did before (`partial`), and why it stopped (`cause`). */
export class PartialWriteError extends Error {
  override readonly name = 'PartialWriteError';

  constructor(
    readonly partial: ReconcileResult,
    cause: unknown,
  ) {
    super(`A write-back pass stopped: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/**
 * The journal of locally admitted calls, written back into Redis once it is healthy again, so that
 * the window after recovery does not grant a fresh full limit on top of them. Memory is bounded by
 * `maxPending` calls and `maxBytes` bytes ({@link pendingBytes}) of the waiting calls: past either,
 * the oldest are dropped first and counted in `dropped`.
 */
export class Journal {
  /** The waiting calls, oldest first (a dropped call is garbage). */
  readonly #calls: PendingCalls;
  /** {@link pendingBytes} of the waiting calls; kept by `add`, `#drop`, `forget`, `flush` and a failed pass. */
  #bytes = 0;
  #writing = 0;
  /**
   * Calls not yet sent to Redis (waiting, in a batch a pass has not sent yet, or put back after a
   * failed write), by group: Redis must not decide those keys before they are sent. A sent call no
   * longer holds its key: Redis runs the commands of a connection in order, so a decision sent after
   * it is decided with it. Kept only while tracking (the breaker is not open): during an outage every
   * call adds to the journal and nothing asks, so the counts are rebuilt when tracking resumes.
   */
  readonly #unsent = new Map<string, number>();
  #tracking = true;
  /** Batches a pass has taken but not sent yet. */
  readonly #taken = new Set<PendingCall[]>();
  /** Every call the running pass took (sent or not), and those of them refunded meanwhile (see {@link forgetCall}). */
  #inPass: readonly PendingCall[] = [];
  readonly #recalled = new Set<PendingCall>();
  dropped = 0;

  constructor(
    readonly maxPending: number,
    readonly maxBytes: number = Number.POSITIVE_INFINITY,
    /** Told of every drop: calls admitted locally that Redis will never see. */
    readonly onDrop: (calls: number) => void = () => undefined,
  ) {
    // One more than maxPending: a call is added before the oldest is dropped.
    this.#calls = new PendingCalls(maxPending + 1);
  }

  /** Calls waiting in the journal (not those a pass is writing now). */
  get size(): number {
    return this.#calls.size;
  }

  /** {@link pendingBytes} of the calls waiting in the journal. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Calls not yet written: waiting, or being written by a pass. */
  get pending(): number {
    return this.size + this.#writing;
  }

  /** True while calls of this group (see {@link groupOf}) are not yet sent to Redis. */
  holds(group: string): boolean {
    return this.#unsent.size !== 0 && this.#unsent.has(group);
  }

  /** Stops keeping {@link holds} up to date (Redis is lost: every call answers locally anyway). */
  untrack(): void {
    if (!this.#tracking) return;
    this.#tracking = false;
    this.#unsent.clear();
  }

  /** Starts keeping {@link holds} up to date, rebuilding the counts from every unwritten call. */
  track(): void {
    if (this.#tracking) return;
    this.#tracking = true;
    this.#unsent.clear();
    const calls = this.#calls;
    for (let i = 0; i < calls.size; i += 1) this.#countGroup(calls.keyAt(i), calls.windowAt(i), 1);
    for (const batch of this.#taken) for (const call of batch) this.#count(call, 1);
  }

  #count(call: PendingCall, delta: number): void {
    this.#countGroup(call.key, call.windowMs, delta);
  }

  #countGroup(key: string, windowMs: number | undefined, delta: number): void {
    if (!this.#tracking) return;
    const group = windowMs === undefined ? key : groupOf({ key, windowMs });
    const left = (this.#unsent.get(group) ?? 0) + delta;
    if (left <= 0) this.#unsent.delete(group);
    else this.#unsent.set(group, left);
  }

  /** Journals a call: `windowMs` for a call of one of `limitAll()`'s windows. */
  add(key: string, at: number, cost: number, id: SentId, windowMs?: number): void {
    this.#calls.push(key, at, cost, id, windowMs);
    this.#bytes += bytesOf(key, id);
    if (this.#tracking) this.#countGroup(key, windowMs, 1);
    if (this.#calls.size > this.maxPending || this.#bytes > this.maxBytes) this.#drop();
  }

  /** Drops the oldest waiting calls until both bounds hold (one call always fits: see `maxPendingBytes`). */
  #drop(): void {
    let dropped = 0;
    const calls = this.#calls;
    while (calls.size > this.maxPending || (this.#bytes > this.maxBytes && calls.size > 1)) {
      const key = calls.keyAt(0);
      this.#bytes -= bytesOf(key, calls.idAt(0));
      this.#countGroup(key, calls.windowAt(0), -1);
      calls.shift();
      dropped += 1;
    }
    if (dropped === 0) return;
    this.dropped += dropped;
    this.onDrop(dropped);
  }

  /**
   * Drops every waiting call (at `close()`: Redis will never see them), counted in `dropped` but not
   * told to `onDrop` (the caller reports them). Returns how many.
   */
  dropAll(): number {
    const calls = this.#calls;
    const dropped = calls.size;
    calls.retain((i) => {
      this.#countGroup(calls.keyAt(i), calls.windowAt(i), -1);
      return false;
    });
    this.#bytes = 0;
    this.dropped += dropped;
    return dropped;
  }

  /**
   * Drops the waiting calls of one group (see {@link groupOf}): they will not be written. Calls a
   * pass is writing now are not recalled.
   */
  forget(group: string): void {
    const calls = this.#calls;
    calls.retain((i) => {
      const key = calls.keyAt(i);
      const windowMs = calls.windowAt(i);
      if ((windowMs === undefined ? key : groupOf({ key, windowMs })) !== group) return true;
      this.#countGroup(key, windowMs, -1);
      this.#bytes -= bytesOf(key, calls.idAt(i));
      return false;
    });
  }

  /**
   * Drops the call of `group` whose id `matches` (a refund): it will not be written. Returns its
   * cost, and whether a pass had sent it already (its batch is on the connection: a removal sent now
   * runs after it in Redis; should that batch fail, the call does not come back to the journal), or
   * undefined when the journal does not hold it.
   */
  forgetCall(group: string, matches: (id: CallId) => boolean): { cost: number; sent: boolean } | undefined {
    const recalled = this.#recalled;
    const own = (call: PendingCall | undefined): call is PendingCall =>
      call !== undefined && !recalled.has(call) && groupOf(call) === group && matches(call.id);
    const calls = this.#calls;
    for (let i = 0; i < calls.size; i += 1) {
      const key = calls.keyAt(i);
      const windowMs = calls.windowAt(i);
      const id = calls.idAt(i);
      if ((windowMs === undefined ? key : groupOf({ key, windowMs })) !== group || !matches(id)) continue;
      const cost = calls.costAt(i);
      calls.removeAt(i);
      this.#bytes -= bytesOf(key, id);
      this.#countGroup(key, windowMs, -1);
      return { cost, sent: false };
    }
    for (const batch of this.#taken) {
      const i = batch.findIndex(own);
      if (i < 0) continue;
      const call = batch[i] as PendingCall;
      batch.splice(i, 1);
      recalled.add(call);
      this.#count(call, -1);
      return { cost: call.cost, sent: false };
    }
    const sent = this.#inPass.find(own);
    if (sent === undefined) return undefined;
    recalled.add(sent);
    return { cost: sent.cost, sent: true };
  }

  /**
   * Writes every pending call admitted after `cutoff` (local clock), grouped by key (and window),
   * in batches of 200, `concurrency` at a time. A call with its own `windowMs` is still in its window
   * after `now - windowMs` instead. A failed batch does not stop the others (on a Cluster, a master
   * that is down must not hold back the keys of the others): the unwritten calls go back to the
   * journal and the first error is rethrown.
   */
  async flush(cutoff: number, concurrency: number, write: WriteBatch, now = Number.NEGATIVE_INFINITY): Promise<ReconcileResult> {
    const taken = this.#calls.takeAll();
    this.#bytes = 0;
    this.#writing = taken.length;
    this.#inPass = taken;
    try {
      return await this.#write(taken, cutoff, concurrency, write, now);
    } finally {
      this.#writing = 0;
      this.#inPass = [];
      this.#recalled.clear();
    }
  }

  async #write(
    taken: readonly PendingCall[],
    cutoff: number,
    concurrency: number,
    write: WriteBatch,
    now: number,
  ): Promise<ReconcileResult> {
    const result: ReconcileResult = { written: 0, expired: 0, present: 0, remaining: 0 };
    const byKey = new Map<string, PendingCall[]>();
    for (const call of taken) {
      if (call.at <= (call.windowMs === undefined ? cutoff : now - call.windowMs)) {
        result.expired += 1;
        this.#count(call, -1);
        continue;
      }
      const group = groupOf(call);
      const calls = byKey.get(group);
      if (calls === undefined) byKey.set(group, [call]);
      else calls.push(call);
    }
    const batches: PendingCall[][] = [];
    for (const calls of byKey.values()) {
      for (let i = 0; i < calls.length; i += BATCH) batches.push(calls.slice(i, i + BATCH));
    }
    for (const batch of batches) this.#taken.add(batch);
    let next = 0;
    let failure: { error: unknown } | undefined;
    const unwritten: PendingCall[][] = [];
    const worker = async (): Promise<void> => {
      while (next < batches.length) {
        const batch = batches[next++] as PendingCall[];
        // `write` sends the batch before it returns (its command is on the connection): from here
        // on, a decision of these keys is sent after it.
        this.#taken.delete(batch);
        if (batch.length === 0) continue; // every call of it was refunded
        for (const call of batch) this.#count(call, -1);
        try {
          const [written, expired, present] = await write((batch[0] as PendingCall).key, batch);
          result.written += written;
          result.expired += expired;
          result.present += present;
        } catch (error) {
          failure ??= { error };
          unwritten.push(batch);
          for (const call of batch) if (!this.#recalled.has(call)) this.#count(call, 1);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, batches.length) }, worker));
    if (failure !== undefined) {
      // A failed batch may have been written before its reply was lost: its ids make a re-send harmless.
      const back = unwritten.flat().filter((call) => !this.#recalled.has(call));
      this.#calls.unshift(back);
      for (const call of back) this.#bytes += pendingBytes(call);
      // Calls were added during the pass: the bounds hold again by dropping the oldest.
      if (this.size > this.maxPending || this.#bytes > this.maxBytes) this.#drop();
      result.remaining = this.size;
      throw new PartialWriteError(result, failure.error);
    }
    result.remaining = this.size;
    return result;
  }
}

/**
 * A re-seed after Redis lost its data: writes the warm windows' `calls` of the groups in `pending`,
 * in batches of 200 per group, `concurrency` at a time. The calls are read once, before any write
 * (a window changes while the writes wait), and never copied into the journal, so that a re-seed
 * cannot take the room of a call Redis never saw. A group leaves `pending` when its last batch is
 * sent; a failed batch puts its group back (a later pass writes it again: the ids make that
 * harmless). Never throws: `failed` tells.
 */
export async function reseed(
  calls: Iterable<PendingCall>,
  pending: Set<string>,
  concurrency: number,
  write: WriteBatch,
): Promise<ReconcileResult & { failed: boolean }> {
  const batches: { group: string; calls: PendingCall[]; last: boolean }[] = [];
  for (const call of calls) {
    const group = groupOf(call);
    if (!pending.has(group)) continue;
    const open = batches.at(-1);
    if (open !== undefined && open.group === group && open.calls.length < BATCH) {
      open.calls.push(call);
      continue;
    }
    if (open !== undefined && open.group === group) open.last = false;
    batches.push({ group, calls: [call], last: true });
  }
  // A group with no call left in its window (they expired, or reset() forgot the key) has nothing to write.
  const batched = new Set(batches.map((batch) => batch.group));
  for (const group of pending) if (!batched.has(group)) pending.delete(group);
  const result = { written: 0, expired: 0, present: 0, remaining: 0, failed: false };
  /** Groups with a failed batch: they stay pending when their last batch is sent. */
  const failedGroups = new Set<string>();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < batches.length) {
      const batch = batches[next++] as (typeof batches)[number];
      if (batch.last && !failedGroups.has(batch.group)) pending.delete(batch.group);
      try {
        const [written, expired, present] = await write((batch.calls[0] as PendingCall).key, batch.calls);
        result.written += written;
        result.expired += expired;
        result.present += present;
      } catch {
        result.failed = true;
        failedGroups.add(batch.group);
        pending.add(batch.group);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, batches.length) }, worker));
  return result;
}
