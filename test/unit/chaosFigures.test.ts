/**
 * The chaos harness's arithmetic without a run: `figures()` and `mostAdmitted()` (src/chaos/figures.ts)
 * on hand-built calls and instance accounts, and `verdicts()` (src/chaos/verdicts.ts) on hand-built
 * figures: the window's bounds, same-instant admissions, per-key limits, refusals with room, latency
 * net of stalls, breaker and Redis recovery times, each instance's series, and each mode's promises.
 */
import { describe, expect, it } from 'vitest';
import { type Call, figures, type InstanceRun, mostAdmitted, percentiles, series } from '../../src/chaos/figures.js';
import type { ChaosPhase, ScenarioFigures, Verdict, VerdictName } from '../../src/chaos/types.js';
import { DEADLINE_SLACK_MS, type VerdictInput, verdicts } from '../../src/chaos/verdicts.js';
import type { LimiterStats } from '../../src/limiter/Stats.js';

const WINDOW = 1000;
/** Healthy 0–1 s, the fault 1–3 s, recovery 3–5 s. */
const PHASES: readonly ChaosPhase[] = [
  { name: 'healthy', startMs: 0, endMs: 1000, fault: false },
  { name: 'outage', startMs: 1000, endMs: 3000, fault: true },
  { name: 'recovery', startMs: 3000, endMs: 5000, fault: false },
];

/** A call Redis admitted at `issuedMs` (latency 1 ms, key `k`, limit 5), with `over` changed. */
function call(issuedMs: number, over: Partial<Call> = {}): Call {
  return {
    instance: 0,
    key: 'k',
    issuedMs,
    latencyMs: 1,
    allowed: true,
    source: 'redis',
    reason: 'decided',
    admittedAtMs: issuedMs,
    limit: 5,
    threw: false,
    ...over,
  };
}

function refused(issuedMs: number, over: Partial<Call> = {}): Call {
  return call(issuedMs, { allowed: false, admittedAtMs: undefined, ...over });
}

function run(over: Partial<InstanceRun> = {}): InstanceRun {
  return { stalls: [], states: [], unanswered: 0, unhandledRejections: 0, stats: undefined, ...over };
}

function figuresOf(calls: readonly Call[], runs: readonly InstanceRun[] = [run()]): ScenarioFigures {
  return figures({ calls, runs, phases: PHASES, windowMs: WINDOW });
}

describe('mostAdmitted: the most admitted in any window (t − windowMs, t]', () => {
  it('slides over the admissions: one exactly a window earlier is out, one a ms later is in', () => {
    const times = [0, 500, 999, 1000, 1500];
    expect(
      mostAdmitted(
        times.map((t) => call(t)),
        WINDOW,
      ),
    ).toEqual({ key: 'k', count: 3, limit: 5, ratio: 0.6 });
    // 1 is still inside the window ending at 1000 (0 is not): 1, 500, 999, 1000.
    expect(
      mostAdmitted(
        [...times, 1].map((t) => call(t)),
        WINDOW,
      ).count,
    ).toBe(4);
    // Any order of calls: the admissions are sorted.
    expect(
      mostAdmitted(
        [...times, 1].reverse().map((t) => call(t)),
        WINDOW,
      ).count,
    ).toBe(4);
  });

  it('counts every admission at the same instant, and none of them a window later', () => {
    expect(
      mostAdmitted(
        [0, 0, 0, 1000, 1000].map((t) => call(t)),
        WINDOW,
      ).count,
    ).toBe(3);
    expect(
      mostAdmitted(
        [0, 0, 0, 999, 999].map((t) => call(t)),
        WINDOW,
      ).count,
    ).toBe(5);
    expect(
      mostAdmitted(
        [7, 7, 7, 7, 7, 7].map((t) => call(t)),
        WINDOW,
      ),
    ).toEqual({ key: 'k', count: 6, limit: 5, ratio: 1.2 });
  });

  it("counts admission times (the deciding tier's), not issue times, and refused calls not at all", () => {
    const calls = [
      call(0, { admittedAtMs: 0 }),
      call(10, { admittedAtMs: 1005 }), // issued early, admitted on Redis's clock a window later
      refused(20),
      refused(30),
      call(40, { admittedAtMs: 1010 }),
    ];
    expect(mostAdmitted(calls, WINDOW).count).toBe(2);
  });

  it('names the key with the highest ratio to its own limit (the largest a decision gave)', () => {
    const calls = [
      ...[0, 1, 2, 3, 4, 5, 6, 7].map((t) => call(t, { key: 'wide', limit: 10 })), // 8 of 10
      ...[0, 1, 2].map((t) => call(t, { key: 'narrow', limit: 2 })), // 3 of 2
      refused(3, { key: 'narrow', limit: 2 }),
      refused(4, { key: 'narrow', limit: 0, threw: true, source: 'none', reason: 'none' }), // a throw gives limit 0
    ];
    expect(mostAdmitted(calls, WINDOW)).toEqual({ key: 'narrow', count: 3, limit: 2, ratio: 1.5 });
    // The limit is the largest any decision gave, a refusal's too.
    const raised = [...calls, refused(5, { key: 'narrow', limit: 6 })];
    expect(mostAdmitted(raised, WINDOW)).toEqual({ key: 'wide', count: 8, limit: 10, ratio: 0.8 });
  });

  it('is an empty key for no calls, and ratio 0 for a key never admitted', () => {
    expect(mostAdmitted([], WINDOW)).toEqual({ key: '', count: 0, limit: 0, ratio: 0 });
    expect(mostAdmitted([refused(0), refused(1)], WINDOW)).toEqual({ key: 'k', count: 0, limit: 5, ratio: 0 });
  });
});

