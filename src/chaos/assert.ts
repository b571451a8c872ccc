/**
 * `assertChaos`: a chaos run as a test's assertion, in any test runner (or none): it throws with the
 * table of verdicts when a promise broke or the run was cut short.
 */
import { verdictTable } from './report/table.js';
import type { ChaosReport } from './types.js';

/** Thrown by {@link assertChaos}: its message is the table of verdicts, its `report` the whole report. */
export class ChaosAssertionError extends Error {
  override readonly name = 'ChaosAssertionError';
  /** The report that failed, for a test to read or write out. */
  readonly report: ChaosReport;

  constructor(report: ChaosReport) {
    super(verdictTable(report));
    this.report = report;
  }
}

/**
 * Asserts that every promise of a chaos run held and that the run went to its end.
 * @throws {@link ChaosAssertionError} when `report.passed` is false or `report.interrupted` is true;
 *   its message is {@link verdictTable}'s table (the summary line says which), its `report` the report.
 * @example
 * import { runChaos } from 'resilimit/chaos';
 * import { assertChaos } from 'resilimit/chaos';
 * it('keeps its promises under faults', async () => {
 *   assertChaos(await runChaos({ config: './limiter.config.mjs' }));
 * }, 600_000);
 */
export function assertChaos(report: ChaosReport): void {
  if (!report.passed || report.interrupted) throw new ChaosAssertionError(report);
}
