/**
 * `npm run bench`: every benchmark in sequence (those at the top of bench/, and the probes floor and
 * growth of bench/probes/), each in its own process (and with its own redis-server child), with a
 * progress display: one live line per benchmark on a TTY, plain lines otherwise. Writes `reports/bench/<time>/results.md` and `results.json`.
 *
 *   npm run bench                      # all of them (see BENCHMARKS for how long each takes)
 *   npm run bench -- redis-tier memory # some of them
 *   npm run bench -- --quick           # about a minute: the benchmarks with a form that short, in it
 *   npm run bench -- --help            # what each measures, and how long it takes
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, platform, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { clock, type BenchMessage, type ResultMessage } from './support/report.ts';

/**
 * A benchmark: what it measures, how long its full run took, and its form in `--quick`, if it has
 * one: its own `--quick`, its cells shortened (`BENCH_TIME_SCALE`: the same cells, measured for less
 * time, so the figures mean the same, with more noise), or whole when it is short already. Without
 * one, `--quick` leaves it out and says so. Durations: `npm run bench` and `-- --quick` on 2 shared
 * vCPUs (load average 4–6), 2026-11-29; resolution and hot-key stopped early there (a decision
 * timed out under that load), so theirs are docs/benchmarks.md's.
 */
type Benchmark = {
  readonly name: string;
  readonly measures: string;
  /** Seconds its full run took. */
  readonly fullS: number;
  readonly quick?: { readonly args?: readonly string[]; readonly env?: Readonly<Record<string, string>>; readonly s: number };
};

/** The short form of a benchmark whose cells are timed: each measured for a fifth of its time. */
const SHORT_CELLS = { BENCH_TIME_SCALE: '0.2' };

const BENCHMARKS: readonly Benchmark[] = [
  {
    name: 'steady',
    measures:
      'keys in steady state, beside RateLimiterRedis: decisions/s, p99, Node and Redis CPU per call, by callers (1-256) and by fill',
    fullS: 134,
  },
  {
    name: 'resolution',
    measures:
      'the exact log, the slices (resolutionMs) and RateLimiterRedis by the limit and by the key count: Redis memory per key, Redis CPU per decision',
    fullS: 180,
  },
  {
    name: 'hot-key',
    measures:
      'one hot key shared by 1-8 processes: decisions/s, script calls and Redis CPU per decision (slices, leases, RateLimiterRedis)',
    fullS: 40,
  },
  {
    name: 'redis-tier',
    measures: 'decisions/s and latency of every Redis contender at 1-256 callers over 10,000 keys, healthy Redis; redis-benchmark ceilings',
    fullS: 127,
  },
  {
    name: 'cpu',
    measures: 'CPU per decision in this process and in redis-server, 64 callers, every Redis contender',
    fullS: 55,
    quick: { env: SHORT_CELLS, s: 14 },
  },
  {
    name: 'degraded',
    measures: 'latency of the calls made while Redis is frozen 3 s, 2,000 calls/s: resilimit beside RateLimiterRedis with insurance',
    fullS: 22,
    quick: { s: 22 },
  },
  {
    name: 'local-tier',
    measures: 'the local tier beside RateLimiterMemory, no Redis: decisions/s and heap per key at 10k and 1M keys',
    fullS: 113,
  },
  {
    name: 'slots',
    measures: 'ConcurrencyLimiter beside redis-semaphore, and Budget: Redis CPU per operation; slots held through a Redis freeze',
    fullS: 84,
    quick: { args: ['--quick'], s: 33 },
  },
  {
    name: 'floor',
    measures: "what the design costs at the least: Redis CPU of the log's commands beside INCRBY; decisions/s with the breaker open",
    fullS: 25,
  },
  {
    name: 'memory',
    measures: 'Redis memory per key with a full window at limits 10-10,000: resilimit, a plain script, RateLimiterRedis',
    fullS: 23,
  },
  {
    name: 'growth',
    measures: "resilimit's decisions/s at 64 callers and Redis memory per key as keys grow 1k-100k and the limit 10-1,000",
    fullS: 77,
  },
];
/** The benchmarks above that live in `bench/probes/` (what bounds the targets; growth with the key count). */
const PROBES = new Set(['floor', 'growth']);
/** A benchmark still running after this is stopped (they are designed to take 15–240 s). */
const TIME_LIMIT_MS = 300_000;