describe('figures', () => {
  it('counts decisions, admissions, sources and reasons; a throw is no decision', () => {
    const f = figuresOf([
      call(0),
      call(1, { source: 'local', reason: 'breaker-open' }),
      refused(2, { source: 'local', reason: 'breaker-open' }),
      refused(3, { threw: true, source: 'none', reason: 'none', limit: 0 }),
    ]);
    expect(f.decisions).toBe(3);
    expect(f.admitted).toBe(2);
    expect(f.bySource).toEqual({ redis: 1, local: 2 });
    expect(f.byReason).toEqual({ decided: 1, 'breaker-open': 2 });
    expect(f.lost).toEqual({ exceptions: 1, unhandledRejections: 0, unanswered: 0 });
  });

  it('sums the lost: exceptions, and each instance’s unhandled rejections and unanswered calls', () => {
    const f = figuresOf([call(0)], [run({ unanswered: 2, unhandledRejections: 1 }), run({ unanswered: 3 })]);
    expect(f.lost).toEqual({ exceptions: 0, unhandledRejections: 1, unanswered: 5 });
  });

  it('mostAdmittedByRedis counts only what Redis admitted', () => {
    const calls = [...[0, 1, 2, 3].map((t) => call(t)), ...[4, 5, 6].map((t) => call(t, { source: 'local', reason: 'breaker-open' }))];
    const f = figuresOf(calls);
    expect(f.mostAdmitted).toMatchObject({ count: 7, ratio: 1.4 });
    expect(f.mostAdmittedByRedis).toMatchObject({ key: 'k', count: 4, limit: 5, ratio: 0.8 });
  });

  it('refusedWithRoom: refusals while the window, all instances together, was below the limit', () => {
    const calls = [
      call(0, { instance: 1 }),
      call(10, { instance: 0 }),
      refused(20, { instance: 0 }), // 2 of 5 admitted: room
      call(30, { instance: 1 }),
      call(40, { instance: 1 }),
      call(50, { instance: 0 }),
      refused(60, { instance: 0 }), // 5 of 5: full
      refused(70, { instance: 1 }), // full
      refused(1001, { threw: true, source: 'none', reason: 'none', limit: 0 }), // room, but a throw is no refusal
      refused(1000, { instance: 0 }), // 0 left the window: 4 of 5, room
      refused(1000, { key: 'other', limit: 1 }), // a key never admitted: room
    ];
    expect(figuresOf(calls, [run(), run()]).refusedWithRoom).toBe(3);
  });

  it('latency: the fault’s percentiles, and the slowest net of its own instance’s event-loop stalls', () => {
    const calls = [
      call(500, { latencyMs: 400 }), // before the fault: net max only
      call(1100, { latencyMs: 80 }), // stalled 50 ms within: 30 net
      call(1200, { latencyMs: 60, instance: 1 }), // instance 1 did not stall: 60 net
      call(2000, { latencyMs: 20 }),
    ];
    const runs = [
      run({
        stalls: [
          { atMs: 1120, gapMs: 50 },
          { atMs: 400, gapMs: 150 }, // overlaps 500–550 of the first call: 350 net
        ],
      }),
      run(),
    ];
    const f = figuresOf(calls, runs);
    expect(f.faultLatency).toEqual({ p50: 60, p95: 80, p99: 80, max: 80 });
    // The same calls net of their instance's stalls: 30 (80 less 50), 60, 20.
    expect(f.faultLatencyNetOfStalls).toEqual({ p50: 30, p95: 60, p99: 60, max: 60 });
    expect(f.latencyNetOfStallsMax).toBe(350);
    // Without the stall before the fault, the slowest is that call, whole.
    expect(figuresOf(calls, [run({ stalls: [{ atMs: 1120, gapMs: 50 }] }), run()]).latencyNetOfStallsMax).toBe(400);
    // A stall that covers a call entirely leaves it nothing; one after its answer takes nothing.
    const covered = figuresOf([call(1100, { latencyMs: 80 })], [run({ stalls: [{ atMs: 1000, gapMs: 500 }] })]);
    expect(covered.latencyNetOfStallsMax).toBe(0);
    const after = figuresOf([call(1100, { latencyMs: 80 })], [run({ stalls: [{ atMs: 1180, gapMs: 500 }] })]);
    expect(after.latencyNetOfStallsMax).toBe(80);
    // Another instance's stall takes nothing: each process stalls its own calls only.
    const elsewhere = figuresOf([call(1100, { latencyMs: 80, instance: 1 })], [run({ stalls: [{ atMs: 1120, gapMs: 50 }] }), run()]);
    expect(elsewhere.latencyNetOfStallsMax).toBe(80);
  });

  it('percentiles: nearest rank over the sorted values; zeros for none', () => {
    expect(percentiles([])).toEqual({ p50: 0, p95: 0, p99: 0, max: 0 });
    expect(percentiles([5, 1, 3])).toEqual({ p50: 3, p95: 5, p99: 5, max: 5 });
    const hundred = Array.from({ length: 100 }, (_, i) => 100 - i); // 100 … 1
    expect(percentiles(hundred)).toEqual({ p50: 51, p95: 96, p99: 100, max: 100 });
  });

  describe('breaker and Redis recovery, from the instances’ state transitions and calls', () => {
    const runs = [
      run({
        states: [
          { atMs: 500, state: 'open' }, // before the fault: not its opening
          { atMs: 600, state: 'closed' },
          { atMs: 1200, state: 'open' },
          { atMs: 3100, state: 'half-open' },
          { atMs: 3300, state: 'closed' },
        ],
      }),
      run({
        states: [
          { atMs: 1150, state: 'open' },
          { atMs: 3500, state: 'closed' },
        ],
      }),
    ];
    const calls = [
      call(2000, { source: 'local', reason: 'breaker-open' }),
      call(3010, { source: 'local', reason: 'breaker-open' }), // local: not Redis back
      call(3050, { latencyMs: 2 }),
      call(3060, { latencyMs: 1 }),
      call(3200, { source: 'local', reason: 'breaker-open', instance: 1 }),
      call(3400, { latencyMs: 5, instance: 1 }),
    ];

    it('timeToOpen: from the fault’s start to the first opening in it; timeToClose: until the last instance closed', () => {
      const f = figuresOf(calls, runs);
      expect(f.timeToOpenMs).toBe(150);
      expect(f.timeToCloseMs).toBe(500);
    });

    it('redisBackMs: until the slowest instance’s first answer from Redis after the fault', () => {
      expect(figuresOf(calls, runs).redisBackMs).toBe(405);
    });

    it('undefined when never: no opening in the fault, a breaker still open at the end, an instance Redis never answered', () => {
      const never = figuresOf(calls, [
        run({
          states: [
            { atMs: 500, state: 'open' },
            { atMs: 600, state: 'closed' },
          ],
        }),
        run(),
      ]);
      expect(never.timeToOpenMs).toBeUndefined();
      const stillOpen = figuresOf(calls, [runs[0]!, run({ states: [{ atMs: 1150, state: 'open' }] })]);
      expect(stillOpen.timeToCloseMs).toBeUndefined();
      const halfOpen = figuresOf(calls, [runs[0]!, run({ states: [{ atMs: 3600, state: 'half-open' }] })]);
      expect(halfOpen.timeToCloseMs).toBeUndefined();
      const third = figuresOf(calls, [...runs, run()]); // instance 2 made no call Redis answered after the fault
      expect(third.redisBackMs).toBeUndefined();
      const oneInstance = figuresOf(
        calls.filter((c) => c.instance === 0),
        [runs[0]!],
      );
      expect(oneInstance.redisBackMs).toBe(52);
    });
  });

  it('write-back: calls admitted locally, and the instances’ reconcile counters summed', () => {
    const stats = (reconcile: LimiterStats['reconcile']): LimiterStats => ({ reconcile }) as Partial<LimiterStats> as LimiterStats;
    const calls = [
      call(1100, { source: 'local', reason: 'breaker-open' }),
      call(1200, { source: 'local', reason: 'breaker-open', instance: 1 }),
      refused(1300, { source: 'local', reason: 'breaker-open' }),
      call(1400),
    ];
    const f = figuresOf(calls, [
      run({ stats: stats({ written: 3, present: 1, expired: 1, dropped: 0, pending: 2 }) }),
      run({ stats: stats({ written: 4, present: 0, expired: 0, dropped: 1, pending: 0 }) }),
      run(), // killed: no stats
    ]);
    expect(f.writeBack).toEqual({ answeredLocally: 2, written: 7, present: 1, expired: 1, dropped: 1, pending: 2 });
  });
});

