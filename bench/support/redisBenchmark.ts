/** `redis-benchmark` (redis-tools) against a server: requests per second of one pipelined command. */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export type RedisBenchmarkOptions = {
  host: string;
  port: number;
  /** Total requests (bounds the run). */
  requests: number;
  pipeline: number;
  clients: number;
  /** Range of `__rand_int__` (`-r`). */
  keyspace: number;
  command: readonly string[];
};

export async function redisBenchmark(o: RedisBenchmarkOptions): Promise<{ requestsPerSecond: number; argv: string[] }> {
  const argv = [
    '-h',
    o.host,
    '-p',
    String(o.port),
    '-c',
    String(o.clients),
    '-n',
    String(o.requests),
    '-P',
    String(o.pipeline),
    '-r',
    String(o.keyspace),
    '--csv',
    ...o.command,
  ];
  const { stdout } = await run('redis-benchmark', argv, { timeout: 60_000 });
  // --csv: a header line, then "name","rps",...
  const line = stdout.trim().split('\n').at(-1) ?? '';
  const rps = Number(line.split(',')[1]?.replaceAll('"', ''));
  if (!Number.isFinite(rps)) throw new Error(`Could not read requests/s from redis-benchmark output:\n${stdout}`);
  return { requestsPerSecond: rps, argv };
}
