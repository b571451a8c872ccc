import { describe, expect, it, vi } from 'vitest';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import {
  CALL_BYTES,
  groupOf,
  pendingBytes,
  Journal,
  PartialWriteError,
  reseed,
  type PendingCall,
  type WriteBatch,
} from '../../src/recovery/Journal.js';
import { ticks } from '../support/ticks.js';
import type { GeneratedId } from '../../src/base/call.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Journals `c` in `r`. */
function add(r: Journal, c: PendingCall): void {
  r.add(c.key, c.at, c.cost, c.id, c.windowMs);
}

/** Adds `call` to `r` and keeps only a weak reference to it (made here, so that no caller's frame holds it). */
function addWatched(r: Journal, call: PendingCall): WeakRef<PendingCall> {
  add(r, call);
  return new WeakRef(call);
}

/** True once `ref`'s object is garbage collected (a WeakRef holds its object until the turn ends). */
async function collected(ref: WeakRef<object>): Promise<boolean> {
  await new Promise((resolve) => setImmediate(resolve));
  gc();
  return ref.deref() === undefined;
}

function call(key: string, at: number, n: number, cost = 1): PendingCall {
  return { key, at, cost, id: `${key}-${n}` };
}

/** A writer that records every batch it receives and reports every call written. */
function recorder() {
  const batches: { key: string; ids: string[] }[] = [];
  const write: WriteBatch = async (key, calls) => {
    batches.push({ key, ids: calls.map((c) => String(c.id)) });
    return [calls.length, 0, 0];
  };
  return { batches, write };
}

