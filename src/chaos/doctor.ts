/**
 * `resilimit doctor`: checks a deployment's Redis for this library, read-only (PING, INFO, TIME,
 * CONFIG GET, CLUSTER INFO, SCRIPT LOAD of the library's own scripts, which changes no key), and
 * what a config module's options come to once the library has validated them.
 */
import { createServer } from 'node:net';
import { loadScript } from '../redis/scripts/script.js';
import { buildInstance, ChaosUsageError, loadChaosConfig } from './config.js';
import { openResp, parseInfo, parseRedisUrl, type RespOptions } from './resp.js';
import { requireRuntime } from '../base/runtime.js';

/** One check: `ok` true, false (a problem), or undefined (worth knowing, not a problem). */
export type DoctorCheck = { readonly name: string; readonly ok: boolean | undefined; readonly detail: string };

export type DoctorResult = {
  /** No check found a problem. */
  readonly ok: boolean;
  readonly checks: readonly DoctorCheck[];
  /** The checks as lines for a terminal. */
  readonly text: string;
};

const SCRIPTS = ['sliding-window', 'sliced-window', 'limit-all', 'refund', 'reconcile', 'heartbeat', 'lease', 'block'];

/**
 * Checks the Redis at `redisUrl` and, when given, the config module's options.
 * @throws {ChaosUsageError} for a URL that does not parse.
 * @example
 * const { ok, text } = await runDoctor({ redisUrl: 'redis://10.0.0.5:6379', config: './limiter.config.mjs' });
 */
export async function runDoctor(input: { redisUrl: string; config?: string; timeoutMs?: number }): Promise<DoctorResult> {
  requireRuntime();
  let address: RespOptions;
  try {
    address = parseRedisUrl(input.redisUrl);
  } catch (error) {
    throw new ChaosUsageError(`--redis: ${(error as Error).message}`);
  }
  const checks: DoctorCheck[] = [];
  const where = `${address.host}:${address.port}${address.tls === undefined || address.tls === false ? '' : ' (TLS)'}`;
  let conn: Awaited<ReturnType<typeof openResp>> | undefined;
  try {
    conn = await openResp({ ...address, timeoutMs: input.timeoutMs ?? 2000 });
    const started = Date.now();
    await conn.command('PING');
    checks.push({ name: 'reachable', ok: true, detail: `${where} answered PING in ${Date.now() - started} ms` });
  } catch (error) {
    checks.push({ name: 'reachable', ok: false, detail: `${where}: ${why(error)}` });
    // Connected but PING failed (a password wanted, a frozen server): nothing more can be asked.
    conn?.close();
    conn = undefined;
  }
  if (conn !== undefined) {
    try {
      await server(conn, checks);
    } finally {
      conn.close();
    }
  }
  if (input.config !== undefined) checks.push(await options(input.config));
  const ok = checks.every((c) => c.ok !== false);
  const text = checks.map((c) => `${c.ok === true ? '✓' : c.ok === false ? '✗' : '·'} ${c.name.padEnd(12)} ${c.detail}`).join('\n');
  return { ok, checks, text: `${text}\n${ok ? 'No problem found.' : 'Problems found (✗ above).'}` };
}

type Conn = Awaited<ReturnType<typeof openResp>>;

async function server(conn: Conn, checks: DoctorCheck[]): Promise<void> {
  const info = parseInfo(String(await conn.command('INFO')));
  const name = info['server_name'] ?? 'redis';
  const version = info['valkey_version'] ?? info['redis_version'] ?? 'unknown';
  const major = Number(version.split('.')[0]);
  checks.push({
    name: 'server',
    ok: !(name === 'redis' && major < 6),
    detail: `${name} ${version}, mode ${info['redis_mode'] ?? 'unknown'}, role ${info['role'] ?? 'unknown'}${major < 6 ? ': resilimit needs Redis 6 or later' : ''}`,
  });
  await topology(conn, info, checks);
  await clock(conn, checks);
  eviction(info, checks);
  const failed: string[] = [];
  for (const script of SCRIPTS) {
    const { source, sha } = loadScript(script);
    try {
      const loaded = String(await conn.command('SCRIPT', 'LOAD', source));
      if (loaded !== sha) failed.push(`${script}: loaded as ${loaded}, expected ${sha}`);
    } catch (error) {
      failed.push(`${script}: ${why(error)}`);
    }
  }
  checks.push({
    name: 'scripts',
    ok: failed.length === 0,
    detail: failed.length === 0 ? `the ${SCRIPTS.length} scripts load` : failed.join('; '),
  });
}

