/**
 * The schedule of `ReadyWatch` on injected timers and clock: when it reports a client never ready,
 * and when it stops. The real limiter, real timers and a real Redis: test/integration/notReady.test.ts.
 */
import { Cluster } from 'ioredis';
import { portOf } from '../../src/client/portOf.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createRedisClient } from '../../src/index.js';
import { NOT_READY_AFTER_MS, NOT_READY_EVERY_MS, ReadyWatch, type NotReady, type Timers } from '../../src/client/ReadyWatch.js';

/** Timers run by hand: `advance(ms)` moves the clock and fires what is due, in order. */
function manualTimers() {
  let now = 0;
  let next = 1;
  const due = new Map<number, { at: number; fn: () => void }>();
  const timers: Timers = {
    set(fn, ms) {
      const id = next++;
      due.set(id, { at: now + ms, fn });
      return id;
    },
    clear(handle) {
      due.delete(handle as number);
    },
  };
  return {
    timers,
    perf: { now: () => now },
    pending: () => due.size,
    advance(ms: number) {
      const until = now + ms;
      for (;;) {
        const first = [...due.entries()].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
        if (first === undefined) break;
        due.delete(first[0]);
        now = first[1].at;
        first[1].fn();
      }
      now = until;
    },
  };
}

/** The RESILIMIT_REDIS_NOT_READY warnings emitted so far (they come on a process.nextTick). */
const warnings: Error[] = [];
const onWarning = (warning: Error): void => {
  if ((warning as { code?: string }).code === 'RESILIMIT_REDIS_NOT_READY') warnings.push(warning);
};
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

beforeEach(() => {
  warnings.length = 0;
  process.on('warning', onWarning);
});

afterEach(() => {
  process.off('warning', onWarning);
});

/** A client to a port nothing should listen on, never connected (`lazyConnect`: status 'wait'). */
const client = () => createRedisClient({ host: '127.0.0.1', port: 1, lazyConnect: true });

describe('ReadyWatch', () => {
  it('reports a client never ready 1 s after it is made, then every 60 s, with how long and its status', async () => {
    const t = manualTimers();
    const tier = { everReady: false };
    const reports: NotReady[] = [];
    const watch = new ReadyWatch(tier, { redis: portOf(client()), prefix: 'p:', perf: t.perf }, (info) => reports.push(info), t.timers);
    expect([NOT_READY_AFTER_MS, NOT_READY_EVERY_MS]).toEqual([1_000, 60_000]);
    t.advance(999);
    expect(reports).toEqual([]);
    expect(watch.notReadyForMs).toBe(999);
    t.advance(1);
    expect(reports).toEqual([{ forMs: 1_000, status: 'wait' }]);
    t.advance(60_000 * 2);
    expect(reports.map((r) => r.forMs)).toEqual([1_000, 61_000, 121_000]);
    await turn();
    expect(warnings.map((w) => [w.name, w.message])).toEqual(
      [1, 61, 121].map((s) => [
        'ResilimitWarning',
        `The Redis client of the limiter with prefix "p:" has not been ready in the ${s} s since the limiter was made ` +
          "(status 'wait', connecting to 127.0.0.1:1). Every call is answered without Redis: by the fallback (reason 'not-ready'). " +
          'Check the Redis address and credentials.',
      ]),
    );
    watch.stop();
    expect(t.pending()).toBe(0);
  });

  it('stops at its next turn once the client has been ready, and then reads 0', async () => {
    const t = manualTimers();
    const tier = { everReady: false };
    const reports: NotReady[] = [];
    const watch = new ReadyWatch(tier, { redis: portOf(client()), prefix: 'p:', perf: t.perf }, (info) => reports.push(info), t.timers);
    t.advance(1_000);
    tier.everReady = true;
    expect(watch.notReadyForMs).toBe(0);
    t.advance(60_000);
    expect(reports).toHaveLength(1);
    expect(t.pending()).toBe(0);
    await turn();
    expect(warnings).toHaveLength(1);
  });

  it('sets no timer for a client ready when the limiter is made', () => {
    const t = manualTimers();
    const watch = new ReadyWatch(
      { everReady: true },
      { redis: portOf(client()), prefix: 'p:', perf: t.perf },
      () => expect.fail('reported'),
      t.timers,
    );
    expect(t.pending()).toBe(0);
    expect(watch.notReadyForMs).toBe(0);
  });

  it('clears its timer on stop(), before the first report and after it', async () => {
    const t = manualTimers();
    const reports: NotReady[] = [];
    const before = new ReadyWatch(
      { everReady: false },
      { redis: portOf(client()), prefix: 'p:', perf: t.perf },
      (info) => reports.push(info),
      t.timers,
    );
    before.stop();
    expect(t.pending()).toBe(0);
    const after = new ReadyWatch(
      { everReady: false },
      { redis: portOf(client()), prefix: 'q:', perf: t.perf },
      (info) => reports.push(info),
      t.timers,
    );
    t.advance(1_000);
    after.stop();
    after.stop();
    expect(t.pending()).toBe(0);
    t.advance(120_000);
    expect(reports).toHaveLength(1);
    await turn();
    expect(warnings).toHaveLength(1);
  });

  it('names the Sentinel group or a Cluster instead of an address, and never the password', async () => {
    const t = manualTimers();
    const sentinel = createRedisClient({
      sentinels: [{ host: '127.0.0.1', port: 1 }],
      name: 'mymaster',
      password: 'secret',
      lazyConnect: true,
    });
    new ReadyWatch({ everReady: false }, { redis: portOf(sentinel), prefix: 's:', perf: t.perf }, () => undefined, t.timers);
    const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true, redisOptions: { password: 'secret' } });
    new ReadyWatch({ everReady: false }, { redis: portOf(cluster), prefix: 'c:', perf: t.perf }, () => undefined, t.timers);
    t.advance(1_000);
    await turn();
    expect(warnings.map((w) => /\(status '\w+', ([^)]*)\)/.exec(w.message)?.[1])).toEqual([
      'master "mymaster" via 1 listed Sentinel',
      'a Cluster client',
    ]);
    expect(warnings.some((w) => w.message.includes('secret'))).toBe(false);
  });
});