describe('series', () => {
  it('byInstance: each instance’s calls answered and admitted per step, by when issued; a throw is neither', () => {
    const calls = [
      call(50),
      refused(150, { source: 'local', reason: 'lease-ended', instance: 1 }),
      call(199, { instance: 1 }),
      refused(250, { source: 'none', reason: 'none', threw: true }),
      call(999, { instance: 1 }), // past the end: counted in the last step
    ];
    const s = series({ calls, runs: [run(), run(), run()], durationMs: 300, windowMs: WINDOW, busiest: 'k', stepMs: 100 });
    expect(s.byInstance).toEqual([
      { decisions: [1, 0, 0], admitted: [1, 0, 0] },
      { decisions: [0, 2, 1], admitted: [0, 1, 1] },
      { decisions: [0, 0, 0], admitted: [0, 0, 0] },
    ]);
  });
});

/** Figures of a scenario that held everything, with `over` changed. */
function held(over: Partial<ScenarioFigures> = {}): ScenarioFigures {
  return {
    decisions: 1000,
    admitted: 400,
    mostAdmitted: { key: 'k', count: 20, limit: 20, ratio: 1 },
    mostAdmittedByRedis: { key: 'k', count: 20, limit: 20, ratio: 1 },
    faultLatency: { p50: 0.5, p95: 2, p99: 4, max: 30 },
    faultLatencyNetOfStalls: { p50: 0.5, p95: 2, p99: 3, max: 20 },
    latencyNetOfStallsMax: 30,
    lost: { exceptions: 0, unhandledRejections: 0, unanswered: 0 },
    timeToOpenMs: 120,
    timeToCloseMs: 700,
    redisBackMs: 650,
    refusedWithRoom: 0,
    writeBack: { answeredLocally: 0, written: 0, present: 0, expired: 0, dropped: 0, pending: 0 },
    bySource: { redis: 1000 },
    byReason: { decided: 1000 },
    ...over,
  };
}