describe('Journal', () => {
  it('writes nothing and calls no writer when empty', async () => {
    const r = new Journal(100);
    const writer = vi.fn<WriteBatch>();
    expect(await r.flush(0, 8, writer)).toEqual({ written: 0, expired: 0, present: 0, remaining: 0 });
    expect(writer).not.toHaveBeenCalled();
  });

  it('drops calls at or before the cutoff and counts them as expired', async () => {
    const r = new Journal(100);
    add(r, call('k', 100, 1));
    add(r, call('k', 101, 2));
    add(r, call('k', 102, 3));
    add(r, call('j', 50, 4));
    const { batches, write } = recorder();
    expect(await r.flush(101, 8, write)).toEqual({ written: 1, expired: 3, present: 0, remaining: 0 });
    expect(batches).toEqual([{ key: 'k', ids: ['k-3'] }]);
    expect(r.size).toBe(0);
  });

  it('adds up what the writer reports: written, expired in Redis, already present', async () => {
    const r = new Journal(100);
    for (let i = 0; i < 5; i++) add(r, call('a', 10, i));
    for (let i = 0; i < 3; i++) add(r, call('b', 10, i));
    const write: WriteBatch = async (key) => (key === 'a' ? [2, 1, 2] : [1, 1, 1]);
    expect(await r.flush(0, 8, write)).toEqual({ written: 3, expired: 2, present: 3, remaining: 0 });
  });

  it('groups calls by key, in call order, in batches of at most 200', async () => {
    const r = new Journal(10_000);
    for (let i = 0; i < 450; i++) {
      add(r, call('a', 10 + i, i));
      if (i < 3) add(r, call('b', 10 + i, i));
    }
    const { batches, write } = recorder();
    expect(await r.flush(0, 8, write)).toEqual({ written: 453, expired: 0, present: 0, remaining: 0 });
    expect(batches.map((b) => [b.key, b.ids.length])).toEqual([
      ['a', 200],
      ['a', 200],
      ['a', 50],
      ['b', 3],
    ]);
    const ids = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `a-${from + i}`);
    expect(batches[0]?.ids).toEqual(ids(0, 200));
    expect(batches[1]?.ids).toEqual(ids(200, 400));
    expect(batches[2]?.ids).toEqual(ids(400, 450));
    expect(batches[3]?.ids).toEqual(['b-0', 'b-1', 'b-2']);
  });

  it('passes each call whole: key, time, cost and id', async () => {
    const r = new Journal(100);
    add(r, { key: 'k', at: 1234, cost: 7, id: 'req-1' });
    const seen: PendingCall[][] = [];
    await r.flush(0, 8, async (_, calls) => {
      seen.push([...calls]);
      return [1, 0, 0];
    });
    expect(seen).toEqual([[{ key: 'k', at: 1234, cost: 7, id: 'req-1' }]]);
  });

  it('runs at most 8 batches at once', async () => {
    const r = new Journal(100);
    for (let k = 0; k < 20; k++) add(r, call(`k${k}`, 10, 0));
    let running = 0;
    let most = 0;
    const started: string[] = [];
    const gates: (() => void)[] = [];
    const flushing = r.flush(0, 8, async (key) => {
      started.push(key);
      running += 1;
      most = Math.max(most, running);
      await new Promise<void>((resolve) => gates.push(resolve));
      running -= 1;
      return [1, 0, 0];
    });
    await ticks();
    expect(started).toHaveLength(8);
    expect(running).toBe(8);
    // Releasing one batch lets exactly one more start.
    gates.shift()?.();
    await ticks();
    expect(started).toHaveLength(9);
    while (gates.length > 0) {
      gates.shift()?.();
      await ticks();
    }
    expect(await flushing).toEqual({ written: 20, expired: 0, present: 0, remaining: 0 });
    expect(most).toBe(8);
    expect(new Set(started).size).toBe(20);
  });

  it('on a writer failure goes on with the other batches, puts the failed calls back and throws a PartialWriteError: the failure, and `partial`', async () => {
    const r = new Journal(100);
    for (let k = 0; k < 10; k++) add(r, call(`k${k}`, 10, 0));
    add(r, call('old', 1, 0)); // expired
    const failure = new Error('Redis could not answer');
    const sent: string[] = [];
    const thrown = await r
      .flush(5, 8, async (key) => {
        sent.push(key);
        if (key === 'k0') throw failure;
        await ticks(3);
        return [1, 0, 0];
      })
      .catch((error: unknown) => error);
    expect(thrown).toBeInstanceOf(PartialWriteError);
    expect((thrown as PartialWriteError).cause).toBe(failure);
    // k0 failed; the others were still sent (a master down must not hold back the others' keys).
    expect(sent).toEqual(['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8', 'k9']);
    expect((thrown as { partial: unknown }).partial).toEqual({ written: 9, expired: 1, present: 0, remaining: 1 });
    expect(r.size).toBe(1);
    expect([r.holds('k0'), r.holds('k1'), r.holds('old')]).toEqual([true, false, false]);
    // The next pass writes exactly the calls that were put back.
    const { batches, write } = recorder();
    expect(await r.flush(5, 8, write)).toEqual({ written: 1, expired: 0, present: 0, remaining: 0 });
    expect(batches.map((b) => b.key)).toEqual(['k0']);
    expect(r.size).toBe(0);
    expect(r.holds('k0')).toBe(false);
  });

  it('holds a key from the first call added until its last call is sent, expired or dropped', async () => {
    const r = new Journal(3);
    expect(r.holds('a')).toBe(false);
    add(r, call('a', 10, 0));
    add(r, call('a', 11, 1));
    add(r, { key: 'a', at: 12, cost: 1, id: 'w', windowMs: 1000 }); // a limitAll() window: its own group
    expect([r.holds('a'), r.holds(groupOf({ key: 'a', windowMs: 1000 }))]).toEqual([true, true]);
    add(r, call('b', 13, 0)); // over maxPending: a's oldest call is dropped
    expect(r.dropped).toBe(1);
    add(r, call('c', 5, 0)); // drops another of a's calls; c's is expired at the flush below
    expect(r.holds('c')).toBe(true);
    const sent: string[] = [];
    const gates: (() => void)[] = [];
    // One batch at a time: the second is taken by the pass but not sent while the first is out.
    const flushing = r.flush(6, 1, async (key) => {
      sent.push(key);
      await new Promise<void>((resolve) => gates.push(resolve));
      return [1, 0, 0];
    });
    // a's plain calls were dropped, c's expired; a's limitAll() call is sent (Redis runs a
    // connection's commands in order: a decision sent now comes after it), b's is not yet.
    expect(sent).toEqual(['a']);
    expect([r.holds('a'), r.holds(groupOf({ key: 'a', windowMs: 1000 })), r.holds('b'), r.holds('c')]).toEqual([false, false, true, false]);
    while (gates.length > 0 || sent.length < 2) {
      gates.shift()?.();
      await ticks();
    }
    await flushing;
    expect(sent).toEqual(['a', 'b']);
    expect([r.holds(groupOf({ key: 'a', windowMs: 1000 })), r.holds('b')]).toEqual([false, false]);
  });

  it('holds a key again when the write of its calls fails', async () => {
    const r = new Journal(100);
    add(r, call('a', 10, 0));
    let fail: (error: Error) => void = () => undefined;
    const flushing = r.flush(0, 8, () => new Promise((_, reject) => (fail = reject)));
    expect(r.holds('a')).toBe(false);
    fail(new Error('down'));
    await expect(flushing).rejects.toThrow('down');
    expect([r.holds('a'), r.size]).toEqual([true, 1]);
  });

  it('forgets the waiting calls of one group only (reset()), and stops holding it', async () => {
    const r = new Journal(100);
    add(r, call('a', 10, 0));
    add(r, call('b', 11, 0));
    add(r, call('a', 12, 1));
    add(r, { key: 'a', at: 13, cost: 1, id: 'w', windowMs: 1000 }); // limitAll()'s window of a: another group
    r.forget('a');
    expect(r.size).toBe(2);
    expect([r.holds('a'), r.holds('b'), r.holds(groupOf({ key: 'a', windowMs: 1000 }))]).toEqual([false, true, true]);
    const { batches, write } = recorder();
    expect(await r.flush(0, 8, write, 0)).toMatchObject({ written: 2 });
    expect(batches.map((b) => b.ids)).toEqual([['b-0'], ['w']]);
  });

  it('keeps no counts while not tracking (an outage), and rebuilds them when tracking resumes', async () => {
    const r = new Journal(100);
    add(r, call('a', 10, 0));
    r.untrack();
    add(r, call('b', 10, 0));
    expect([r.holds('a'), r.holds('b')]).toEqual([false, false]);
    r.track();
    expect([r.holds('a'), r.holds('b'), r.holds('c')]).toEqual([true, true, false]);
    const gates: (() => void)[] = [];
    const flushing = r.flush(0, 1, async () => {
      await new Promise<void>((resolve) => gates.push(resolve));
      return [1, 0, 0];
    });
    await ticks();
    // Toggled while the pass writes a's batch: b's, taken but not sent, is counted again; a's is out.
    r.untrack();
    r.track();
    expect([r.holds('a'), r.holds('b')]).toEqual([false, true]);
    while (gates.length > 0) {
      gates.shift()?.();
      await ticks();
    }
    await flushing;
    expect([r.holds('a'), r.holds('b')]).toEqual([false, false]);
  });

  it('restores its size when every batch fails', async () => {
    const r = new Journal(1000);
    for (let i = 0; i < 250; i++) add(r, call('k', 10, i));
    const thrown = await r.flush(0, 8, () => Promise.reject(new Error('down'))).catch((error: unknown) => error);
    expect((thrown as { partial: unknown }).partial).toEqual({ written: 0, expired: 0, present: 0, remaining: 250 });
    expect(r.size).toBe(250);
  });

  it('keeps calls added during a failed pass behind the ones put back', async () => {
    const r = new Journal(100);
    add(r, call('a', 10, 1));
    const thrown = await r
      .flush(0, 8, async () => {
        add(r, call('b', 20, 2));
        throw new Error('down');
      })
      .catch((error: unknown) => error);
    expect((thrown as { partial: { remaining: number } }).partial.remaining).toBe(2);
    const { batches, write } = recorder();
    await r.flush(0, 8, write);
    expect(batches).toEqual([
      { key: 'a', ids: ['a-1'] },
      { key: 'b', ids: ['b-2'] },
    ]);
  });

  it('bounds memory by maxPending, dropping the oldest calls and counting them in `dropped`', async () => {
    const r = new Journal(3);
    for (let i = 0; i < 5; i++) add(r, call('k', 10 + i, i));
    expect(r.size).toBe(3);
    expect(r.dropped).toBe(2);
    const { batches, write } = recorder();
    expect(await r.flush(0, 8, write)).toEqual({ written: 3, expired: 0, present: 0, remaining: 0 });
    expect(batches).toEqual([{ key: 'k', ids: ['k-2', 'k-3', 'k-4'] }]);
    expect(r.dropped).toBe(2);
  });

  it('keeps the newest maxPending calls in order over many drops', async () => {
    const r = new Journal(1000);
    for (let i = 0; i < 5000; i++) add(r, call('k', 10 + i, i));
    expect(r.size).toBe(1000);
    expect(r.dropped).toBe(4000);
    const { batches, write } = recorder();
    await r.flush(0, 8, write);
    expect(batches.flatMap((b) => b.ids)).toEqual(Array.from({ length: 1000 }, (_, i) => `k-${4000 + i}`));
  });

  it('lets go of the calls it drops: a dropped call is garbage', async () => {
    const r = new Journal(3);
    const dropped = addWatched(r, call('first', 10, 0));
    for (let i = 0; i < 5; i++) add(r, call('k', 11 + i, i));
    expect(r.dropped).toBe(3);
    expect(await collected(dropped)).toBe(true);
  });

  it('bounds the bytes of its waiting calls by maxBytes, dropping the oldest and counting them in `dropped`', async () => {
    const small = (n: number): PendingCall => ({ key: 'k'.repeat(10), at: 10 + n, cost: 1, id: `s${String(n).padStart(2, '0')}` });
    const big: PendingCall = { key: 'b'.repeat(1000), at: 100, cost: 1, id: 0 as GeneratedId };
    const S = pendingBytes(small(0));
    const B = pendingBytes(big);
    expect(S).toBe(CALL_BYTES + 2 * 10 + 2 * 3); // the caller's id (a string) counts
    expect(B).toBe(CALL_BYTES + 2 * 1000); // a generated id (a number) costs no string
    const drops: number[] = [];
    const r = new Journal(100, 20 * S, (calls) => drops.push(calls));
    for (let i = 0; i < 25; i++) add(r, small(i));
    expect([r.size, r.dropped, r.bytes]).toEqual([20, 5, 20 * S]);
    // A call that weighs several drops as many of the oldest at once, told as one drop.
    add(r, big);
    const kept = Math.floor((20 * S - B) / S);
    expect([r.size, r.dropped, r.bytes]).toEqual([kept + 1, 25 - kept, kept * S + B]);
    expect(drops).toEqual([1, 1, 1, 1, 1, 20 - kept]);
    const { batches, write } = recorder();
    await r.flush(0, 8, write);
    expect(batches.flatMap((b) => b.ids)).toEqual([...Array.from({ length: kept }, (_, i) => `s${25 - kept + i}`), '0']);
    expect([r.size, r.bytes, r.dropped]).toEqual([0, 0, 25 - kept]);
  });

  it.each([
    ['within the bound during the pass', 2, 4, 0],
    ['over it during the pass too', 4, 3, 1],
  ])('keeps its byte count exact through a failed pass (%s) and forget()', async (_, droppedOfA, keptOfB, droppedDuringPass) => {
    const weigh = (calls: PendingCall[]): number => calls.reduce((sum, c) => sum + pendingBytes(c), 0);
    const a = Array.from({ length: 4 }, (_, i) => call('a', 10 + i, i));
    const b = Array.from({ length: 4 }, (_, i) => call('b'.repeat(20), 20 + i, i));
    const kept = [...a.slice(droppedOfA), ...b.slice(4 - keptOfB)];
    const r = new Journal(100, weigh(kept));
    for (const c of a) add(r, c);
    await r
      .flush(0, 8, async () => {
        for (const c of b) add(r, c);
        expect(r.dropped).toBe(droppedDuringPass);
        throw new Error('down');
      })
      .catch(() => undefined);
    // a's calls are put back in front; the bound holds again by dropping the oldest.
    expect([r.size, r.bytes, r.dropped]).toEqual([kept.length, weigh(kept), droppedOfA + droppedDuringPass]);
    const { batches, write } = recorder();
    r.forget('a');
    expect([r.size, r.bytes]).toEqual([keptOfB, weigh(b.slice(4 - keptOfB))]);
    await r.flush(0, 8, write);
    expect(batches.flatMap((x) => x.ids)).toEqual(b.slice(4 - keptOfB).map((c) => c.id));
  });

  // BUG (src/recovery/Journal.ts, flush's failure path): the calls put back are prepended to the journal
  // without re-applying maxPending, so calls admitted during a failed pass push it past the bound,
  // and add() only ever drops one call per call added, so it never comes back under it.
  it('stays within maxPending after a failed pass during which calls were added', async () => {
    const r = new Journal(3);
    for (let i = 0; i < 3; i++) add(r, call('a', 10, i));
    await r
      .flush(0, 8, async () => {
        for (let i = 0; i < 3; i++) add(r, call('b', 20, i));
        throw new Error('down');
      })
      .catch(() => undefined);
    add(r, call('c', 30, 0));
    expect(r.size).toBeLessThanOrEqual(3);
  });
});

