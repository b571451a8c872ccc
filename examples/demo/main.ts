/**
 * `npm run demo` (or `node examples/demo/main.ts` after `npm run build`): a live failover demo.
 * Several simulated service instances share one rate limit through Redis while Toxiproxy makes
 * Redis slow, then cuts it off, then brings it back; the terminal shows each second what was
 * admitted against the limit, who decided, and each instance's breaker. Writes demo.svg and
 * demo.json at the end. `--help` lists the options.
 *
 * Exit status: 0 done, 1 could not run (no Redis, a server unreachable, …), 2 bad option,
 * 130 interrupted (Ctrl-C or SIGTERM; a second one exits at once). Nothing is left running.
 */
import { relative, sep } from 'node:path';
import { backendLine, startDemoBackend } from './backend.ts';
import { DEMO_BREAKER, DEMO_KEY, WINDOW_MS } from './fleet.ts';
import { loadLibrary, staleBuildWarning } from '../../chaos/library.ts';
import { helpText, parseCommand, UsageError, type DemoOptions } from './options.ts';
import { createView } from './render.ts';
import { defaultReportDir, writeDemoReport, type ReportPaths } from './report.ts';
import { runDemo, type RunOutcome } from './run.ts';
import { planPhases, SLOW_LATENCY_MS, type DemoPhase } from './script.ts';
import { summarize, type DemoSummary } from './summary.ts';
import type { DemoReport } from './types.ts';
import type { ChaosBackend } from '../../chaos/types.ts';
import { formatMs, machine } from '../../chaos/format.ts';

const EXIT = { done: 0, failed: 1, usage: 2, interrupted: 130 } as const;

