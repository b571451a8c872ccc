/**
 * What the report's three renderings (the terminal table, Markdown, HTML) say alike: the verdicts'
 * order, the marks, durations and counts as text, and each scenario's figures as labelled rows.
 * Pure functions of a {@link ChaosReport}; no escaping here (each rendering escapes for its format).
 */
import type { ChaosReport, ScenarioFigures, ScenarioOutcome, Verdict, VerdictName } from '../types.js';
import { slotFacts } from './slotFormat.js';

/** Every verdict a rate limit's scenario can give, in the order the tables show them. */
export const VERDICT_NAMES: readonly VerdictName[] = ['bound', 'redis-bound', 'deadline', 'latency', 'lost', 'recovery', 'write-back'];

/** Every verdict a concurrency limit's scenario can give (the others are not applicable to it), in the tables' order. */
export const SLOT_VERDICT_NAMES: readonly VerdictName[] = ['slot-bound', 'errors', 'slot-lost', 'recovery'];

/** The verdicts the tables show for the report's kind of limit. */
export function verdictNamesOf(report: ChaosReport): readonly VerdictName[] {
  return report.limiter?.slots === undefined ? VERDICT_NAMES : SLOT_VERDICT_NAMES;
}

/** The verdicts marked not applicable to the report's kind of limit, each with why (from its first scenario that ran). */
export function notApplicable(report: ChaosReport): readonly (readonly [VerdictName, string])[] {
  const ran = report.scenarios.find((s) => s.skipped === undefined);
  return (ran?.verdicts ?? []).filter((v) => v.applicable === false).map((v) => [v.name, v.bound] as const);
}

/** What a cell shows for a verdict not checked. */
export const NOT_CHECKED = '—';

/** The mark of a verdict: `✓` held, `✗` failed, `·` reported without a promise. */
export function markOf(verdict: Verdict): '✓' | '✗' | '·' {
  if (verdict.pass === true) return '✓';
  return verdict.pass === false ? '✗' : '·';
}

/** The verdict named `name` of a scenario, or undefined when the scenario did not check it. */
export function verdictOf(outcome: ScenarioOutcome, name: VerdictName): Verdict | undefined {
  return outcome.verdicts.find((v) => v.name === name);
}

/** A failed verdict and the scenario that gave it. */
export type Failure = { readonly scenario: ScenarioOutcome; readonly verdict: Verdict };

/** Every failed verdict of the report, scenario by scenario, in the verdicts' order. */
export function failuresOf(report: ChaosReport): Failure[] {
  const names = verdictNamesOf(report);
  return report.scenarios.flatMap((scenario) =>
    names.flatMap((name) => {
      const verdict = verdictOf(scenario, name);
      return verdict?.pass === false ? [{ scenario, verdict }] : [];
    }),
  );
}

/** One failure as a sentence: `<figure> against <bound>; <detail>`. */
export function failureText(verdict: Verdict): string {
  return `${verdict.figure} against ${verdict.bound}${verdict.detail === undefined || verdict.detail === '' ? '' : `; ${verdict.detail}`}`;
}

/** `held` or `broken`: broken when any scenario that ran broke a promise. */
export function verdictWord(report: ChaosReport): 'held' | 'broken' {
  return report.passed ? 'held' : 'broken';
}

/**
 * One line summing up the run, e.g. `held: 4 scenarios ran, 1 skipped` or
 * `broken: 2 verdicts failed in 1 of 4 scenarios; interrupted`.
 */
export function summaryLine(report: ChaosReport): string {
  const ran = report.scenarios.filter((s) => s.skipped === undefined);
  const skipped = report.scenarios.length - ran.length;
  const failures = failuresOf(report);
  const failedScenarios = new Set(failures.map((f) => f.scenario.name)).size;
  const parts = [
    report.passed
      ? `held: ${plural(ran.length, 'scenario')} ran`
      : `broken: ${plural(failures.length, 'verdict')} failed in ${failedScenarios} of ${plural(ran.length, 'scenario')}`,
  ];
  if (skipped > 0) parts.push(`${skipped} skipped`);
  const text = parts.join(', ');
  return report.interrupted ? `${text}; interrupted, the report holds what was measured until then` : text;
}

/** `1 scenario`, `3 scenarios`. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** A whole count with thousands grouped: `12,345`. */
export function count(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  const [whole = '', fraction] = String(n).split('.');
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return fraction === undefined ? grouped : `${grouped}.${fraction}`;
}