describe('Journal.forgetCall (a refund)', () => {
  const is = (id: string) => (kept: string | number) => kept === id;

  it('drops one waiting call of its group, by id: never written, its bytes and its hold released', async () => {
    const r = new Journal(100);
    add(r, call('a', 10, 0, 3));
    add(r, call('a', 11, 1));
    add(r, { key: 'a', at: 12, cost: 1, id: 'a-0', windowMs: 1000 }); // limitAll()'s window of a: another group
    const bytes = r.bytes;
    expect(r.forgetCall('a', is('a-0'))).toEqual({ cost: 3, sent: false });
    expect(r.forgetCall('a', is('a-0'))).toBeUndefined();
    expect(r.forgetCall('b', is('a-1'))).toBeUndefined();
    expect([r.size, r.bytes]).toEqual([2, bytes - pendingBytes(call('a', 10, 0, 3))]);
    expect(r.forgetCall('a', is('a-1'))).toEqual({ cost: 1, sent: false });
    expect(r.holds('a')).toBe(false);
    const { batches, write } = recorder();
    await r.flush(0, 8, write, 0);
    expect(batches.map((b) => b.ids)).toEqual([['a-0']]); // the limitAll() call only
  });

  it('recalls a call from a batch a pass has taken but not sent, and says when the pass sent it already', async () => {
    const r = new Journal(100);
    add(r, call('a', 10, 0));
    add(r, call('b', 10, 0));
    add(r, call('b', 10, 1));
    const sent: string[][] = [];
    const gates: ((fail: boolean) => void)[] = [];
    // One batch at a time: a's is sent (and waits on Redis), b's is taken but not sent.
    const flushing = r.flush(0, 1, (_key, calls) => {
      sent.push(calls.map((c) => String(c.id)));
      return new Promise((resolve, reject) => gates.push((fail) => (fail ? reject(new Error('down')) : resolve([calls.length, 0, 0]))));
    });
    expect(r.forgetCall('a', is('a-0'))).toEqual({ cost: 1, sent: true });
    expect(r.forgetCall('a', is('a-0'))).toBeUndefined();
    expect(r.forgetCall('b', is('b-1'))).toEqual({ cost: 1, sent: false });
    expect(r.holds('b')).toBe(true);
    gates.shift()?.(true); // a's batch fails: its refunded call does not come back
    await ticks();
    expect(sent).toEqual([['a-0'], ['b-0']]);
    gates.shift()?.(false);
    await expect(flushing).rejects.toThrow('down');
    expect([r.size, r.holds('a'), r.holds('b')]).toEqual([0, false, false]);
  });

  it('sends no empty batch when every call of a taken batch was refunded', async () => {
    const r = new Journal(100);
    add(r, call('a', 10, 0));
    add(r, call('b', 10, 0));
    const sent: string[] = [];
    let release: () => void = () => undefined;
    const flushing = r.flush(0, 1, async (key) => {
      sent.push(key);
      await new Promise<void>((resolve) => (release = resolve));
      return [1, 0, 0];
    });
    expect(r.forgetCall('b', is('b-0'))).toEqual({ cost: 1, sent: false });
    release();
    expect(await flushing).toEqual({ written: 1, expired: 0, present: 0, remaining: 0 });
    expect(sent).toEqual(['a']);
  });
});

