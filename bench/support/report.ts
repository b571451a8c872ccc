/**
 * What a benchmark file prints and hands back. Alone (`node bench/x.ts`) it prints its tables on
 * stdout and a progress line on stderr (one live line on a TTY, plain lines otherwise). Under
 * `bench/run.ts` (an IPC channel exists) progress and the result also go to the runner, which draws
 * its own progress display and writes the report files.
 */
import { performance } from 'node:perf_hooks';

export type ProgressMessage = { type: 'progress'; text: string };
export type ResultMessage = { type: 'result'; name: string; title: string; markdown: string; data: unknown; elapsedMs: number };
export type BenchMessage = ProgressMessage | ResultMessage;

/** "1:05" for 65,000 ms. */
export function clock(ms: number): string {
  const s = Math.floor(ms / 1000);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

export class Bench {
  readonly name: string;
  readonly title: string;
  readonly #startedAt = performance.now();
  readonly #parts: string[] = [];
  readonly #live = process.send === undefined && process.stderr.isTTY === true;
  #line = '';

  constructor(name: string, title: string) {
    this.name = name;
    this.title = title;
    // The channel must not keep a finished benchmark alive.
    process.channel?.unref();
    this.#print(`## ${title}\n`);
  }

  /** What the benchmark is doing now (one short line). */
  progress(text: string): void {
    if (process.send !== undefined) {
      process.send({ type: 'progress', text } satisfies ProgressMessage);
      return;
    }
    const line = `[${this.name} ${clock(performance.now() - this.#startedAt)}] ${text}`;
    if (this.#live) {
      this.#line = line.slice(0, (process.stderr.columns || 120) - 1);
      process.stderr.write(`\r\x1b[2K${this.#line}`);
    } else {
      process.stderr.write(`${line}\n`);
    }
  }

  /** A part of the report: a heading and a Markdown body (a table, notes). */
  section(heading: string, body: string): void {
    this.#print(`### ${heading}\n\n${body}\n`);
  }

  /** A paragraph of the report. */
  note(text: string): void {
    this.#print(`${text}\n`);
  }

  /** Ends the benchmark: clears the live line and hands the result to the runner, if any. */
  async finish(data: unknown): Promise<void> {
    if (this.#live) process.stderr.write('\r\x1b[2K');
    const elapsedMs = performance.now() - this.#startedAt;
    this.#print(`_${this.name}: ${(elapsedMs / 1000).toFixed(1)} s._\n`);
    if (process.send === undefined) return;
    const message: ResultMessage = {
      type: 'result',
      name: this.name,
      title: this.title,
      markdown: this.#parts.join('\n'),
      data,
      elapsedMs,
    };
    await new Promise<void>((resolve) => process.send?.(message, () => resolve()));
  }

  #print(text: string): void {
    this.#parts.push(text);
    if (this.#live && this.#line !== '') process.stderr.write('\r\x1b[2K');
    process.stdout.write(`${text}\n`);
    if (this.#live && this.#line !== '') process.stderr.write(this.#line);
  }
}

/**
 * Runs a benchmark's main function, then makes sure the process ends: a handle left open by a
 * library under test must not keep `npm run bench` waiting.
 */
export function main(run: () => Promise<void>): void {
  // Ctrl-C or a runner's timeout: exit through 'exit', where the harness kills its redis-server children.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));
  run().then(
    () => {
      setTimeout(() => process.exit(0), 2_000).unref();
    },
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