/** A duration: `0.42 ms`, `12.3 ms`, `850 ms`, `4.2 s`, `3 min 5 s`; `never` when undefined. */
export function duration(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return 'never';
  const abs = Math.abs(ms);
  if (abs < 1) return `${Number(ms.toPrecision(2))} ms`;
  if (abs < 100) return `${Number(ms.toFixed(1))} ms`;
  if (abs < 10_000) return abs < 1000 ? `${Math.round(ms)} ms` : `${Number((ms / 1000).toFixed(2))} s`;
  if (abs < 120_000) return `${Number((ms / 1000).toFixed(1))} s`;
  const seconds = Math.round(ms / 1000);
  return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

/** A ratio to a limit: `1.05×`. */
export function ratio(r: number): string {
  return `${Number.isFinite(r) ? r.toFixed(2) : String(r)}×`;
}

/** The run's facts as labelled values, in the order the reports list them. */
export function runFacts(report: ChaosReport): readonly (readonly [string, string])[] {
  const l = report.limiter;
  const lease = l.leaseMs === undefined ? '' : `, lease ${duration(l.leaseMs)}`;
  const load = report.machine.loadavg.map((v) => v.toFixed(2)).join(' / ');
  return [
    ['config', report.config],
    ['instances', String(report.instances)],
    ...(l.slots === undefined
      ? ([
          [
            'limiter',
            `limit ${count(l.limit)} per ${duration(l.windowMs)}, mode ${l.mode}, deadline ${duration(l.timeoutMs)}${lease}, ` +
              `local limit ${count(l.localLimit)}, set for ${plural(l.instances, 'instance')}`,
          ],
        ] as const)
      : slotFacts(l, l.slots, lease)),
    ['keys', report.keys.join(', ')],
    ['latency budget', duration(report.latencyBudgetMs)],
    ['required', report.require.length === 0 ? 'what the mode promises' : report.require.join(', ')],
    ['backend', `${report.backend.kind}: ${report.backend.detail}`],
    ['machine', `Node ${report.machine.node}, ${plural(report.machine.cpus, 'CPU')}, load ${load}`],
    ['seed', String(report.seed)],
    ['started', report.startedAt],
    ['duration', duration(report.durationMs)],
    ['interrupted', report.interrupted ? 'yes' : 'no'],
    ['tool', `${report.tool} ${report.version}`],
  ];
}

/** What a scenario ran: its length, instances, offered rate and phases. */
export function scenarioFacts(outcome: ScenarioOutcome): string {
  const phases = outcome.phases.map((p) => `${p.name}${p.fault ? ' (fault)' : ''} ${duration(p.startMs)}–${duration(p.endMs)}`);
  const offered = outcome.slots === undefined ? `, ${count(outcome.rate)} calls/s offered` : '';
  return (
    `${duration(outcome.durationMs)}, ${plural(outcome.instances, 'instance')}${offered}` +
    (phases.length === 0 ? '' : `; phases: ${phases.join(', ')}`)
  );
}

/** A scenario's figures as labelled values, in the order the reports list them. */
export function figureRows(figures: ScenarioFigures): readonly (readonly [string, string])[] {
  const f = figures;
  const w = f.writeBack;
  return [
    ['decisions', `${count(f.decisions)}, ${count(f.admitted)} admitted`],
    ['most admitted in a window', admittedText(f.mostAdmitted)],
    ['Redis alone', admittedText(f.mostAdmittedByRedis)],
    ['fault latency', `p50 ${duration(f.faultLatency.p50)}, p99 ${duration(f.faultLatency.p99)}, max ${duration(f.faultLatency.max)}`],
    [
      'fault latency net of stalls',
      `p50 ${duration(f.faultLatencyNetOfStalls.p50)}, p99 ${duration(f.faultLatencyNetOfStalls.p99)}, max ${duration(f.faultLatencyNetOfStalls.max)}`,
    ],
    ['slowest net of stalls', duration(f.latencyNetOfStallsMax)],
    [
      'lost',
      `${count(f.lost.exceptions)} exceptions, ${count(f.lost.unhandledRejections)} unhandled rejections, ${count(f.lost.unanswered)} unanswered`,
    ],
    ['time to open', duration(f.timeToOpenMs)],
    ['time to close', duration(f.timeToCloseMs)],
    ['Redis back', duration(f.redisBackMs)],
    ['refused with room', count(f.refusedWithRoom)],
    [
      'write-back',
      `${count(w.answeredLocally)} answered locally: ${count(w.written)} written, ${count(w.present)} present, ` +
        `${count(w.expired)} expired, ${count(w.dropped)} dropped, ${count(w.pending)} pending`,
    ],
    ['by source', tally(f.bySource)],
    ['by reason', tally(f.byReason)],
    ...(f.afterLease === undefined
      ? []
      : [
          [
            'a second after the lease',
            `${count(f.afterLease.admittedPerSecond)} admitted/s, ${ratio(f.afterLease.ratio)} the last healthy second's ${count(f.afterLease.healthyPerSecond)}`,
          ] as const,
        ]),
  ];
}

function admittedText(m: ScenarioFigures['mostAdmitted']): string {
  return `${count(m.count)} of ${count(m.limit)} (${ratio(m.ratio)}) on ${m.key}`;
}

/** `redis 1,200, local 80`; `none` when empty. */
function tally(counts: Readonly<Partial<Record<string, number>>>): string {
  const entries = Object.entries(counts).filter((e): e is [string, number] => e[1] !== undefined);
  return entries.length === 0 ? 'none' : entries.map(([name, n]) => `${name} ${count(n)}`).join(', ');
}