describe('reseed', () => {
  const call = (key: string, i: number): PendingCall => ({ key, at: 1_000 + i, cost: 1, id: i as GeneratedId });

  it('writes every pending group in batches of 200 and releases each once its last batch is sent', async () => {
    const sent: [string, number][] = [];
    const pending = new Set(['a', 'b']);
    const calls = [...Array.from({ length: 450 }, (_, i) => call('a', i)), call('b', 0), call('c', 0)];
    const result = await reseed(calls, pending, 1, async (key, batch) => {
      sent.push([key, batch.length]);
      return [batch.length, 0, 0];
    });
    expect(sent).toEqual([
      ['a', 200],
      ['a', 200],
      ['a', 50],
      ['b', 1],
    ]);
    expect(result).toMatchObject({ written: 451, failed: false });
    expect([...pending]).toEqual([]);
  });

  it('releases a pending group that has no call left in its window', async () => {
    const pending = new Set(['gone', 'a']);
    await reseed([call('a', 0)], pending, 8, async (_, batch) => [batch.length, 0, 0]);
    expect([...pending]).toEqual([]);
  });

  it('keeps a group pending when any of its batches failed, even if its last one was sent after', async () => {
    const pending = new Set(['a']);
    let n = 0;
    const result = await reseed(
      Array.from({ length: 450 }, (_, i) => call('a', i)),
      pending,
      1,
      async (_, batch) => {
        n += 1;
        if (n === 1) throw new Error('Redis could not answer');
        return [batch.length, 0, 0];
      },
    );
    expect(result.failed).toBe(true);
    expect([...pending]).toEqual(['a']);
  });
});