async function main(): Promise<number> {
  let command: ReturnType<typeof parseCommand>;
  try {
    command = parseCommand(process.argv.slice(2), process.env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`demo: ${error.message}\nRun \`npm run demo -- --help\` to see every option.\n`);
    return EXIT.usage;
  }
  if (command.kind === 'help') {
    process.stdout.write(helpText());
    return EXIT.done;
  }
  const { options, notes } = command;
  const phases = planPhases(options.durationS);
  const view = createView(process.stdout, { ...options, phases }, process.env);

  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stop.signal.aborted) process.exit(EXIT.interrupted); // the second one: at once (exit hooks stop the children)
    view.log(`${signal}: stopping (again to quit at once)…`);
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const lib = await loadLibrary();
    for (const note of [...notes, staleBuildWarning()]) if (note !== undefined) view.log(`note: ${note}`);
    view.log(intro(options, phases));
    view.log(options.external === undefined ? 'Starting Redis and Toxiproxy…' : 'Checking your Redis and Toxiproxy…');
    const backend = await startDemoBackend(options.external, process.env);
    let outcome: RunOutcome;
    try {
      view.log(`backend: ${backendLine(backend)}`);
      if (stop.signal.aborted) return EXIT.interrupted;
      outcome = await runDemo(lib, backend, { ...options, phases }, view, stop.signal);
    } finally {
      view.finish();
      await backend.close().catch((error: unknown) => view.log(`note: stopping the ${backend.kind} backend failed: ${message(error)}`));
    }
    const report = buildReport(options, phases, backend, outcome);
    const paths = await writeDemoReport(options.out ?? defaultReportDir(outcome.startedAt), report);
    view.log(conclusion(report, paths));
    return outcome.interrupted ? EXIT.interrupted : EXIT.done;
  } catch (error) {
    view.finish();
    process.stderr.write(`demo: ${message(error)}\n`);
    return EXIT.failed;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

function intro(options: DemoOptions, phases: readonly DemoPhase[]): string {
  const { instances, limit, mode } = options;
  const script = phases.map((p) => `${p.label} ${p.startMs / 1000}-${p.endMs / 1000} s`).join(' · ');
  return (
    `resilimit demo: ${instances} service instance${instances === 1 ? '' : 's'}, each with its own ResilientLimiter and ` +
    `Redis client, share one limit of ${limit} calls per second on one key, offered ${limit * 2} calls/s ` +
    `(twice the limit), mode ${mode}: ${fallbackSentence(options)}\n` +
    `Script (${options.durationS} s): ${script}.\n` +
    `Breaker: deadline ${DEMO_BREAKER.timeoutMs} ms; open ${DEMO_BREAKER.resetTimeoutMs / 1000} s, doubling up to ` +
    `${DEMO_BREAKER.maxResetTimeoutMs / 1000} s (defaults 1 s and 30 s: shortened so that recovery shows within the demo).\n` +
    'Each second: calls admitted against the limit; decisions, admitted or refused, made by Redis, by the fallback, and by the deny cache ' +
    "(a rejection Redis made moments before, repeated locally); each instance's breaker (C closed, O open, " +
    'H half-open); p50 and p99 decision latency.'
  );
}

/** What answers while Redis cannot, in the mode of the run. */
function fallbackSentence({ mode, limit, instances }: DemoOptions): string {
  if (mode === 'fail-open') return 'while Redis cannot answer, every call is allowed.';
  if (mode === 'fail-closed') return 'while Redis cannot answer, every call is denied.';
  const share = Math.ceil(limit / instances);
  const total = share * instances;
  return (
    `while Redis cannot answer, each instance's local window admits its share, ceil(${limit} / ${instances}) = ${share} ` +
    `per second${total > limit ? ` (${total} in all: rounding up allows ${total - limit} over)` : ''}.`
  );
}

/** Why the limit was passed, when it was. */
function overLimitSentence(report: DemoReport): string | undefined {
  const { summary, options } = report;
  if (summary.maxAdmittedIn1s <= options.limit) return undefined;
  if (options.mode === 'fail-open') return 'Over the limit: fail-open admits every call while Redis cannot answer.';
  const roundsUp = Math.ceil(options.limit / options.instances) * options.instances > options.limit;
  const seconds = report.seconds.filter((f) => f.admitted > options.limit).map((f) => `${f.second + 1}s ${f.phase}`);
  const where = seconds.length === 0 ? '' : ` (${seconds.slice(0, 4).join(', ')}${seconds.length > 4 ? ', …' : ''})`;
  return (
    `Over the limit${where}: ${roundsUp ? 'the local shares round up, and ' : ''}in mode ${options.mode} the ` +
    `promise is ${options.mode === 'local' ? 'at most 1.1 × the limit in any window' : 'never over the limit'} ` +
    '(README: "Modes: what the limit promises when Redis cannot answer"; chaos/bound.test.ts measures it).'
  );
}

function buildReport(options: DemoOptions, phases: readonly DemoPhase[], backend: ChaosBackend, outcome: RunOutcome): DemoReport {
  const { recorder } = outcome;
  // Whole seconds only: a second cut short by Ctrl-C would read as a drop in the figures.
  const ranSeconds = Math.min(recorder.length, Math.floor(outcome.ranMs / 1000));
  const ranMs = ranSeconds * 1000;
  const summary: DemoSummary = summarize({
    calls: recorder.calls,
    stateChanges: recorder.stateChanges,
    phases,
    instances: options.instances,
    limit: options.limit,
    windowMs: WINDOW_MS,
    ranMs,
    unhandledRejections: outcome.unhandledRejections,
  });
  return {
    tool: 'resilimit demo',
    startedAt: outcome.startedAt,
    interrupted: outcome.interrupted,
    ranMs,
    node: process.version,
    machine: machine(),
    backend: { kind: backend.kind, why: backend.why },
    options: {
      durationS: options.durationS,
      instances: options.instances,
      limit: options.limit,
      windowMs: WINDOW_MS,
      mode: options.mode,
      offeredPerSecond: outcome.rate,
      key: DEMO_KEY,
      breaker: { ...DEMO_BREAKER },
      slowLatencyMs: SLOW_LATENCY_MS,
      external:
        options.external === undefined
          ? undefined
          : { redis: options.external.redisUrl, toxiproxy: options.external.toxiproxyUrl, redisUpstream: options.external.redisUpstream },
    },
    instancesCounted: outcome.counted,
    phases,
    seconds: Array.from({ length: ranSeconds }, (_, second) => recorder.second(second)),
    stateChanges: recorder.stateChanges.map((c) => ({ ...c, atMs: Math.round(c.atMs * 10) / 10 })),
    summary,
  };
}

/** The summary printed at the end: the limit, each phase, the breakers, where the report is. */
function conclusion(report: DemoReport, paths: ReportPaths): string {
  const { summary: s, options } = report;
  const lines = [
    '',
    `${report.interrupted ? 'Interrupted. ' : ''}Most admitted in any 1 s window: ${s.maxAdmittedIn1s} (limit ${options.limit}); ` +
      `calls over the limit: ${s.callsOverLimit}; ${s.decisions} decisions, ${s.exceptions} exceptions.`,
    ...(overLimitSentence(report) === undefined ? [] : [overLimitSentence(report) as string]),
    `                      decisions (admitted or refused) by`,
    `  phase    admitted/s  redis  fallback   deny  p50 ms  p99 ms  max ms`,
    ...s.perPhase.map(
      (p) =>
        `  ${p.name.padEnd(7)} ${p.admittedPerSecond.toFixed(1).padStart(11)} ${String(p.redis).padStart(6)} ${String(p.fallback).padStart(9)} ` +
        `${String(p.denyCache).padStart(6)} ${formatMs(p.latencyMs.p50).padStart(7)} ${formatMs(p.latencyMs.p99).padStart(7)} ` +
        `${formatMs(p.latencyMs.max).padStart(7)}`,
    ),
    `Breaker openings (a failed trial call opens it again): ${s.breakers.map((b) => `#${b.instance} ${b.opened}`).join(', ')}; ` +
      `at the end: ${s.breakers.map((b) => `#${b.instance} ${b.finalState}`).join(', ')}.`,
    s.timeToOpenMs === undefined
      ? 'No breaker opened.'
      : `The first breaker opened ${formatMs(s.timeToOpenMs)} ms after Redis turned slow; ` +
        `${s.timeToCloseMs === undefined ? 'not every one closed again' : `all were closed ${formatMs(s.timeToCloseMs)} ms after Redis came back`}.`,
    `Report: ${shown(paths.svg)}`,
    `        ${shown(paths.json)}`,
  ];
  return lines.join('\n');
}

/** A path relative to the working directory when it is under it, else absolute. */
function shown(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel === '' || rel.startsWith(`..${sep}`) || rel === '..' ? path : rel;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

process.exitCode = await main();
