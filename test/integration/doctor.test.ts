/**
 * `runDoctor` (src/chaos/doctor.ts, `resilimit doctor`) against real `redis-server` children: what it
 * says of a healthy server, an evicting one, a replica, a closed port, a frozen one, one that wants a
 * password, and of a config module's options; and that it writes nothing (no key, no dirty counter).
 * The config modules import the built package (`npm test` builds before vitest runs).
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosUsageError } from '../../src/chaos/config.js';
import { type DoctorCheck, type DoctorResult, runDoctor } from '../../src/chaos/doctor.js';
import { type RedisServer, startRedisServer } from '../../src/chaos/redisServer.js';
import { openResp, parseInfo, type RespConnection, respOnce } from '../../src/chaos/resp.js';
import { loadScript } from '../../src/redis/scripts/script.js';

const DIST_FILE = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
const DIST = pathToFileURL(DIST_FILE).href;
const SERVER_CHECKS = ['reachable', 'server', 'topology', 'clock', 'eviction', 'scripts'];
const SCRIPTS = ['sliding-window', 'sliced-window', 'limit-all', 'refund', 'reconcile', 'heartbeat', 'lease', 'block'];

let redis: RedisServer;
let dir: string;
const others: RedisServer[] = [];

beforeAll(async () => {
  if (!existsSync(DIST_FILE)) throw new Error('run `npm run build` first (`npm test` does): the config modules import dist/index.js');
  redis = await startRedisServer();
  dir = mkdtempSync(join(tmpdir(), 'resilimit-doctor-'));
});

afterAll(async () => {
  await Promise.allSettled([redis?.close(), ...others.map((s) => s.close())]);
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

async function another(): Promise<RedisServer> {
  const s = await startRedisServer();
  others.push(s);
  return s;
}

function check(result: DoctorResult, name: string): DoctorCheck {
  const found = result.checks.find((c) => c.name === name);
  if (found === undefined) throw new Error(`no ${name} check in:\n${result.text}`);
  return found;
}

/** A config module in the temporary directory, importing the built package by absolute URL; `options` merged into the limiter's. */
function config(name: string, options: Record<string, unknown>): string {
  const file = join(dir, name);
  writeFileSync(
    file,
    `import { createRedisClient, ResilientLimiter } from ${JSON.stringify(DIST)};
export function createLimiter({ host, port }) {
  const redis = createRedisClient({ host, port });
  const limiter = new ResilientLimiter({ redis, prefix: 'doctor:', limit: 20, windowMs: 1000, ...${JSON.stringify(options)} });
  return { limiter, close: () => redis.disconnect() };
}
`,
  );
  return file;
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

/** What a write would change: the keys, the keyspace line, the writes since the last save, and the connections accepted. */
async function state(conn: RespConnection): Promise<{ dbsize: number; keyspace: string; dirty: string; connections: number }> {
  const dbsize = (await conn.command('DBSIZE')) as number;
  const keyspace = String(await conn.command('INFO', 'keyspace'));
  const dirty = parseInfo(String(await conn.command('INFO', 'persistence')))['rdb_changes_since_last_save'] as string;
  const connections = Number(parseInfo(String(await conn.command('INFO', 'stats')))['total_connections_received']);
  return { dbsize, keyspace, dirty, connections };
}

describe('runDoctor (resilimit doctor)', () => {
  it('passes a healthy server: every check present, with what it found, and the scripts in its cache', async () => {
    await respOnce(redis, 'SCRIPT', 'FLUSH');
    const result = await runDoctor({ redisUrl: redis.url });
    expect(result.ok, result.text).toBe(true);
    expect(result.checks.map((c) => c.name)).toEqual(SERVER_CHECKS);
    for (const c of result.checks) expect(c.ok, `${c.name}: ${c.detail}`).toBe(true);
    expect(check(result, 'reachable').detail).toMatch(new RegExp(`^127\\.0\\.0\\.1:${redis.port} answered PING in \\d+ ms$`));
    expect(check(result, 'server').detail).toBe(`redis ${redis.version}, mode standalone, role master`);
    expect(check(result, 'topology').detail).toBe('a single master with 0 replica(s)');
    // Same host, same clock: well within a second.
    const clock = /^Redis's clock is (ahead of|behind) this host's by (\d+\.\d) ms \(± \d+\.\d\)/.exec(check(result, 'clock').detail);
    expect(clock, check(result, 'clock').detail).not.toBeNull();
    expect(Number(clock?.[2])).toBeLessThan(1000);
    expect(check(result, 'eviction').detail).toBe('noeviction with no memory limit');
    expect(check(result, 'scripts').detail).toBe(`the ${SCRIPTS.length} scripts load`);
    // SCRIPT LOAD did load them: the limiter's EVALSHA finds each.
    const shas = SCRIPTS.map((s) => loadScript(s).sha);
    expect(await respOnce(redis, 'SCRIPT', 'EXISTS', ...shas)).toEqual(shas.map(() => 1));
    expect(result.text.split('\n')).toHaveLength(SERVER_CHECKS.length + 1);
    expect(result.text).toMatch(/^✓ reachable {4}127\.0\.0\.1:/);
    expect(result.text.endsWith('\nNo problem found.')).toBe(true);
  });

  it('writes nothing: the keys, the keyspace and the dirty counter are as before, with a config module too', async () => {
    await respOnce(redis, 'SET', 'precious', 'kept');
    await respOnce(redis, 'HSET', 'precious:hash', 'a', '1', 'b', '2');
    const file = config('quiet.config.mjs', {});
    const conn = await openResp(redis);
    try {
      const before = await state(conn);
      expect(before.dbsize).toBe(2);
      const result = await runDoctor({ redisUrl: redis.url, config: file });
      expect(result.ok, result.text).toBe(true);
      const after = await state(conn);
      expect(after.dbsize).toBe(before.dbsize);
      expect(after.keyspace).toBe(before.keyspace);
      expect(after.dirty).toBe(before.dirty);
      // One connection accepted: doctor asks everything over its own.
      expect(after.connections - before.connections).toBe(1);
    } finally {
      conn.close();
    }
    expect(await respOnce(redis, 'GET', 'precious')).toBe('kept');
    expect(await respOnce(redis, 'HGETALL', 'precious:hash')).toEqual(['a', '1', 'b', '2']);
    await respOnce(redis, 'DEL', 'precious', 'precious:hash');
  });

  it("fails eviction on allkeys-lru, naming it; warns of volatile-* under a memory limit and doesn't fail it", async () => {
    try {
      await respOnce(redis, 'CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru');
      const lru = await runDoctor({ redisUrl: redis.url });
      expect(lru.ok).toBe(false);
      expect(check(lru, 'eviction')).toEqual({
        name: 'eviction',
        ok: false,
        detail: 'allkeys-lru with no memory limit: Redis may evict windows, which forgets calls; use volatile-* or noeviction',
      });
      expect(lru.text).toMatch(/^✗ eviction {5}allkeys-lru/m);
      expect(lru.text.endsWith('\nProblems found (✗ above).')).toBe(true);
      for (const c of lru.checks.filter((c) => c.name !== 'eviction')) expect(c.ok, `${c.name}: ${c.detail}`).toBe(true);

      await respOnce(redis, 'CONFIG', 'SET', 'maxmemory', String(100 * 2 ** 20));
      await respOnce(redis, 'CONFIG', 'SET', 'maxmemory-policy', 'volatile-lru');
      const volatile = await runDoctor({ redisUrl: redis.url });
      expect(check(volatile, 'eviction').ok).toBeUndefined();
      expect(check(volatile, 'eviction').detail).toMatch(/^volatile-lru with maxmemory 100 MiB: windows carry TTLs and can be evicted/);
      expect(volatile.ok).toBe(true); // worth knowing, not a problem
      expect(volatile.text).toMatch(/^· eviction {5}volatile-lru/m);
    } finally {
      await respOnce(redis, 'CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
      await respOnce(redis, 'CONFIG', 'SET', 'maxmemory', '0');
    }
  });

  it('fails topology on a replica: it refuses writes; the master then counts it', async () => {
    const replica = await another();
    await respOnce(replica, 'REPLICAOF', redis.host, String(redis.port));
    try {
      const result = await runDoctor({ redisUrl: replica.url });
      expect(result.ok).toBe(false);
      expect(check(result, 'topology')).toEqual({
        name: 'topology',
        ok: false,
        detail: `a replica of 127.0.0.1:${redis.port}: it refuses writes (READONLY); point the limiter at the master`,
      });
      expect(check(result, 'server').detail).toMatch(/role slave$/);
      // The master, once the replica is connected.
      for (let i = 0; (await redis.info('replication'))['connected_slaves'] !== '1'; i++) {
        if (i > 100) throw new Error('the replica never connected to the master');
        await sleep(50);
      }
      const master = await runDoctor({ redisUrl: redis.url });
      expect(check(master, 'topology')).toEqual({ name: 'topology', ok: true, detail: 'a single master with 1 replica(s)' });
    } finally {
      await replica.close();
    }
  });

  it('fails reachable on a closed port, saying the connection was refused, and checks nothing more', async () => {
    const port = await closedPort();
    const result = await runDoctor({ redisUrl: `redis://127.0.0.1:${port}` });
    expect(result.ok).toBe(false);
    expect(result.checks).toHaveLength(1);
    expect(result.checks[0]?.name).toBe('reachable');
    expect(result.checks[0]?.ok).toBe(false);
    expect(result.checks[0]?.detail).toMatch(new RegExp(`^127\\.0\\.0\\.1:${port}: connection refused`));
  });

  it('fails reachable on a frozen server (no answer in time) instead of throwing', async () => {
    const frozen = await another();
    frozen.freeze();
    try {
      const result = await runDoctor({ redisUrl: frozen.url, timeoutMs: 300 });
      expect(result.ok).toBe(false);
      expect(result.checks.map((c) => c.name)).toEqual(['reachable']);
      expect(result.checks[0]?.detail).toMatch(/no answer in time/);
    } finally {
      frozen.thaw();
    }
  });

  it('fails reachable on a server that wants a password instead of throwing; passes with it in the URL', async () => {
    const locked = await another();
    await respOnce(locked, 'CONFIG', 'SET', 'requirepass', 'sekret');
    const without = await runDoctor({ redisUrl: locked.url });
    expect(without.ok).toBe(false);
    expect(without.checks.map((c) => c.name)).toEqual(['reachable']);
    expect(without.checks[0]?.detail).toMatch(/authentication: .*NOAUTH.*\(put user:password in the URL\)/);
    const wrong = await runDoctor({ redisUrl: `redis://:wrong@127.0.0.1:${locked.port}` });
    expect(wrong.checks.map((c) => c.name)).toEqual(['reachable']);
    expect(wrong.checks[0]?.detail).toMatch(/authentication: .*WRONGPASS/);
    const right = await runDoctor({ redisUrl: `redis://:sekret@127.0.0.1:${locked.port}` });
    expect(right.ok, right.text).toBe(true);
    expect(right.checks.map((c) => c.name)).toEqual(SERVER_CHECKS);
  });

  it('throws ChaosUsageError for a URL that does not parse', async () => {
    await expect(runDoctor({ redisUrl: 'http://127.0.0.1:6379' })).rejects.toThrow(ChaosUsageError);
    await expect(runDoctor({ redisUrl: 'http://127.0.0.1:6379' })).rejects.toThrow(/^--redis: Expected a Redis URL.*scheme http:/);
    await expect(runDoctor({ redisUrl: '127.0.0.1:6379' })).rejects.toThrow(/host:port without redis:\/\//);
  });

  it("states a config module's options once the library has checked them: limit, window, mode, deadline, instances", async () => {
    const file = config('limiter.config.mjs', { mode: 'fail-closed', breaker: { timeoutMs: 75 }, local: { instances: 4 } });
    const result = await runDoctor({ redisUrl: redis.url, config: file });
    expect(result.ok, result.text).toBe(true);
    expect(result.checks.map((c) => c.name)).toEqual([...SERVER_CHECKS, 'options']);
    const options = check(result, 'options');
    expect(options.ok).toBe(true);
    expect(options.detail).toMatch(
      new RegExp(
        `^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: limit 20 per 1000 ms, mode 'fail-closed', deadline 75 ms, instances 4 \\(fixed\\), local share \\d+$`,
      ),
    );
    expect(result.text).toMatch(/^✓ options {6}/m);
  });

  it('fails the options check of a misspelled option, quoting the library (ERR_RESILIMIT_INVALID_OPTION)', async () => {
    const file = config('typo.config.mjs', { windowMS: 1000 });
    const result = await runDoctor({ redisUrl: redis.url, config: file });
    expect(result.ok).toBe(false);
    const options = check(result, 'options');
    expect(options.ok).toBe(false);
    expect(options.detail).toMatch(/createLimiter\(\) threw: .*ERR_RESILIMIT_INVALID_OPTION.*`windowMS`.*did you mean `windowMs`/);
    expect(options.detail).toContain(file);
    // The server's checks still pass: the problem is the config alone.
    for (const c of result.checks.filter((c) => c.name !== 'options')) expect(c.ok, `${c.name}: ${c.detail}`).toBe(true);
  });

  it('checks the options even when Redis is unreachable', async () => {
    const port = await closedPort();
    const file = config('alone.config.mjs', { mode: 'local' });
    const result = await runDoctor({ redisUrl: `redis://127.0.0.1:${port}`, config: file });
    expect(result.checks.map((c) => [c.name, c.ok])).toEqual([
      ['reachable', false],
      ['options', true],
    ]);
    expect(check(result, 'options').detail).toMatch(/limit 20 per 1000 ms, mode 'local', deadline 50 ms/);
  });
});
