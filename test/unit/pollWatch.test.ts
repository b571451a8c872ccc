/**
 * PollWatch on the real event loop (its phases are the point) with a perf clock that moves only when
 * told to: what an observation vouches for, in which phase, and the idle time since a mark.
 */
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { PollWatch } from '../../src/redis/PollWatch.js';

function fakePerf(): { now(): number; set(ms: number): void } {
  let t = 0;
  return { now: () => t, set: (ms) => void (t = ms) };
}

/** Runs `fn` in a check phase (right after a poll). */
const inCheck = <T>(fn: () => T): Promise<T> => new Promise((resolve) => setImmediate(() => resolve(fn())));
/** Runs `fn` in a timers phase (after the poll of the iteration it fires in). */
const inTimers = <T>(fn: () => T): Promise<T> => new Promise((resolve) => setTimeout(() => resolve(fn()), 0));

describe('PollWatch', () => {
  it('vouches for nothing before it has seen a poll complete after an observation', () => {
    const perf = fakePerf();
    const watch = new PollWatch(perf);
    perf.set(100);
    watch.observe('any');
    perf.set(200);
    watch.observe('any'); // the same turn: no poll in between
    expect(watch.silentMs(0)).toBe(Number.NEGATIVE_INFINITY);
  });

  it('vouches, in the check phase after the next poll, for the time of an observation made before it', async () => {
    const perf = fakePerf();
    const watch = new PollWatch(perf);
    await inTimers(() => {
      perf.set(100);
      watch.observe('any');
      perf.set(300); // this process stays busy after the observation: not vouched for
    });
    await inCheck(() => watch.observe('check'));
    expect(watch.silentMs(40)).toBe(60);
  });

  it('does not vouch for an observation made inside a poll phase until a later poll has completed', async () => {
    const perf = fakePerf();
    const watch = new PollWatch(perf);
    const silent: number[] = [];
    const done = Promise.withResolvers<void>();
    // An I/O callback runs in a poll phase: sockets whose callbacks come later in it are unread yet.
    void readFile(new URL(import.meta.url)).then(() => {
      perf.set(100);
      watch.observe('any');
      perf.set(200);
      // The check phase right after this poll: the poll began before the observation.
      setImmediate(() => {
        watch.observe('check');
        silent.push(watch.silentMs(0));
        perf.set(300);
        // The check phase of the next iteration: its poll began after the latest observation (the
        // one just above, at 200), and is complete.
        setImmediate(() => {
          watch.observe('check');
          silent.push(watch.silentMs(0));
          done.resolve();
        });
      });
    });
    await done.promise;
    expect(silent).toEqual([Number.NEGATIVE_INFINITY, 200]);
  });

  it('counts the time the loop waited for I/O since the latest mark, whatever the perf clock says', async () => {
    const perf = fakePerf();
    const watch = new PollWatch(perf);
    watch.mark();
    await sleep(30); // idle: nothing else to do
    watch.observe('any');
    // The timer may fire a millisecond early (whole ms), and the loop does a little work around it.
    expect(watch.silentMs(0)).toBeGreaterThanOrEqual(25);
    watch.mark();
    expect(watch.silentMs(0)).toBeLessThanOrEqual(0);
  });
});
