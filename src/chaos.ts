/**
 * `resilimit/chaos`: prove the limit on your own configuration. Runs fault scenarios (Redis frozen,
 * killed, emptied, slow, cut off from one instance, …) against the limiter your config module builds,
 * in several processes, and gives a verdict per promise with the figure measured.
 * @packageDocumentation
 */
export { assertChaos, ChaosAssertionError } from './chaos/assert.js';
export { ChaosUsageError, loadChaosConfig } from './chaos/config.js';
export { runDoctor, type DoctorResult } from './chaos/doctor.js';
export { toHtml, toMarkdown, verdictTable, writeReport } from './chaos/report.js';
export { runChaos } from './chaos/run.js';
export { scenarioNames, type FaultContext, type ServerControl } from './chaos/scenarios.js';
export type { ToxiproxyApi } from './chaos/toxiproxyClient.js';
export type * from './chaos/types.js';
