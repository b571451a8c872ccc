import { describe, expect, it } from 'vitest';
import { PendingCalls } from '../../src/recovery/PendingCalls.js';
import type { PendingCall } from '../../src/recovery/Journal.js';
import type { GeneratedId } from '../../src/base/call.js';

describe('PendingCalls: the journal in columns', () => {
  const all = (calls: PendingCalls): PendingCall[] => Array.from({ length: calls.size }, (_, i) => calls.callAt(i));
  const mixed = (i: number): PendingCall => {
    const c: PendingCall = {
      key: `k${i % 3}`,
      at: 1_000.5 + i,
      cost: 1 + (i % 4),
      id: i % 5 === 0 ? `caller-${i}` : ((i + 1) as GeneratedId),
    };
    if (i % 7 === 0) c.windowMs = 2_000 + i;
    return c;
  };
  const push = (calls: PendingCalls, c: PendingCall): void => calls.push(c.key, c.at, c.cost, c.id, c.windowMs);

  it('keeps every field of every call in order through growth, wrap-around and removals', () => {
    const calls = new PendingCalls(100);
    const model: PendingCall[] = [];
    for (let i = 0; i < 300; i++) {
      push(calls, mixed(i));
      model.push(mixed(i));
      if (model.length === 100) {
        // Drop the oldest 30 (the ring's start moves past the end of its columns as more come), then
        // remove a call in the middle and keep one group only out of a slice of the rest.
        for (let d = 0; d < 30; d++) calls.shift();
        model.splice(0, 30);
        calls.removeAt(17);
        model.splice(17, 1);
      }
      expect(calls.size).toBe(model.length);
    }
    expect(all(calls)).toEqual(model);
    calls.retain((i) => calls.keyAt(i) !== 'k1');
    expect(all(calls)).toEqual(model.filter((c) => c.key !== 'k1'));
  });

  it('puts calls back in front of those held, and empties (capacity released) on takeAll', () => {
    const calls = new PendingCalls(10);
    for (let i = 0; i < 10; i++) push(calls, mixed(i));
    for (let d = 0; d < 6; d++) calls.shift();
    push(calls, mixed(10));
    const back = [mixed(20), mixed(21)];
    calls.unshift(back);
    expect(all(calls)).toEqual([...back, ...[6, 7, 8, 9, 10].map(mixed)]);
    expect(calls.takeAll()).toEqual([...back, ...[6, 7, 8, 9, 10].map(mixed)]);
    expect(calls.size).toBe(0);
    push(calls, mixed(1));
    expect(all(calls)).toEqual([mixed(1)]);
  });
});
