/**
 * The demo's command line (node:util parseArgs), checked in one place. Every message names the
 * option, what was expected and what was given.
 */
import { parseArgs } from 'node:util';
import { splitHostPort } from '../../src/chaos/toxiproxy/address.ts';
import type { Env } from '../../chaos/backends/settings.ts';

/** What answers when Redis cannot (the library's `mode`). */
export const MODES = ['local', 'fail-open', 'fail-closed'] as const;
export type DemoMode = (typeof MODES)[number];

/** The ranges of the numeric options, used by the checks and by `--help`. */
export const RANGES = {
  duration: { min: 10, max: 300, default: 48 },
  instances: { min: 1, max: 16, default: 3 },
  limit: { min: 1, max: 1000, default: 120 },
} as const;

/** The user's own servers (`--redis` and `--toxiproxy`, or `REDIS_URL` and `TOXIPROXY_URL`). */
export type ExternalServers = {
  readonly redisUrl: string;
  readonly toxiproxyUrl: string;
  /** The address Toxiproxy dials to reach Redis: `--redis-upstream`, else the host:port of the Redis URL. */
  readonly redisUpstream: string;
};

export type DemoOptions = {
  readonly durationS: number;
  readonly instances: number;
  /** Calls per second (window 1 s), one key shared by every instance. */
  readonly limit: number;
  readonly mode: DemoMode;
  /** Undefined: start our own Redis and Toxiproxy. */
  readonly external: ExternalServers | undefined;
  /** Undefined: `reports/demo/<timestamp>/`. */
  readonly out: string | undefined;
};

export type ParsedCommand =
  | { readonly kind: 'help' }
  | { readonly kind: 'run'; readonly options: DemoOptions; readonly notes: readonly string[] };

/** Bad input on the command line: the demo prints the message and exits with status 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

const SPEC = {
  duration: { type: 'string' },
  instances: { type: 'string' },
  limit: { type: 'string' },
  mode: { type: 'string' },
  redis: { type: 'string' },
  toxiproxy: { type: 'string' },
  'redis-upstream': { type: 'string' },
  out: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/**
 * Reads `argv` (without node and the script) and the environment (`REDIS_URL`, `TOXIPROXY_URL`);
 * `CHAOS_BACKEND` and the other variables of the backends are read where the backend starts.
 * @throws UsageError for an unknown option, a missing or malformed value, or servers half given.
 */
export function parseCommand(argv: readonly string[], env: Env): ParsedCommand {
  const { values, positionals } = parse(argv);
  if (values.help === true) return { kind: 'help' };
  if (positionals.length > 0) {
    throw new UsageError(`unexpected argument '${positionals[0]}': every option is named (--duration 30, not 30)`);
  }

  const notes: string[] = [];
  const options: DemoOptions = {
    durationS: integer('--duration', values.duration, RANGES.duration),
    instances: integer('--instances', values.instances, RANGES.instances),
    limit: integer('--limit', values.limit, RANGES.limit),
    mode: mode(values.mode),
    external: externalServers(values, env, notes),
    out: values.out === undefined ? undefined : nonEmpty('--out', values.out, 'a directory'),
  };
  return { kind: 'run', options, notes };
}

function parse(argv: readonly string[]) {
  try {
    return parseArgs({ args: [...argv], options: SPEC, strict: true, allowPositionals: true });
  } catch (error) {
    throw new UsageError(parseArgsMessage(error));
  }
}

function integer(name: string, given: string | undefined, range: { min: number; max: number; default: number }): number {
  if (given === undefined) return range.default;
  const value = /^\d+$/.test(given.trim()) ? Number(given.trim()) : Number.NaN;
  if (!(value >= range.min && value <= range.max)) {
    throw new UsageError(`${name}: expected an integer from ${range.min} to ${range.max}, got '${given}'`);
  }
  return value;
}

function mode(given: string | undefined): DemoMode {
  if (given === undefined) return 'local';
  const found = MODES.find((m) => m === given);
  if (found === undefined) throw new UsageError(`--mode: expected one of ${MODES.join(', ')}, got '${given}'`);
  return found;
}

function nonEmpty(name: string, given: string, what: string): string {
  if (given.trim() === '') throw new UsageError(`${name}: expected ${what}, got '${given}'`);
  return given;
}

/**
 * `--redis`/`--toxiproxy` win over `REDIS_URL`/`TOXIPROXY_URL`. Both flags or neither: one alone is
 * an error. From the environment, both or neither too, but one alone is only noted (a `REDIS_URL` set
 * for the test suite must not stop the demo from starting its own servers).
 */
