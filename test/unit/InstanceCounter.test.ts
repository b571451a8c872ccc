import { afterEach, describe, expect, it, vi } from 'vitest';
import { InstanceCounter, type BeatOp, type BeatReply, type Beats } from '../../src/recovery/InstanceCounter.js';
import { ticks } from '../support/ticks.js';

/** A beat's reply with the claims an even split gives, unless `r` says otherwise. */
function R(r: Omit<BeatReply, 'granted' | 'reserved' | 'othersClaim'> & Partial<BeatReply>): BeatReply {
  const live = Math.max(1, r.live);
  return { granted: 1 / live, reserved: 0, othersClaim: (live - 1) / live, ...r };
}

describe('InstanceCounter', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A beat's answer: live instances (every other one fresh), a full reply, or a rejection. */
  type Answer = number | BeatReply | Error;

  /**
   * Beats that answer from `answers` in order, or by the (fake) time they are sent at, recording `true`
   * for a leave beat and `false` for another.
   */
  function beatsOf(
    answers: Answer[] | ((ms: number) => Answer),
    options: { clean?: () => boolean; ops?: [BeatOp, number | undefined][] } = {},
  ) {
    const beats: boolean[] = [];
    const changes: number[] = [];
    let i = 0;
    let at = 0;
    const t0 = Date.now();
    const parts: Beats = {
      async send(op, since) {
        beats.push(op === 'leave');
        options.ops?.push([op, since]);
        if (op === 'leave') return R({ live: 0, fresh: 0 });
        const answer = typeof answers === 'function' ? answers(Date.now() - t0) : (answers[Math.min(i++, answers.length - 1)] as Answer);
        if (answer instanceof Error) throw answer;
        return typeof answer === 'number' ? R({ live: answer, fresh: Math.max(0, answer - 1) }) : answer;
      },
      clean: options.clean ?? (() => true),
      now: () => (at += 1),
      changed: (count) => changes.push(count),
      recovered: () => undefined,
      leaseMs: 1000,
    };
    return { parts, beats, changes };
  }

  /** A counter whose beats answer from `answers` in order. */
  function counter(answers: Parameters<typeof beatsOf>[0], intervalMs = 100, options: Parameters<typeof beatsOf>[1] = {}) {
    vi.useFakeTimers();
    const { parts, beats, changes } = beatsOf(answers, options);
    return { c: new InstanceCounter(intervalMs, parts), beats, changes };
  }

  it('holds a lease of leaseMs from when each answered beat was sent, none before the first, and lets it end while beats reject', async () => {
    vi.useFakeTimers();
    let failing = false;
    const parts: Beats = {
      async send(op) {
        if (op === 'leave') return R({ live: 0, fresh: 0 });
        if (failing) throw new Error('Redis could not answer');
        return R({ live: 2, fresh: 1 });
      },
      clean: () => true,
      now: () => Date.now(),
      changed: () => undefined,
      recovered: () => undefined,
      leaseMs: 1000,
    };
    const c = new InstanceCounter(100, parts);
    expect([c.leased, c.leaseLeftMs]).toEqual([false, 0]); // never seen by the others: nothing of its share is held
    c.start();
    await vi.advanceTimersByTimeAsync(500); // the beat at 500 (every 100) is the last one answered
    expect(c.leased).toBe(true);
    failing = true;
    await vi.advanceTimersByTimeAsync(999);
    expect([c.leased, c.leaseLeftMs]).toEqual([true, 1]);
    await vi.advanceTimersByTimeAsync(1);
    expect([c.leased, c.leaseLeftMs]).toEqual([false, 0]);
    failing = false;
    await vi.advanceTimersByTimeAsync(100); // the next beat answered renews it
    expect(c.leaseLeftMs).toBe(1000);
    await c.stop();
  });

  it('tells of a loss newer than the last one seen, not of one older than its first beat', async () => {
    vi.useFakeTimers();
    let vanished = 0;
    let lostAt = 5; // a loss before this instance started: nothing of its own was lost
    const parts: Beats = {
      async send(op) {
        return op === 'leave' ? R({ live: 0, fresh: 0 }) : R({ live: 1, fresh: 0, lostAt });
      },
      clean: () => true,
      now: () => Date.now(),
      changed: () => undefined,
      recovered: () => undefined,
      leaseMs: 1000,
      vanished: () => void (vanished += 1),
    };
    const c = new InstanceCounter(100, parts);
    c.start();
    await vi.advanceTimersByTimeAsync(300);
    expect(vanished).toBe(0);
    lostAt = 400;
    await vi.advanceTimersByTimeAsync(100);
    expect(vanished).toBe(1);
    await vi.advanceTimersByTimeAsync(200); // the same loss, seen again: told once
    expect(vanished).toBe(1);
    await c.stop();
  });

  it('counts 1 before any beat', () => {
    const c = new InstanceCounter(100, beatsOf([5]).parts);
    expect(c.count).toBe(1);
  });

  it('beats at once on start, then fast for a while, then every intervalMs', async () => {
    const { c, beats } = counter([1]);
    c.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(beats).toEqual([false]);
    await vi.advanceTimersByTimeAsync(19);
    expect(beats).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1); // start-up beats: every intervalMs / 5
    expect(beats).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(180);
    const settled = beats.length;
    await vi.advanceTimersByTimeAsync(300);
    expect(beats).toHaveLength(settled + 3);
    await c.stop();
  });

  it('calls onChange only when the count changes', async () => {
    const { c, changes } = counter([1, 1, 3, 3, 3, 2, 2, 2, 2]);
    c.start();
    await vi.advanceTimersByTimeAsync(800);
    expect(changes).toEqual([3, 2]);
    expect(c.count).toBe(2);
    await c.stop();
  });

  it('holds the largest count of the last 3 beats: a restarted Redis that lost the members does not shrink it', async () => {
    // Beats at 0, 100, 200, …: 4 instances, then Redis restarts empty and they come back one beat at a time.
    // Extra beats come meanwhile (the others are unrecovered): they must not lower the count either.
    const { c, changes } = counter((ms) => (ms < 200 ? 4 : ms < 300 ? 1 : ms < 400 ? 2 : ms < 700 ? 4 : 3));
    c.start();
    await vi.advanceTimersByTimeAsync(700);
    expect(changes).toEqual([4]);
    expect(c.count).toBe(4);
    // One instance left: 3 beats of 3, and the count follows.
    await vi.advanceTimersByTimeAsync(200);
    expect(changes).toEqual([4, 3]);
    await c.stop();
  });

  it('holds its claim to an even share of the held count: Redis that lost the claims does not grow it', async () => {
    // A quarter each of 4; then Redis restarts empty and this one beats first: granted the whole limit,
    // the others' claims not yet written back, while the count is held at 4. Later a fifth (one joined).
    // Regular beats every 100 ms, and faster ones (20 ms) at start and while a grant differs.
    const grant = (ms: number) => (ms < 290 ? 0.25 : ms < 390 ? 1 : ms < 890 ? 0.25 : 0.2);
    const { c } = counter((ms) => R({ live: 4, fresh: 3, granted: grant(ms) }));
    c.start();
    await vi.advanceTimersByTimeAsync(250);
    expect(c.claim).toBe(0.25);
    const seen = new Set<number | undefined>();
    for (let ms = 250; ms < 450; ms += 10) {
      await vi.advanceTimersByTimeAsync(10);
      seen.add(c.claim);
    }
    expect([...seen]).toEqual([0.25]); // granted 1 by every beat for 100 ms: held to 1 / 4
    await vi.advanceTimersByTimeAsync(500);
    expect(c.claim).toBe(0.2); // lowered at the first grant
    await c.stop();
  });

  it('keeps the last count while beats reject', async () => {
    const down = new Error('Redis could not answer');
    const { c, changes } = counter((ms) => (ms < 10 ? 4 : ms < 350 ? down : 5));
    c.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(c.count).toBe(4);
    await vi.advanceTimersByTimeAsync(300);
    expect(c.count).toBe(4);
    expect(changes).toEqual([4]);
    await vi.advanceTimersByTimeAsync(200);
    expect(c.count).toBe(5);
    expect(changes).toEqual([4, 5]);
    await c.stop();
  });

  it('treats a count of 0 as 1', async () => {
    const { c, changes } = counter([0, 3, 0, 0, 0]);
    c.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(c.count).toBe(1);
    expect(changes).toEqual([]);
    await vi.advanceTimersByTimeAsync(400);
    expect(c.count).toBe(1);
    expect(changes).toEqual([3, 1]);
    await c.stop();
  });

  it('sends a leave beat on stop and beats no more', async () => {
    const { c, beats } = counter([2]);
    c.start();
    await vi.advanceTimersByTimeAsync(100);
    const before = beats.length;
    expect(beats.every((leave) => !leave)).toBe(true);
    await c.stop();
    expect(beats).toHaveLength(before + 1);
    expect(beats.at(-1)).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(1000);
    expect(beats).toHaveLength(before + 1);
  });

  it('resolves stop even when the leave beat rejects', async () => {
    vi.useFakeTimers();
    const down = new Error('down');
    const { parts, beats } = beatsOf([down]);
    const c = new InstanceCounter(100, {
      ...parts,
      send: (op, since, claim) => parts.send(op, since, claim).then(() => Promise.reject(down)),
    });
    c.start();
    await expect(c.stop()).resolves.toBeUndefined();
    expect(beats).toEqual([false, true]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('counts every other instance unrecovered from an outage until a beat says they are back, beating faster meanwhile', async () => {
    const ops: [BeatOp, number | undefined][] = [];
    // 4 live; after the outage, 1 of the 3 others is back, then all 3.
    const { c, beats } = counter(
      (ms) => (ms < 100 ? 4 : ms < 200 ? R({ live: 4, fresh: 0 }) : ms < 240 ? R({ live: 4, fresh: 1 }) : R({ live: 4, fresh: 3 })),
      100,
      { ops },
    );
    c.start();
    await vi.advanceTimersByTimeAsync(0);
    expect([c.count, c.unrecovered]).toEqual([4, 0]);
    c.outage();
    expect(c.unrecovered).toBe(3);
    const since = ops.length;
    await vi.advanceTimersByTimeAsync(100); // a regular beat
    expect(c.unrecovered).toBe(3);
    expect(ops[since]?.[1]).toBeGreaterThan(0); // the outage's time goes with every beat after it
    await vi.advanceTimersByTimeAsync(100); // a regular beat: 1 back
    expect(c.unrecovered).toBe(2);
    const before = beats.length;
    await vi.advanceTimersByTimeAsync(20); // fast beats come every intervalMs / 5 while some are unrecovered
    expect(beats.length).toBe(before + 1);
    await vi.advanceTimersByTimeAsync(20);
    expect(c.unrecovered).toBe(0);
    const settled = beats.length;
    await vi.advanceTimersByTimeAsync(59);
    expect(beats.length).toBe(settled); // no fast beat once all are back
    await c.stop();
  });

  it('beats dirty while this instance has calls Redis has not seen, and at once when asked', async () => {
    const ops: [BeatOp, number | undefined][] = [];
    let clean = false;
    const { c } = counter([2], 1000, { ops, clean: () => clean });
    c.start();
    await vi.advanceTimersByTimeAsync(0);
    clean = true;
    c.beatNow();
    await vi.advanceTimersByTimeAsync(0);
    expect(ops.map(([op]) => op)).toEqual(['dirty', 'clean']);
    await c.stop();
  });

  it('does not let extra beats lower the held count', async () => {
    // Regular beats see 4; after a restart the extra beats see 1 and 2 (members come back one at a time).
    const { c } = counter(
      [4, R({ live: 1, fresh: 0 }), R({ live: 2, fresh: 1 }), R({ live: 2, fresh: 1 }), R({ live: 2, fresh: 1 })],
      1000,
    );
    c.start();
    await vi.advanceTimersByTimeAsync(0);
    c.outage();
    c.beatNow();
    await vi.advanceTimersByTimeAsync(0);
    for (let i = 0; i < 3; i += 1) await vi.advanceTimersByTimeAsync(200); // fast beats
    expect(c.count).toBe(4);
    expect(c.unrecovered).toBe(2);
    await c.stop();
  });

  it('beats fast for its first beats after start, so that instances started together count each other soon', async () => {
    // The other 3 instances start 30 ms after this one.
    const { c } = counter((ms) => (ms < 30 ? 1 : 4), 1000);
    c.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(c.count).toBe(1);
    await vi.advanceTimersByTimeAsync(400); // a fast beat every 200 ms (1000 / 5)
    expect(c.count).toBe(4);
    await c.stop();
  });

  it('lets the count fall at once when an instance left, not after a period', async () => {
    // 3 instances; one leaves at 450 ms (Redis says when).
    const { c } = counter((ms) => (ms < 450 ? 3 : R({ live: 2, fresh: 1, leftAt: 1_000_450 })), 100);
    c.start();
    await vi.advanceTimersByTimeAsync(400);
    expect(c.count).toBe(3);
    await vi.advanceTimersByTimeAsync(100);
    expect(c.count).toBe(2);
    await c.stop();
  });

  it('does not let a beat sent before an outage say who is back after it', async () => {
    vi.useFakeTimers();
    const pending = Promise.withResolvers<BeatReply>();
    const { parts } = beatsOf([4]);
    const c = new InstanceCounter(1000, {
      ...parts,
      send: (op) => (op === 'leave' ? Promise.resolve(R({ live: 0, fresh: 0 })) : pending.promise),
    });
    c.start(); // a beat on its way
    await vi.advanceTimersByTimeAsync(0);
    c.outage();
    pending.resolve(R({ live: 4, fresh: 3 })); // everyone clean: true before the outage, not since
    await ticks();
    expect(c.count).toBe(4);
    expect(c.unrecovered).toBe(3);
    await c.stop();
  });

  it('ignores a beat that answers after stop', async () => {
    vi.useFakeTimers();
    const pending = Promise.withResolvers<BeatReply>();
    const { parts, changes } = beatsOf([7]);
    const c = new InstanceCounter(100, {
      ...parts,
      send: (op) => (op === 'leave' ? Promise.resolve(R({ live: 0, fresh: 0 })) : pending.promise),
    });
    c.start();
    await c.stop();
    pending.resolve(R({ live: 7, fresh: 6 }));
    await ticks();
    expect(c.count).toBe(1);
    expect(changes).toEqual([]);
  });
});
