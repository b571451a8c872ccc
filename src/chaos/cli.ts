/**
 * The `resilimit` command: `resilimit chaos` runs the fault scenarios on a config module and writes a
 * report; `resilimit doctor` checks a deployment's Redis, read-only. Exit codes: 0 every promise held
 * (or every check passed), 1 one broke (named), 2 a usage error.
 */
import { parseArgs } from 'node:util';
import { assertChaos, ChaosAssertionError } from './assert.js';
import { ChaosUsageError } from './config.js';
import { runDoctor } from './doctor.js';
import { verdictTable, writeReport } from './report.js';
import { runChaos } from './run.js';
import { SCENARIOS } from './scenarios.js';
import type { ChaosOptions, VerdictName } from './types.js';

const HELP = `Usage:
  resilimit chaos --config FILE [options]   prove the limit on your configuration under Redis faults
  resilimit doctor --redis URL [--config FILE]   check a deployment's Redis, read-only

chaos options:
  --config FILE          a module exporting createLimiter({ host, port, instance }) (required)
  --scenarios LIST       comma-separated names, or default (9 scenarios, about 90 s), or all
  --instances N          service instances, one process each (default 3)
  --seed N               repeat a run's random draws
  --report DIR           where report.json, report.md and report.html go (default resilimit-chaos/<time>)
  --require LIST         verdicts that must hold although the mode promises nothing (e.g. bound, or slot-bound, with fail-open)
  --latency-budget MS    the latency a decision may add (default 100)
  --redis URL --toxiproxy URL [--upstream HOST:PORT] [--proxy-ports 26379-26390] [--destructive]
                         your own Redis and Toxiproxy instead of a redis-server child and the bundled proxy
                         (--proxy-ports: a Toxiproxy in a container, its published ports);
                         scenarios that destroy data or stop the server run only with --destructive
  --list                 print the scenarios and exit

Exit codes: 0 every promise held, 1 one broke (named in the table), 2 a usage error.`;