/** `--help`: the flags, and each benchmark with what it measures and how long it takes. */
function usage(): string {
  const total = BENCHMARKS.reduce((n, b) => n + b.fullS, 0);
  const quickTotal = BENCHMARKS.reduce((n, b) => n + (b.quick?.s ?? 0), 0);
  const rows = BENCHMARKS.flatMap((b) => {
    const form = b.quick?.args !== undefined ? 'its own --quick' : b.quick?.env !== undefined ? 'cells a fifth as long' : 'whole';
    const quick = b.quick === undefined ? 'not in --quick' : `--quick ${clock(b.quick.s * 1000)} (${form})`;
    return [`  ${b.name.padEnd(11)} ${clock(b.fullS * 1000).padStart(5)}  ${quick}`, `              ${b.measures}`];
  });
  return [
    'Usage: npm run bench -- [--quick] [name ...]',
    '',
    `  (no name)   every benchmark in sequence, each in its own process: about ${Math.round(total / 60)} min`,
    '  name ...    only those',
    `  --quick     about ${Math.round(quickTotal / 10) * 10} s: the benchmarks with a form that short, in it (the same`,
    '              figures, over fewer keys or shorter cells: noisier); with names, those of them',
    '  --help      this',
    '',
    'Writes reports/bench/<time>/results.md and results.json. Durations: on 2 shared vCPUs (bench/run.ts says which).',
    '',
    '  name         full  quick, then what it measures',
    ...rows,
  ].join('\n');
}

type Outcome = {
  name: string;
  ok: boolean;
  elapsedMs: number;
  /** What was measured: the commit, marked `+dirty` when src/ or lua/ had uncommitted changes at the start. */
  source: string;
  result?: ResultMessage;
  stderr: string;
  error?: string;
};

