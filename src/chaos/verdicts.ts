/** The promises the docs make for a limiter's mode, checked against a scenario's figures. */
import type { Mode } from '../options/options.js';
import type { ScenarioFigures, Verdict, VerdictName } from './types.js';

/**
 * Slack on the deadline: the breaker's timer fires on a busy event loop, and a loaded machine of 2
 * cores delays it by tens of ms (measured in the internal suite: up to ~35 ms beyond its stalls).
 */
export const DEADLINE_SLACK_MS = 40;

/** The bound of admitted calls in any window, per mode (docs: "What the limit promises"). */
const BOUND: Readonly<Record<Mode, number | undefined>> = { local: 1.1, 'fail-closed': 1, 'fail-open': undefined };

export type VerdictInput = {
  readonly figures: ScenarioFigures;
  readonly mode: Mode;
  readonly timeoutMs: number;
  readonly latencyBudgetMs: number;
  readonly require: readonly VerdictName[];
  /** The fault ends within the scenario: Redis must decide again before its end. */
  readonly recovers: boolean;
};

const ms = (v: number): string => `${v < 10 ? v.toFixed(2) : v.toFixed(0)} ms`;
const ratio = (r: number): string => `${r.toFixed(2)}×`;

/** Every verdict of one scenario; `pass` is undefined where the mode makes no promise and none was required. */
export function verdicts(input: VerdictInput): Verdict[] {
  const { figures: f, mode, timeoutMs, latencyBudgetMs, require } = input;
  const promised = BOUND[mode] ?? (require.includes('bound') ? 1.1 : undefined);
  const most = f.mostAdmitted;
  const redis = f.mostAdmittedByRedis;
  const lost = f.lost.exceptions + f.lost.unhandledRejections + f.lost.unanswered;
  const journalled = f.writeBack.answeredLocally > 0 || f.writeBack.written + f.writeBack.present > 0;
  const out: Verdict[] = [
    check('bound', promised === undefined ? undefined : most.ratio <= promised + 1e-9, {
      figure: `${ratio(most.ratio)} (${most.count} of ${most.limit}, key ${most.key})`,
      bound: promised === undefined ? `none in '${mode}' (reported)` : `≤ ${promised}× in '${mode}'`,
      miss: promised === undefined ? '' : `${most.count - Math.floor(promised * most.limit + 1e-9)} calls over ${promised}× the limit`,
    }),
    check('redis-bound', mode === 'fail-open' && !require.includes('redis-bound') ? undefined : redis.ratio <= 1 + 1e-9, {
      figure: `${ratio(redis.ratio)} (${redis.count} of ${redis.limit})`,
      bound: "≤ 1× for Redis's own decisions",
      miss: `${redis.count - redis.limit} over the limit`,
    }),
    check('deadline', f.latencyNetOfStallsMax <= timeoutMs + DEADLINE_SLACK_MS, {
      figure: `max ${ms(f.latencyNetOfStallsMax)} net of stalls`,
      bound: `≤ deadline ${timeoutMs} ms + ${DEADLINE_SLACK_MS} ms`,
      miss: `${ms(f.latencyNetOfStallsMax - timeoutMs - DEADLINE_SLACK_MS)} late`,
    }),
    check('latency', f.latencyNetOfStallsMax <= latencyBudgetMs, {
      figure: `p50 ${ms(f.faultLatencyNetOfStalls.p50)}, p99 ${ms(f.faultLatencyNetOfStalls.p99)}, max ${ms(f.latencyNetOfStallsMax)} (net of stalls)`,
      bound: `max ≤ budget ${latencyBudgetMs} ms`,
      miss: `${ms(f.latencyNetOfStallsMax - latencyBudgetMs)} over the budget (breaker deadline ${timeoutMs} ms)`,
    }),
    check('lost', lost === 0, {
      figure: `${f.lost.exceptions} thrown, ${f.lost.unhandledRejections} unhandled, ${f.lost.unanswered} unanswered`,
      bound: 'none',
      miss: `${lost} decisions lost`,
    }),
    check('recovery', input.recovers ? f.redisBackMs !== undefined : undefined, {
      figure: f.redisBackMs === undefined ? 'Redis never decided again' : `Redis decided ${ms(f.redisBackMs)} after the fault`,
      bound: 'Redis decides again before the end',
      miss: 'every instance must reach Redis again',
    }),
    check('write-back', journalled && mode === 'local' ? f.writeBack.dropped === 0 && f.writeBack.pending === 0 : undefined, {
      figure: `${f.writeBack.answeredLocally} answered locally; ${f.writeBack.written} written, ${f.writeBack.present} present, ${f.writeBack.expired} expired, ${f.writeBack.dropped} dropped, ${f.writeBack.pending} pending`,
      bound: 'none dropped or pending at the end',
      miss: `${f.writeBack.dropped} dropped, ${f.writeBack.pending} pending`,
    }),
  ];
  return out;
}

function check(name: VerdictName, pass: boolean | undefined, text: { figure: string; bound: string; miss: string }): Verdict {
  return pass === false
    ? { name, pass, figure: text.figure, bound: text.bound, detail: text.miss }
    : { name, pass, figure: text.figure, bound: text.bound };
}