async function topology(conn: Conn, info: Record<string, string>, checks: DoctorCheck[]): Promise<void> {
  if (info['redis_mode'] === 'sentinel') {
    const masters = (await conn.command('SENTINEL', 'MASTERS')) as unknown[];
    checks.push({
      name: 'topology',
      ok: undefined,
      detail: `a Sentinel watching ${masters.length} master(s): give the limiter a client made for Sentinel (docs/clients.md), not this address`,
    });
  } else if (info['cluster_enabled'] === '1') {
    const cluster = parseInfo(String(await conn.command('CLUSTER', 'INFO')));
    const ok = cluster['cluster_state'] === 'ok';
    checks.push({
      name: 'topology',
      ok,
      detail: `Cluster, state ${cluster['cluster_state']}, ${cluster['cluster_size']} masters serving slots, ${cluster['cluster_known_nodes']} nodes known: use a Cluster client`,
    });
  } else {
    const replica = info['role'] === 'slave';
    checks.push({
      name: 'topology',
      ok: !replica,
      detail: replica
        ? `a replica of ${info['master_host']}:${info['master_port']}: it refuses writes (READONLY); point the limiter at the master`
        : `a single master with ${info['connected_slaves'] ?? '0'} replica(s)`,
    });
  }
}

async function clock(conn: Conn, checks: DoctorCheck[]): Promise<void> {
  const before = Date.now();
  const [seconds, micros] = (await conn.command('TIME')) as [string, string];
  const after = Date.now();
  const redisMs = Number(seconds) * 1000 + Number(micros) / 1000;
  const offset = redisMs - (before + after) / 2;
  checks.push({
    name: 'clock',
    ok: Math.abs(offset) < 1000 ? true : undefined,
    detail: `Redis's clock is ${offset >= 0 ? 'ahead of' : 'behind'} this host's by ${Math.abs(offset).toFixed(1)} ms (± ${((after - before) / 2).toFixed(1)}); the limiter reads Redis's TIME and keeps the offset, so a skew costs nothing but is worth knowing`,
  });
}

function eviction(info: Record<string, string>, checks: DoctorCheck[]): void {
  const policy = info['maxmemory_policy'] ?? 'unknown';
  const max = Number(info['maxmemory'] ?? '0');
  const limit = max === 0 ? 'no memory limit' : `maxmemory ${(max / 2 ** 20).toFixed(0)} MiB`;
  if (policy.startsWith('allkeys-')) {
    checks.push({
      name: 'eviction',
      ok: false,
      detail: `${policy} with ${limit}: Redis may evict windows, which forgets calls; use volatile-* or noeviction`,
    });
  } else if (policy.startsWith('volatile-') && max > 0) {
    checks.push({
      name: 'eviction',
      ok: undefined,
      detail: `${policy} with ${limit}: windows carry TTLs and can be evicted when memory is full (the limiter warns, RESILIMIT_KEYS_EVICTED)`,
    });
  } else {
    checks.push({
      name: 'eviction',
      ok: true,
      detail: `${policy} with ${limit}${policy === 'noeviction' && max > 0 ? ': writes fail with OOM when full, and the breaker opens' : ''}`,
    });
  }
}

/** The config module's limiter, built against a closed port (so nothing reaches Redis), read through `stats()`. */
async function options(config: string): Promise<DoctorCheck> {
  try {
    const loaded = await loadChaosConfig(config);
    const port = await closedPort();
    const built = await buildInstance(config, loaded, { host: '127.0.0.1', port, instance: 0 });
    await built.close().catch(() => undefined);
    if (built.kind === 'slots') {
      const o = built.limiter.options;
      const counted = o.instances === 'auto' ? `instances 'auto', lease ${o.leaseMs} ms` : `instances ${o.instances} (fixed)`;
      return {
        name: 'options',
        ok: true,
        detail: `${config}: a ConcurrencyLimiter, max ${o.max} slots per key, lease ${o.ttlMs} ms, mode '${built.limiter.mode}', deadline ${o.breaker.timeoutMs} ms, ${counted}`,
      };
    }
    const s = built.limiter.stats();
    const lease = s.leaseMs === undefined ? `instances ${s.instances} (fixed)` : `instances 'auto', lease ${s.leaseMs} ms`;
    return {
      name: 'options',
      ok: true,
      detail: `${config}: limit ${s.limit} per ${s.windowMs} ms, mode '${s.mode}', deadline ${s.timeoutMs} ms, ${lease}, local share ${s.localLimit}`,
    };
  } catch (error) {
    return { name: 'options', ok: false, detail: (error as Error).message };
  }
}

/** A port of 127.0.0.1 nothing listens on (bound, then closed). */
function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Why a connection or a command failed, in words: refused, timed out, authentication, TLS. */
function why(error: unknown): string {
  const e = error as { code?: string; message?: string; cause?: { code?: unknown } };
  const message = e.message ?? String(error);
  // openResp wraps the socket's error: its code is on the cause.
  const code = e.code ?? (typeof e.cause?.code === 'string' ? e.cause.code : undefined);
  if (code === 'ECONNREFUSED') return 'connection refused: nothing listens there (wrong port, or Redis is down)';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `the host name does not resolve (${code})`;
  if (/timed out|timeout|within \d+ ms/i.test(message))
    return `no answer in time: ${message} (a firewall, a wrong address, or a frozen server)`;
  if (/NOAUTH|WRONGPASS|invalid password|AUTH/i.test(message)) return `authentication: ${message} (put user:password in the URL)`;
  if (/SSL|TLS|certificate|EPROTO/i.test(message) || code?.startsWith('ERR_SSL') === true)
    return `TLS: ${message} (rediss:// for TLS, redis:// without)`;
  return message;
}
