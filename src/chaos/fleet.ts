/** The instances of one scenario: one process each (`worker.ts`), started, driven and gathered. */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ChaosUsageError } from './config.js';
import type { FromWorker, ToWorker, WorkerSetup } from './protocol.js';
import type { LimiterProfile } from './types.js';

const WORKER = fileURLToPath(new URL(`./worker${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

type Done = Extract<FromWorker, { kind: 'done' | 'slots-done' }>;

/** Started instances, each counted by the others. */
export type Fleet = {
  readonly profile: LimiterProfile;
  /** Starts every instance's load at `atEpochMs`, `perSecond` calls each. */
  go(atEpochMs: number, perSecond: number): void;
  /** Stops the load and gathers each instance's calls; an instance that does not answer within `graceMs` + 10 s is killed (undefined). */
  stop(graceMs: number): Promise<(Done | undefined)[]>;
  /** Kills every process still running (idempotent). */
  kill(): void;
};

/**
 * Forks one worker per setup and waits until each is ready.
 * @throws {ChaosUsageError} when the config module fails in a worker (it does not load, or the limiter refuses its options).
 * @throws Error when a worker exits early or is not ready within `setup.countWithinMs` + 5 s; every worker is killed first.
 */
export async function startFleet(setups: readonly WorkerSetup[]): Promise<Fleet> {
  const workers: ChildProcess[] = [];
  const kill = (): void => {
    for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  };
  const done: Promise<Done | undefined>[] = [];
  try {
    const ready = setups.map((setup, i) => {
      // Warnings go into the report (the worker listens for them), not onto the command's terminal.
      const worker = fork(WORKER, [], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        serialization: 'advanced',
        execArgv: ['--no-warnings'],
      });
      workers.push(worker);
      const exited = new Promise<never>((_, reject) =>
        worker.once('exit', (code, signal) => reject(new Error(`instance ${i} exited (${signal ?? code}) before it was ready`))),
      );
      exited.catch(() => undefined);
      done.push(
        Promise.race([
          new Promise<Done>((resolve) =>
            worker.on('message', (m: FromWorker) => (m.kind === 'done' || m.kind === 'slots-done') && resolve(m)),
          ),
          exited.catch(() => undefined),
        ]),
      );
      const answer = new Promise<Extract<FromWorker, { kind: 'ready' }>>((resolve, reject) => {
        worker.on('message', (m: FromWorker) => {
          if (m.kind === 'ready') resolve(m);
          if (m.kind === 'failed') reject(m.usage ? new ChaosUsageError(m.message) : new Error(m.message));
        });
      });
      worker.send({ kind: 'setup', setup } satisfies ToWorker);
      const within = setup.countWithinMs + 5000;
      return Promise.race([
        answer,
        exited,
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error(`instance ${i} was not ready within ${within} ms`)), within).unref(),
        ),
      ]);
    });
    const answers = await Promise.all(ready);
    return {
      profile: (answers[0] as (typeof answers)[number]).profile,
      go(atEpochMs, perSecond) {
        for (const w of workers) w.send({ kind: 'go', atEpochMs, perSecond } satisfies ToWorker);
      },
      async stop(graceMs) {
        for (const w of workers) if (w.connected) w.send({ kind: 'stop', graceMs } satisfies ToWorker);
        const limit = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), graceMs + 10_000).unref());
        const results = await Promise.all(done.map((d) => Promise.race([d, limit])));
        kill();
        return results;
      },
      kill,
    };
  } catch (error) {
    kill();
    throw error;
  }
}