function most(count: number, limit: number): ScenarioFigures['mostAdmitted'] {
  return { key: 'k', count, limit, ratio: count / limit };
}

function verdictsOf(over: Partial<VerdictInput>): Record<VerdictName, Verdict> {
  const list = verdicts({ figures: held(), mode: 'local', timeoutMs: 50, latencyBudgetMs: 100, require: [], recovers: true, ...over });
  return Object.fromEntries(list.map((v) => [v.name, v])) as Record<VerdictName, Verdict>;
}

describe('verdicts', () => {
  it('gives every verdict in order; all hold for figures that did, with no detail', () => {
    const list = verdicts({ figures: held(), mode: 'local', timeoutMs: 50, latencyBudgetMs: 100, require: [], recovers: true });
    expect(list.map((v) => v.name)).toEqual(['bound', 'redis-bound', 'deadline', 'latency', 'lost', 'recovery', 'write-back']);
    for (const v of list) {
      expect(v.pass, v.name).toBe(v.name === 'write-back' ? undefined : true); // nothing was journalled
      expect(v).not.toHaveProperty('detail');
    }
  });

  describe('bound, per mode', () => {
    it('local: at most 1.1× the limit', () => {
      expect(verdictsOf({ mode: 'local', figures: held({ mostAdmitted: most(22, 20) }) }).bound).toEqual({
        name: 'bound',
        pass: true,
        figure: '1.10× (22 of 20, key k)',
        bound: "≤ 1.1× in 'local'",
      });
      expect(verdictsOf({ mode: 'local', figures: held({ mostAdmitted: most(23, 20) }) }).bound).toEqual({
        name: 'bound',
        pass: false,
        figure: '1.15× (23 of 20, key k)',
        bound: "≤ 1.1× in 'local'",
        detail: '1 calls over 1.1× the limit',
      });
      // 1.1 × 30 = 33 in floating point is 33.000000000000004: 33 holds.
      expect(verdictsOf({ mode: 'local', figures: held({ mostAdmitted: most(33, 30) }) }).bound.pass).toBe(true);
    });

    it('fail-closed: at most the limit', () => {
      expect(verdictsOf({ mode: 'fail-closed', figures: held({ mostAdmitted: most(20, 20) }) }).bound.pass).toBe(true);
      const over = verdictsOf({ mode: 'fail-closed', figures: held({ mostAdmitted: most(21, 20) }) }).bound;
      expect(over).toMatchObject({ pass: false, bound: "≤ 1× in 'fail-closed'", detail: '1 calls over 1× the limit' });
    });

    it('fail-open: reported, no promise; checked at 1.1× once required', () => {
      const reported = verdictsOf({ mode: 'fail-open', figures: held({ mostAdmitted: most(40, 20) }) });
      expect(reported.bound).toEqual({
        name: 'bound',
        pass: undefined,
        figure: '2.00× (40 of 20, key k)',
        bound: "none in 'fail-open' (reported)",
      });
      const required = verdictsOf({ mode: 'fail-open', require: ['bound'], figures: held({ mostAdmitted: most(40, 20) }) });
      expect(required.bound).toMatchObject({ pass: false, bound: "≤ 1.1× in 'fail-open'", detail: '18 calls over 1.1× the limit' });
      const within = verdictsOf({ mode: 'fail-open', require: ['bound'], figures: held({ mostAdmitted: most(22, 20) }) });
      expect(within.bound.pass).toBe(true);
    });
  });

  it("redis-bound: Redis's own decisions at most the limit; reported only in fail-open unless required", () => {
    const figures = held({ mostAdmittedByRedis: most(21, 20) });
    for (const mode of ['local', 'fail-closed'] as const) {
      expect(verdictsOf({ mode, figures })['redis-bound']).toEqual({
        name: 'redis-bound',
        pass: false,
        figure: '1.05× (21 of 20)',
        bound: "≤ 1× for Redis's own decisions",
        detail: '1 over the limit',
      });
    }
    expect(verdictsOf({ mode: 'fail-open', figures })['redis-bound'].pass).toBeUndefined();
    expect(verdictsOf({ mode: 'fail-open', figures, require: ['redis-bound'] })['redis-bound'].pass).toBe(false);
  });

  it(`deadline: the slowest net of stalls within the breaker's deadline + ${DEADLINE_SLACK_MS} ms of slack`, () => {
    expect(DEADLINE_SLACK_MS).toBe(40);
    const at = (net: number): Verdict =>
      verdictsOf({ timeoutMs: 50, latencyBudgetMs: 1000, figures: held({ latencyNetOfStallsMax: net }) }).deadline;
    expect(at(90)).toEqual({ name: 'deadline', pass: true, figure: 'max 90 ms net of stalls', bound: '≤ deadline 50 ms + 40 ms' });
    expect(at(90.5)).toEqual({
      name: 'deadline',
      pass: false,
      figure: 'max 91 ms net of stalls',
      bound: '≤ deadline 50 ms + 40 ms',
      detail: '0.50 ms late',
    });
    expect(at(150).detail).toBe('60 ms late');
  });

  it('latency: the slowest net of stalls within the budget, saying by how much it is over', () => {
    const at = (net: number, timeoutMs = 50): Verdict =>
      verdictsOf({ timeoutMs, latencyBudgetMs: 100, figures: held({ latencyNetOfStallsMax: net }) }).latency;
    expect(at(100)).toMatchObject({
      pass: true,
      figure: 'p50 0.50 ms, p99 3.00 ms, max 100 ms (net of stalls)',
      bound: 'max ≤ budget 100 ms',
    });
    expect(at(2130, 2000)).toEqual({
      name: 'latency',
      pass: false,
      figure: 'p50 0.50 ms, p99 3.00 ms, max 2130 ms (net of stalls)',
      bound: 'max ≤ budget 100 ms',
      detail: '2030 ms over the budget (breaker deadline 2000 ms)',
    });
    expect(at(103.25).detail).toBe('3.25 ms over the budget (breaker deadline 50 ms)');
  });

  it('lost: none thrown, unhandled or unanswered', () => {
    const lost = verdictsOf({ figures: held({ lost: { exceptions: 1, unhandledRejections: 2, unanswered: 3 } }) }).lost;
    expect(lost).toEqual({
      name: 'lost',
      pass: false,
      figure: '1 thrown, 2 unhandled, 3 unanswered',
      bound: 'none',
      detail: '6 decisions lost',
    });
    // Each alone fails it: a call never answered is lost as surely as one that threw.
    for (const one of [{ unhandledRejections: 1 }, { unanswered: 1 }]) {
      const only = verdictsOf({ figures: held({ lost: { exceptions: 0, unhandledRejections: 0, unanswered: 0, ...one } }) }).lost;
      expect(only).toMatchObject({ pass: false, detail: '1 decisions lost' });
    }
  });

  it('recovery: Redis decides again before the end, when the fault ends within the scenario', () => {
    expect(verdictsOf({}).recovery).toMatchObject({ pass: true, figure: 'Redis decided 650 ms after the fault' });
    const never = verdictsOf({ figures: held({ redisBackMs: undefined }) }).recovery;
    expect(never).toMatchObject({ pass: false, figure: 'Redis never decided again', detail: 'every instance must reach Redis again' });
    expect(verdictsOf({ recovers: false, figures: held({ redisBackMs: undefined }) }).recovery.pass).toBeUndefined();
  });

  it("write-back: in 'local', what was answered locally is neither dropped nor pending at the end", () => {
    const journal = { answeredLocally: 120, written: 100, present: 18, expired: 2, dropped: 0, pending: 0 };
    expect(verdictsOf({ figures: held({ writeBack: journal }) })['write-back']).toEqual({
      name: 'write-back',
      pass: true,
      figure: '120 answered locally; 100 written, 18 present, 2 expired, 0 dropped, 0 pending',
      bound: 'none dropped or pending at the end',
    });
    const left = verdictsOf({ figures: held({ writeBack: { ...journal, dropped: 1, pending: 3 } }) })['write-back'];
    expect(left).toMatchObject({ pass: false, detail: '1 dropped, 3 pending' });
    expect(verdictsOf({ figures: held({ writeBack: { ...journal, pending: 1 } }) })['write-back'].pass).toBe(false);
    // Written by the instances though none answered here: still checked.
    const written = { ...journal, answeredLocally: 0, dropped: 2 };
    expect(verdictsOf({ figures: held({ writeBack: written }) })['write-back'].pass).toBe(false);
    // Other modes journal nothing: no promise.
    for (const mode of ['fail-closed', 'fail-open'] as const) {
      expect(verdictsOf({ mode, figures: held({ writeBack: { ...journal, dropped: 5 } }) })['write-back'].pass).toBeUndefined();
    }
  });
});
