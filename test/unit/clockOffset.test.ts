import { describe, expect, it } from 'vitest';
import { ClockOffset } from '../../src/redis/ClockOffset.js';
import { prng } from '../support/model.js';
import { sample } from '../support/clockOffset.js';

/** Two simulated clocks: Redis's runs `offset` ms ahead of the local one; both are read in whole ms. */
function roundTrip(offset: ClockOffset, trueOffset: number, at: number, there: number, back: number): void {
  sample(offset, Math.floor(at), Math.floor(at + there + trueOffset), Math.floor(at + there + back));
}

describe('ClockOffset', () => {
  it('is 0 both ways until a round trip is seen', () => {
    const offset = new ClockOffset(() => 0);
    expect(offset.known).toBe(false);
    expect([offset.low(), offset.high()]).toEqual([0, 0]);
  });

  it('keeps bounds that hold the true offset, whatever the round trips, and narrow with fast ones', () => {
    const random = prng(11);
    for (const trueOffset of [0, 0.4, -3.7, 250.25, -1200.9]) {
      let elapsed = 0;
      const offset = new ClockOffset(() => elapsed);
      for (let i = 0; i < 2000; i++) {
        elapsed += random() * 5;
        // Slow trips, lopsided ones (a reply held up in the event loop), and fast ones.
        const there = random() < 0.2 ? random() * 40 : random() * 0.3;
        const back = random() < 0.2 ? random() * 40 : random() * 0.3;
        roundTrip(offset, trueOffset, 1_700_000_000_000 + elapsed, there, back);
        expect(offset.low()).toBeLessThanOrEqual(trueOffset);
        expect(offset.high()).toBeGreaterThanOrEqual(trueOffset);
      }
      // Fast round trips in whole ms leave about 2 ms between the bounds.
      expect(offset.high() - offset.low()).toBeLessThanOrEqual(3);
    }
  });

  it('is not misled by a first round trip that was slow', () => {
    // The chaos suite found this: a slow first reply taken as the estimate put a written-back call
    // 6 ms early in Redis, which then admitted one call too many.
    let elapsed = 0;
    const offset = new ClockOffset(() => elapsed);
    sample(offset, 1000, 1001, 1030); // Redis ran it 1 ms after the send, the reply came 29 ms later
    expect(offset.low()).toBeLessThanOrEqual(0);
    expect(offset.high()).toBeGreaterThanOrEqual(0);
    elapsed = 10;
    sample(offset, 1010, 1010, 1010);
    expect([offset.low(), offset.high()]).toEqual([-1, 1]);
  });

  it('widens while no round trip comes, so that drifting clocks stay inside', () => {
    let elapsed = 0;
    const offset = new ClockOffset(() => elapsed);
    sample(offset, 5000, 5000, 5000);
    elapsed = 60_000; // a minute without Redis: 0.2 ms per s each way
    expect(offset.low()).toBeCloseTo(-13, 6);
    expect(offset.high()).toBeCloseTo(13, 6);
    // Except for the staleness deadline, which must not move into the past while Redis is away.
    expect(offset.lowAtSample()).toBe(-1);
  });

  it('remembers wide bounds for the window in force: a window lengthened later keeps them longer', () => {
    let elapsed = 0;
    const window = { ms: 100 };
    const offset = new ClockOffset(
      () => elapsed,
      () => window.ms,
    );
    elapsed = 60;
    sample(offset, 0, 30, 60); // a slow round trip: bounds 62 ms apart
    elapsed = 61;
    sample(offset, 61, 61, 61); // a fast one narrows them
    window.ms = 1_000; // update({ windowMs }) lengthened the window
    elapsed = 500; // past two of the old windows, within one of the new
    expect(offset.uncertainty()).toBeGreaterThanOrEqual(63);
    window.ms = 100; // shortened again: forgotten two windows after they were seen
    elapsed = 800;
    expect(offset.uncertainty()).toBeLessThan(5);
  });

  it('starts again from the sample when a clock steps out of the bounds (or another Redis answers)', () => {
    let elapsed = 0;
    const offset = new ClockOffset(() => elapsed, 1000);
    sample(offset, 5000, 5000, 5000);
    elapsed = 1;
    sample(offset, 6000, 6500, 6000); // Redis's clock jumped 500 ms ahead
    expect([offset.low(), offset.high()]).toEqual([499, 501]);
    // A time moved before the step may be off by both bounds' span, for a window (keepMs) after it.
    expect(offset.uncertainty()).toBeGreaterThanOrEqual(503);
    elapsed = 2;
    sample(offset, 7000, 6800, 7001); // and now 200 ms behind
    expect([offset.low(), offset.high()]).toEqual([-202, -199]);
    elapsed = 2002; // two windows later it is forgotten: the bounds' width now, plus 1
    expect(offset.uncertainty()).toBeCloseTo(3 + 0.4 + 1, 6); // the high bound widened 0.2 ms per s
  });
});
