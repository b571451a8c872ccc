/**
 * `npm run bench`: every benchmark in sequence (those at the top of bench/, and the probes floor and
 * growth of bench/probes/), each in its own process (and with its own redis-server child), with a
 * progress display: one live line per benchmark on a TTY, plain lines otherwise. Writes `reports/bench/<time>/results.md` and `results.json`.
 *
 *   npm run bench                      # all of them
 *   npm run bench -- redis-tier memory # some of them
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, platform, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { clock, type BenchMessage, type ResultMessage } from './support/report.ts';

const BENCHMARKS = ['steady', 'resolution', 'hot-key', 'redis-tier', 'cpu', 'degraded', 'local-tier', 'slots', 'floor', 'memory', 'growth'];
/** The benchmarks above that live in `bench/probes/` (what bounds the targets; growth with the key count). */
const PROBES = new Set(['floor', 'growth']);
/** A benchmark still running after this is stopped (they are designed to take 15–120 s). */
const TIME_LIMIT_MS = 300_000;

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

function runOne(name: string): Promise<Outcome> {
  const file = fileURLToPath(new URL(`./${PROBES.has(name) ? 'probes/' : ''}${name}.ts`, import.meta.url));
  const started = performance.now();
  const source = sourceState();
  const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
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
  const wanted = process.argv.slice(2);
  const unknown = wanted.filter((n) => !BENCHMARKS.includes(n));
  if (unknown.length > 0) {
    console.error(`Unknown benchmark(s): ${unknown.join(', ')}. Known: ${BENCHMARKS.join(', ')}.`);
    process.exit(2);
  }
  const names = wanted.length === 0 ? BENCHMARKS : BENCHMARKS.filter((n) => wanted.includes(n));
  const startedAt = new Date();
  const started = performance.now();
  const environment = {
    node: process.version,
    platform: `${platform()} ${release()}`,
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
  };
  console.log(`resilimit benchmarks: ${names.join(', ')} (Node ${environment.node}, ${environment.cores} × ${environment.cpu})\n`);

  const outcomes: Outcome[] = [];
  for (const name of names) outcomes.push(await runOne(name));
  const totalMs = performance.now() - started;

  const sources = [...new Set(outcomes.map((o) => o.source))];
  const measured =
    sources.length === 1
      ? `at commit ${sources[0]}`
      : `**on changing code** (${outcomes.map((o) => `${o.name} at ${o.source}`).join(', ')}: src/ or lua/ changed during the run)`;
  const dir = join('reports', 'bench', startedAt.toISOString().replace(/[:.]/g, '-'));
  mkdirSync(dir, { recursive: true });
  const md = [
    `# resilimit benchmarks, ${startedAt.toISOString()}`,
    '',
    `Command: \`npm run bench${wanted.length > 0 ? ` -- ${wanted.join(' ')}` : ''}\` ${measured}${sources.some((x) => x.endsWith('+dirty')) ? ' (`+dirty`: uncommitted changes in src/ or lua/)' : ''}. Node ${environment.node}, ${environment.platform}, ${environment.cores} × ${environment.cpu}, ${environment.memoryGiB} GiB. Total ${(totalMs / 1000).toFixed(0)} s.`,
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
    `${outcomes.every((o) => o.ok) ? 'All done' : 'Done, with failures'} in ${clock(totalMs)}. Report: ${join(dir, 'results.md')} (and results.json)`,
  );
  process.exitCode = outcomes.every((o) => o.ok) ? 0 : 1;
}

await runAll();