function git(...args: string[]): string {
  try {
    return execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

/** The commit of the code a benchmark is about to load (src/ and lua/ are read at its start). */
function sourceState(): string {
  return `${git('rev-parse', '--short', 'HEAD')}${git('status', '--short', '--', 'src', 'lua') === '' ? '' : '+dirty'}`;
}

const tty = process.stdout.isTTY === true;
const spinner = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/** Runs one benchmark in a process of its own: in its short form with `quick`. */
function runOne(benchmark: Benchmark, quick: boolean): Promise<Outcome> {
  const { name } = benchmark;
  const file = fileURLToPath(new URL(`./${PROBES.has(name) ? 'probes/' : ''}${name}.ts`, import.meta.url));
  const started = performance.now();
  const source = sourceState();
  const form = quick ? benchmark.quick : undefined;
  const child = spawn(process.execPath, [file, ...(form?.args ?? [])], {
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    env: { ...process.env, ...form?.env },
  });
  let stdout = '';
  let stderr = '';
  let status = 'starting';
  let result: ResultMessage | undefined;
  let frame = 0;
  const line = (): string => `${spinner[frame++ % spinner.length]} ${name.padEnd(11)} ${clock(performance.now() - started)}  ${status}`;
  const draw = (): void => {
    const width = (process.stdout.columns || 120) - 1;
    process.stdout.write(`\r\x1b[2K${line().slice(0, width)}`);
  };
  const ticker = tty ? setInterval(draw, 100) : undefined;
  if (tty) draw();
  else console.log(`[${name}] started`);

  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.on('message', (message: BenchMessage) => {
    if (message.type === 'progress') {
      status = message.text;
      if (!tty) console.log(`[${name} ${clock(performance.now() - started)}] ${message.text}`);
    } else {
      result = message;
    }
  });
  const killer = setTimeout(() => {
    status = `stopped after ${TIME_LIMIT_MS / 1000} s`;
    child.kill('SIGTERM');
  }, TIME_LIMIT_MS);

  return new Promise((resolve) => {
    child.on('close', (code, signal) => {
      clearTimeout(killer);
      if (ticker !== undefined) clearInterval(ticker);
      const elapsedMs = performance.now() - started;
      const ok = code === 0 && result !== undefined;
      const summary = `${ok ? '✓' : '✗'} ${name.padEnd(11)} ${clock(elapsedMs)}${ok ? '' : `  failed (exit ${code ?? signal})`}`;
      if (tty) process.stdout.write(`\r\x1b[2K${summary}\n`);
      else console.log(summary);
      console.log(`\n${stdout.trim()}\n`);
      if (!ok && stderr.trim() !== '') console.log(`stderr of ${name}:\n${stderr.trim()}\n`);
      resolve({
        name,
        ok,
        elapsedMs,
        source,
        stderr,
        ...(result === undefined ? {} : { result }),
        ...(ok ? {} : { error: `exit ${code ?? signal}` }),
      });
    });
  });
}

async function runAll(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    console.log(usage());
    return;
  }
  const quick = args.includes('--quick');
  const wanted = args.filter((a) => a !== '--quick');
  const known = BENCHMARKS.map((b) => b.name);
  const unknown = wanted.filter((n) => !known.includes(n));
  if (unknown.length > 0) {
    console.error(`Unknown benchmark(s) or flag(s): ${unknown.join(', ')}. Known: ${known.join(', ')}; flags --quick, --help.`);
    process.exit(2);
  }
  const chosen = wanted.length === 0 ? BENCHMARKS : BENCHMARKS.filter((b) => wanted.includes(b.name));
  const left = quick ? chosen.filter((b) => b.quick === undefined) : [];
  const benchmarks = quick ? chosen.filter((b) => b.quick !== undefined) : chosen;
  const names = benchmarks.map((b) => b.name);
  const startedAt = new Date();
  const started = performance.now();
  const environment = {
    node: process.version,
    platform: `${platform()} ${release()}`,
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
  };
  const mode = quick ? 'quick: ' : '';
  console.log(`resilimit benchmarks, ${mode}${names.join(', ')} (Node ${environment.node}, ${environment.cores} × ${environment.cpu})`);
  if (quick) {
    console.log(
      'Quick: the same figures over fewer keys or shorter cells, so noisier than a full run.' +
        `${left.length === 0 ? '' : ` Not run (no form that short): ${left.map((b) => b.name).join(', ')}.`}`,
    );
  }
  console.log('');

  const outcomes: Outcome[] = [];
  for (const benchmark of benchmarks) outcomes.push(await runOne(benchmark, quick));
  const totalMs = performance.now() - started;

  const sources = [...new Set(outcomes.map((o) => o.source))];
  const measured =
    sources.length === 1
      ? `at commit ${sources[0]}`
      : `**on changing code** (${outcomes.map((o) => `${o.name} at ${o.source}`).join(', ')}: src/ or lua/ changed during the run)`;
  const dir = join('reports', 'bench', `${startedAt.toISOString().replace(/[:.]/g, '-')}${quick ? '-quick' : ''}`);
  mkdirSync(dir, { recursive: true });
  const md = [
    `# resilimit benchmarks${quick ? ', quick' : ''}, ${startedAt.toISOString()}`,
    '',
    ...(quick
      ? [
          `**Quick**: the same figures over fewer keys or shorter cells, noisier than a full run${left.length === 0 ? '' : `; not run: ${left.map((b) => b.name).join(', ')}`}.`,
          '',
        ]
      : []),
    `Command: \`npm run bench${args.length > 0 ? ` -- ${args.join(' ')}` : ''}\` ${measured}${sources.some((x) => x.endsWith('+dirty')) ? ' (`+dirty`: uncommitted changes in src/ or lua/)' : ''}. Node ${environment.node}, ${environment.platform}, ${environment.cores} × ${environment.cpu}, ${environment.memoryGiB} GiB. Total ${(totalMs / 1000).toFixed(0)} s.`,
    '',
    ...outcomes.map((o) =>
      o.ok && o.result !== undefined
        ? `${o.result.markdown.replace(/^## /, '## ')}\n`
        : `## ${o.name}\n\nFailed (${o.error ?? 'no result'}).\n\n\`\`\`\n${o.stderr.trim().slice(-4_000)}\n\`\`\`\n`,
    ),
  ].join('\n');
  writeFileSync(join(dir, 'results.md'), md);
  writeFileSync(
    join(dir, 'results.json'),
    `${JSON.stringify(
      {
        startedAt: startedAt.toISOString(),
        quick,
        totalMs,
        environment,
        benchmarks: outcomes.map((o) => ({
          name: o.name,
          ok: o.ok,
          elapsedMs: o.elapsedMs,
          source: o.source,
          title: o.result?.title,
          data: o.result?.data,
          error: o.error,
        })),
      },
      null,
      2,
    )}\n`,
  );
  console.log(
    `${outcomes.every((o) => o.ok) ? 'All done' : 'Done, with failures'}${quick ? ' (quick)' : ''} in ${clock(totalMs)}. Report: ${join(dir, 'results.md')} (and results.json)`,
  );
  process.exitCode = outcomes.every((o) => o.ok) ? 0 : 1;
}

await runAll();