function externalServers(
  values: { redis?: string | undefined; toxiproxy?: string | undefined; 'redis-upstream'?: string | undefined },
  env: Env,
  notes: string[],
): ExternalServers | undefined {
  const flagged = values.redis !== undefined || values.toxiproxy !== undefined;
  const redisUrl = values.redis ?? (flagged ? undefined : nonBlank(env['REDIS_URL']));
  const toxiproxyUrl = values.toxiproxy ?? (flagged ? undefined : nonBlank(env['TOXIPROXY_URL']));
  const upstream = values['redis-upstream'];
  if (flagged && (redisUrl === undefined || toxiproxyUrl === undefined)) {
    const [given, missing] = redisUrl === undefined ? ['--toxiproxy', '--redis'] : ['--redis', '--toxiproxy'];
    throw new UsageError(`${given} needs ${missing} too: the demo uses your own servers only when it has both`);
  }
  if (redisUrl === undefined || toxiproxyUrl === undefined) {
    if (upstream !== undefined) {
      throw new UsageError(`--redis-upstream: only applies with --redis and --toxiproxy, got '${upstream}' without them`);
    }
    if (redisUrl !== undefined) notes.push('REDIS_URL is set but TOXIPROXY_URL is not: ignoring REDIS_URL');
    if (toxiproxyUrl !== undefined) notes.push('TOXIPROXY_URL is set but REDIS_URL is not: ignoring TOXIPROXY_URL');
    return undefined;
  }
  const source = flagged ? { redis: '--redis', toxiproxy: '--toxiproxy' } : { redis: 'REDIS_URL', toxiproxy: 'TOXIPROXY_URL' };
  const redis = url(source.redis, redisUrl, ['redis:'], 'redis://host:port');
  if (redis.username !== '' || redis.password !== '' || !['', '/', '/0'].includes(redis.pathname)) {
    throw new UsageError(`${source.redis}: expected redis://host:port without credentials or a database, got '${redisUrl}'`);
  }
  url(source.toxiproxy, toxiproxyUrl, ['http:', 'https:'], 'http://host:port (the Toxiproxy API)');
  const redisUpstream = upstream ?? `${redis.hostname}:${redis.port || '6379'}`;
  let port = 0;
  try {
    port = splitHostPort(redisUpstream).port;
  } catch {
    /* reported below */
  }
  if (port === 0) throw new UsageError(`--redis-upstream: expected host:port (e.g. redis:6379), got '${redisUpstream}'`);
  return { redisUrl, toxiproxyUrl, redisUpstream };
}

function nonBlank(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}

function url(name: string, given: string, protocols: readonly string[], shape: string): URL {
  let parsed: URL | undefined;
  try {
    parsed = new URL(given);
  } catch {
    /* reported below */
  }
  if (parsed === undefined || !protocols.includes(parsed.protocol) || parsed.hostname === '') {
    throw new UsageError(`${name}: expected a URL ${shape}, got '${given}'`);
  }
  return parsed;
}

/** parseArgs' own errors, in the demo's words. */
function parseArgsMessage(error: unknown): string {
  const { code, message } = error as { code?: string; message?: string };
  const option = /'(-[^' ]+)/.exec(message ?? '')?.[1];
  switch (code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option '${option ?? message}'`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const name = option?.replace(/^(--?[^=\s]+).*/, '$1');
      if (name !== undefined && /argument missing/.test(message ?? '')) return `${name}: expected a value, got none`;
      if (name !== undefined && /ambiguous/.test(message ?? ''))
        return `${name}: expected a value, got another option (write ${name}=VALUE for a value that starts with -)`;
      return String(message);
    }
    default:
      return String(message ?? error);
  }
}

/** The text of `--help`: every option with its default. */
export function helpText(): string {
  const { duration, instances, limit } = RANGES;
  return `Usage: npm run demo -- [options]
       node examples/demo/main.ts [options]      (after npm run build)

A live failover demo: several service instances, each with its own ResilientLimiter and
Redis client, share ONE rate limit through Redis while Toxiproxy breaks the connection:
healthy, then Redis slow (+250 ms per reply, the breaker's deadline is 50 ms), then Redis
down (proxy disabled, connections cut), then Redis back. The load is twice the limit.
Each second it prints admitted/s against the limit, who decided (Redis, the fallback, the
deny cache), each instance's breaker and the decision latency. At the end it writes
demo.svg and demo.json to reports/demo/<timestamp>/.

Options:
  --duration S      length of the run in seconds, split 24/20/24/32 % over the four
                    phases; an integer from ${duration.min} to ${duration.max} (default ${duration.default})
  --instances N     simulated service instances; an integer from ${instances.min} to ${instances.max} (default ${instances.default})
  --limit N         calls per second allowed in total, over every instance (window 1 s);
                    the offered load is 2 x N per second; ${limit.min} to ${limit.max} (default ${limit.default})
  --mode M          what answers while Redis cannot: local (each instance's local window,
                    its share of the limit), fail-open (allow all) or fail-closed (deny
                    all) (default local)
  --redis URL       your own Redis, redis://host:port (default: REDIS_URL when TOXIPROXY_URL
                    is set too; else the chaos suite's backend, see below)
  --toxiproxy URL   your own Toxiproxy API, http://host:port (default: TOXIPROXY_URL when
                    REDIS_URL is set too; else the chaos suite's backend, see below)
  --redis-upstream HOST:PORT
                    the address Toxiproxy dials to reach Redis, when it sees Redis under
                    another name (default: host:port of --redis)
  --out DIR         write demo.svg and demo.json into DIR (default reports/demo/<timestamp>)
  -h, --help        show this text

Your own servers (e.g. docker compose up -d, which publishes proxy ports 26379-26390):
  CHAOS_PROXY_PORTS=26379-26390 npm run demo -- --redis redis://127.0.0.1:6379 \\
    --toxiproxy http://127.0.0.1:8474 --redis-upstream redis:6379
Your servers stand for CHAOS_BACKEND=external, with no fall-back to other servers;
CHAOS_PROXY_PORTS and CHAOS_PROXY_LISTEN_HOST are read as by the chaos suite (docs/chaos.md).

Without them the demo picks its backend as the chaos suite does, by CHAOS_BACKEND (default
auto: Redis and Toxiproxy in containers when a Docker engine answers, else a redis-server
child with our Toxiproxy stand-in; CHAOS_BACKEND=local skips the containers). It needs
redis-server on PATH (apt-get install redis-server) or a Docker engine. Ctrl-C stops it
cleanly (and still writes the report). Exit status: 0 done, 1 could not run, 2 bad option,
130 interrupted.
`;
}