/** Runs the command with `argv` (without node and the script); resolves with the exit code. */
export async function main(argv: readonly string[], io: { out: (s: string) => void; err: (s: string) => void } = stdio()): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
      io.out(HELP);
      return command === undefined ? 2 : 0;
    }
    if (command === 'chaos') return await chaos(rest, io);
    if (command === 'doctor') return await doctor(rest, io);
    throw new ChaosUsageError(`unknown command ${JSON.stringify(command)}; expected chaos or doctor (resilimit --help)`);
  } catch (error) {
    if (error instanceof ChaosUsageError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS') === true) {
      io.err(`resilimit: ${(error as Error).message}\n(resilimit --help for the options)`);
      return 2;
    }
    io.err(`resilimit: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return 1;
  }
}

async function chaos(args: readonly string[], io: { out: (s: string) => void; err: (s: string) => void }): Promise<number> {
  const { values } = parseArgs({
    args: [...args],
    strict: true,
    options: {
      config: { type: 'string' },
      scenarios: { type: 'string' },
      instances: { type: 'string' },
      seed: { type: 'string' },
      report: { type: 'string' },
      require: { type: 'string' },
      'latency-budget': { type: 'string' },
      redis: { type: 'string' },
      toxiproxy: { type: 'string' },
      upstream: { type: 'string' },
      'proxy-ports': { type: 'string' },
      destructive: { type: 'boolean' },
      list: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help === true) {
    io.out(HELP);
    return 0;
  }
  if (values.list === true) {
    io.out(SCENARIOS.map((s) => `${s.name.padEnd(16)} ${s.inDefault ? 'default ' : '        '}${s.title}`).join('\n'));
    return 0;
  }
  if (values.config === undefined)
    throw new ChaosUsageError('--config FILE is required: a module exporting createLimiter({ host, port, instance })');
  if ((values.redis === undefined) !== (values.toxiproxy === undefined)) {
    throw new ChaosUsageError('--redis and --toxiproxy go together: your own Redis and the Toxiproxy in front of it');
  }
  const scenarios =
    values.scenarios === undefined || values.scenarios === 'default' || values.scenarios === 'all'
      ? values.scenarios
      : list(values.scenarios);
  const controller = new AbortController();
  const onSigint = (): void => {
    io.err('\nresilimit: interrupted: stopping the scenario and every process it started…');
    controller.abort();
  };
  process.once('SIGINT', onSigint);
  process.once('SIGTERM', onSigint);
  const options: ChaosOptions = {
    config: values.config,
    ...(scenarios === undefined ? {} : { scenarios }),
    ...(values.instances === undefined ? {} : { instances: integer('--instances', values.instances) }),
    ...(values.seed === undefined ? {} : { seed: integer('--seed', values.seed) }),
    ...(values.require === undefined ? {} : { require: list(values.require) as VerdictName[] }),
    ...(values['latency-budget'] === undefined ? {} : { latencyBudgetMs: integer('--latency-budget', values['latency-budget']) }),
    ...(values.redis === undefined || values.toxiproxy === undefined
      ? {}
      : {
          external: {
            redisUrl: values.redis,
            toxiproxyUrl: values.toxiproxy,
            ...(values.upstream === undefined ? {} : { upstream: values.upstream }),
            ...(values['proxy-ports'] === undefined ? {} : { proxyPorts: portRange(values['proxy-ports']) }),
            destructive: values.destructive === true,
          },
        }),
    signal: controller.signal,
    onProgress: (p) => {
      if (p.event === 'start') {
        io.err(`[${p.index + 1}/${p.total}] ${p.scenario} … ${seconds(p.elapsedMs)} elapsed, about ${seconds(p.leftMs)} left`);
      } else if (p.outcome !== undefined) {
        const o = p.outcome;
        const failed = o.verdicts.filter((v) => v.pass === false).map((v) => `${v.name}: ${v.figure}`);
        io.err(
          `      ${o.skipped !== undefined ? `skipped: ${o.skipped}` : o.passed ? 'held' : `BROKEN: ${failed.join('; ') || 'incomplete'}`}`,
        );
      }
    },
  };
  try {
    const report = await runChaos(options);
    const dir = values.report ?? `resilimit-chaos/${report.startedAt.replace(/[:.]/g, '-')}`;
    const files = await writeReport(report, dir);
    io.out(verdictTable(report));
    io.out(`\nReport: ${files.html}\n        ${files.markdown}\n        ${files.json}`);
    try {
      assertChaos(report);
      return 0;
    } catch (error) {
      if (!(error instanceof ChaosAssertionError)) throw error;
      io.err(
        report.interrupted ? 'resilimit: interrupted; the report holds what was measured until then' : 'resilimit: a promise broke (above)',
      );
      return 1;
    }
  } finally {
    process.off('SIGINT', onSigint);
    process.off('SIGTERM', onSigint);
  }
}

async function doctor(args: readonly string[], io: { out: (s: string) => void; err: (s: string) => void }): Promise<number> {
  const { values } = parseArgs({
    args: [...args],
    strict: true,
    options: { redis: { type: 'string' }, config: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help === true) {
    io.out(HELP);
    return 0;
  }
  if (values.redis === undefined) throw new ChaosUsageError('--redis URL is required, e.g. --redis redis://127.0.0.1:6379');
  const result = await runDoctor({ redisUrl: values.redis, ...(values.config === undefined ? {} : { config: values.config }) });
  io.out(result.text);
  return result.ok ? 0 : 1;
}

function list(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

function integer(flag: string, value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n))
    throw new ChaosUsageError(`${flag} must be a whole number; got ${JSON.stringify(value)}`);
  return n;
}

/** `26379-26390` or `26379,26380`: the ports, each 1 … 65535. */
function portRange(value: string): number[] {
  const ports = value.split(',').flatMap((part) => {
    const [from = 0, to = from] = part.split('-').map((p) => integer('--proxy-ports', p.trim()));
    return Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
  });
  if (ports.length === 0 || ports.some((p) => p < 1 || p > 65_535)) {
    throw new ChaosUsageError(`--proxy-ports must be ports 1 … 65535, as 26379-26390 or 26379,26380; got ${JSON.stringify(value)}`);
  }
  return ports;
}

function seconds(ms: number): string {
  return `${Math.round(ms / 1000)} s`;
}

function stdio(): { out: (s: string) => void; err: (s: string) => void } {
  return { out: (s) => void process.stdout.write(`${s}\n`), err: (s) => void process.stderr.write(`${s}\n`) };
}
