import { describe, expect, it } from 'vitest';
import { Coalescer, type QueuedCall } from '../../src/path/Coalescer.js';
import type { BatchCall, BatchOutcome } from '../../src/redis/RedisWindow.js';

/** A coalescer whose script calls are recorded (and answered when `answer` is called), with `out` of them in flight. */
function coalescer() {
  const sent: string[][] = [];
  const pending: (() => void)[] = [];
  const c = new Coalescer(
    (calls: readonly BatchCall[]) => {
      sent.push(calls.map((call) => call.key));
      return new Promise<BatchOutcome[]>((resolve) => pending.push(() => resolve([])));
    },
    undefined,
    () => true,
    () => pending.length,
  );
  const answer = async (): Promise<void> => {
    for (const done of pending.splice(0)) done();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { c, sent, answer };
}

const call = (key: string): QueuedCall => ({ key, cost: 1, id: key, limit: 10, index: -1 });
const tick = (): Promise<void> => new Promise((resolve) => process.nextTick(resolve));

describe('Coalescer', () => {
  it('sends a call made alone at once, in the same turn, with no batch', async () => {
    const { c, sent, answer } = coalescer();
    // The first turn is batched as any (nothing tells yet that calls come one at a time).
    void c.ask(call('first'));
    expect(sent).toEqual([]);
    await tick();
    expect(sent).toEqual([['first']]);
    await answer();
    for (const key of ['a', 'b', 'c']) {
      const one = call(key);
      void c.ask(one);
      expect(sent.at(-1)).toEqual([key]); // before any tick
      expect(one.index).toBe(0);
      await answer();
    }
    expect(sent).toEqual([['first'], ['a'], ['b'], ['c']]);
  });

  it('batches the calls of a turn, once turns carry several, and while a script call is out', async () => {
    const { c, sent, answer } = coalescer();
    void c.ask(call('first'));
    await tick();
    await answer();
    sent.length = 0;
    const calls = ['a', 'b', 'c', 'd'].map(call);
    for (const one of calls) void c.ask(one);
    // The last turn sent one call: the first goes alone (at once; its turn would have sent it alone
    // too), the rest of its turn leaves together on the tick.
    expect(sent).toEqual([['a']]);
    await tick();
    expect(sent).toEqual([['a'], ['b', 'c', 'd']]);
    expect(calls.map((one) => one.index)).toEqual([0, 0, 1, 2]);
    await answer();
    // The last turn sent three: a call made alone now waits for the tick, batched.
    void c.ask(call('e'));
    expect(sent).toHaveLength(2);
    await tick();
    expect(sent.at(-1)).toEqual(['e']);
    await answer();
    // That turn sent one, and nothing is out: alone again, at once.
    void c.ask(call('f'));
    expect(sent.at(-1)).toEqual(['f']);
  });
});
